#include "report.h"

#include <algorithm>

#include <fmt/format.h>

#include "model/engine.h"
#include "rules_file.h"

namespace lotus::cli {

// --coarse keeps batches, waits and their arrows; --window keeps spans that start inside it.
bool in_trace(const model::Span& s, const Options& opts, uint64_t t0)
{
    using K = model::SpanKind;
    if (opts.coarse && s.kind != K::Batch && s.kind != K::Wait && s.kind != K::Consumed)
        return false;
    double start_s = s.start_ns > t0 ? static_cast<double>(s.start_ns - t0) / 1e9 : 0;
    return start_s >= opts.window_start_s && (opts.window_end_s <= 0 || start_s < opts.window_end_s);
}

// Writes the trace's end and prints the summary (live and replayed runs alike).
bool report(const Options& opts, Outputs& outputs, exporter::ChromeTraceWriter& trace, exporter::Summary& summary,
            model::Engine& engine, const model::Rules& rules, exporter::RunInfo run, bool calls_inlined)
{
    engine.finish();
    const auto& c = engine.counters();
    summary.set_native_map(engine.native_map().table());
    if (engine.counters().samples)
        run.native_map_json = summary.native_map_json();
    if (!summary.counter_rows().empty())
        run.counters_json = summary.counters_json();
    run.incomplete_spans = c.incomplete + c.lost_returns;
    for (size_t i = 0; i < rules.spans().size(); i++) {
        const auto& rule = rules.spans()[i];
        uint64_t calls = i < engine.span_calls().size() ? engine.span_calls()[i] : 0;
        run.span_patterns.push_back({rule.text, calls, !calls_inlined || (calls && !rule.maybe_inlined)});
    }
    run.samples = engine.samples();
    // The job's fate: every traced process that was killed or exited non-zero, in the order they ended.
    std::vector<std::pair<uint64_t, uint32_t>> ended;
    for (const auto& [pid, p] : engine.processes())
        if (!model::how_it_ended(p).empty())
            ended.emplace_back(p.exit_ns, pid);
    std::sort(ended.begin(), ended.end());
    std::vector<std::string> end_notes;
    for (const auto& [exit_ns, pid] : ended) {
        const auto& p = engine.processes().at(pid);
        exporter::RunInfo::ProcessEnd e{pid, model::process_label(engine.processes(), pid), model::how_it_ended(p),
                                        model::exit_signal(p), model::exit_code(p),
                                        exit_ns > trace.t0_ns() ? static_cast<double>(exit_ns - trace.t0_ns()) / 1e9 : 0};
        end_notes.push_back(fmt::format("{} (PID {}) {} at {:.2f} s.", e.label, pid, e.how, e.at_s));
        run.process_ends.push_back(std::move(e));
    }
    run.output_failures = outputs.failures();
    trace.finish(engine.processes(), run);
    outputs.trace().commit();

    auto batches = exporter::summarize_batches(engine.batches(), engine.processes(), summary);
    auto write_summary_json = [&] {
        if (auto* js = outputs.summary_json()) {
            run.output_failures = outputs.failures();
            js->write(summary.json(engine.processes(), batches, run));
            js->commit();
        }
    };
    if (!opts.print_summary) {
        if (!opts.record.empty()) {
            if (outputs.failures().empty())
                fmt::print(stderr, "lotus-bpf: wrote {} events ({} lost) to {}\n", run.events, run.lost_events,
                           opts.record);
        } else if (!outputs.trace().failed()) {
            fmt::print(stderr, "lotus-bpf: wrote {}\n", opts.output);
        }
        write_summary_json();
        return outputs.failures().empty();
    }
    std::vector<std::string> notes;
    notes.push_back(fmt::format("\n{} events, {} lost (ring buffer full); stopped: {}; trace: {}", run.events,
                                run.lost_events, run.stop_reason,
                                opts.output.empty() ? "none" : outputs.trace().failed() ? "not written" : opts.output));
    if (run.lost_events)
        notes.push_back("Spans that lost an event are left out, never guessed.");
    for (size_t i = 0; i < rules.spans().size(); i++) {
        const auto& rule = rules.spans()[i];
        uint64_t calls = i < engine.span_calls().size() ? engine.span_calls()[i] : 0;
        if (calls == 0)
            notes.push_back(fmt::format("--span '{}' was never seen: no call of a matching function entered the "
                                        "interpreter from C while tracing.{}",
                                        rule.text, calls_inlined ? " CPython 3.11+ runs calls made from Python code "
                                                                   "inline, which only --all-calls sees."
                                                                 : ""));
        else if (calls_inlined && rule.maybe_inlined)
            notes.push_back(fmt::format("--span '{}': {} call(s) seen, possibly not all of them: CPython 3.11+ runs "
                                        "calls made from Python code inline (once it has specialised their call "
                                        "site), and the default probes see only calls from C. --all-calls sees "
                                        "every call.",
                                        rule.text, calls));
    }
    if (c.incomplete + c.lost_returns)
        notes.push_back(fmt::format("{} span(s) were still open at the end or lost their return and are not in "
                                    "the trace.",
                                    c.incomplete + c.lost_returns));
    notes.insert(notes.end(), end_notes.begin(), end_notes.end());
    for (const auto& f : outputs.failures())
        notes.push_back("Not written: " + f);
    summary.print(stdout, engine.processes(), batches, notes);
    fflush(stdout);
    write_summary_json();
    return outputs.failures().empty();
}

std::pair<std::vector<std::string>, std::vector<std::string>> rule_lists(const Options& opts)
{
    std::vector<std::string> pipelines = opts.pipeline_classes, spans = opts.spans;
    if (!opts.rules_file.empty()) {
        auto file = load_rules_file(opts.rules_file);
        pipelines.insert(pipelines.end(), file.pipelines.begin(), file.pipelines.end());
        spans.insert(spans.end(), file.spans.begin(), file.spans.end());
    }
    return {pipelines, spans};
}

} // namespace lotus::cli
