#include "report.h"

#include "rules_file.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include "export/json.h"
#include "export/record_file.h"
#include "model/engine.h"

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

// The tracer's own peak resident memory (VmHWM), for the trace's metadata and the benchmark.
// The tracer's own CPU time so far (user + system, all its threads), for the trace's metadata and the benchmark.
long cpu_ms()
{
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L;
}

long peak_rss_kb()
{
    FILE* f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

Outputs::Outputs(const Options& opts)
{
    // No trace file wanted: the writer still runs (same code path) into a file that keeps nothing.
    trace_ = std::make_unique<exporter::OutputFile>(opts.output, exporter::OutputOptions{true, "-o"}, sink());
    if (!opts.summary_json.empty())
        summary_json_ = std::make_unique<exporter::OutputFile>(
            opts.summary_json, exporter::OutputOptions{true, "--summary-json"}, sink());
}

exporter::OutputFailure Outputs::sink()
{
    return [this](const std::string& line) {
        fmt::print(stderr, "{}lotus-bpf: {}\n", isatty(STDERR_FILENO) ? "\r\033[K" : "", line);
        failures_.push_back(line);
    };
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

static int replay_into(const Options& opts, exporter::RecordReader& in);

// A corrupt record file throws before anything is committed: the outputs keep what they had.
int replay(const Options& opts)
{
    exporter::RecordReader in(opts.replay);
    return replay_into(opts, in);
}

static int replay_into(const Options& opts, exporter::RecordReader& in)
{
    auto [pipelines, span_rules] = rule_lists(opts);
    auto meta = nlohmann::json::parse(in.header().meta_json, nullptr, false);
    if (!meta.is_object()) // format 4's checksum catches damage; older files are checked here
        throw exporter::RecordError(opts.replay + ": the header's metadata is damaged (not a JSON object); not replayed");
    auto strings = [&](const char* key) {
        std::vector<std::string> out;
        if (meta.is_object() && meta.contains(key) && meta[key].is_array())
            for (const auto& n : meta[key])
                if (n.is_string())
                    out.push_back(n.get<std::string>());
        return out;
    };
    // The rules the capture ran with (they decided what BPF emitted), plus any given now.
    for (auto& p : strings("pipelines"))
        pipelines.push_back(p);
    for (auto& sp : strings("spans"))
        span_rules.push_back(sp);
    Outputs outputs(opts);
    model::Rules rules(pipelines, span_rules);
    uint64_t t0 = in.header().t0_ns;
    exporter::ChromeTraceWriter trace(outputs.trace(), t0);
    exporter::Summary summary;
    trace.set_counter_names(strings("counters"));
    summary.set_counter_names(strings("counters"));
    model::Engine engine(rules, [&](const model::Span& s) {
        summary.add(s);
        if (in_trace(s, opts, t0))
            trace.span(s);
    });
    // The stream as it was captured, into the engine (the records capture added included); only the end
    // record's counts are the session's.
    std::vector<uint8_t> rec;
    uint64_t events = 0, captured = 0, lost = 0;
    while (in.next(rec)) {
        auto* h = reinterpret_cast<const lotus_event_header*>(rec.data());
        if (h->type == exporter::kRecordEnd && rec.size() >= sizeof(exporter::RecordEnd)) {
            auto* end = reinterpret_cast<const exporter::RecordEnd*>(rec.data());
            captured = end->submitted;
            lost = end->lost;
            continue;
        }
        events += h->type != model::kRecordProcess && h->type != model::kRecordSlots; // as captured
        engine.consume(rec.data(), rec.size());
    }
    auto str = [&](const char* k) {
        return meta.contains(k) && meta[k].is_string() ? meta[k].get<std::string>() : std::string("?");
    };
    exporter::RunInfo run;
    run.tool = "lotus-bpf " LOTUS_VERSION;
    run.target_pid = in.header().root_pid;
    run.t0_monotonic_ns = in.header().t0_ns;
    run.python = str("python");
    run.interpreter = str("interpreter");
    run.layout = str("layout");
    run.events = captured ? captured : events;
    run.lost_events = lost;
    run.stop_reason = "replayed " + opts.replay;
    run.tracer_peak_rss_kb = peak_rss_kb();
    run.tracer_cpu_ms = cpu_ms();
    // Whether the capture's default probes missed inlined calls: CPython 3.11+ without --all-calls.
    std::string py = meta.is_object() && meta.contains("python") && meta["python"].is_string() ? meta["python"].get<std::string>() : "";
    bool all_calls = meta.is_object() && meta.contains("all_calls") && meta["all_calls"].is_boolean() && meta["all_calls"].get<bool>();
    bool inlined = !all_calls && py.rfind("3.10", 0) != 0;
    return report(opts, outputs, trace, summary, engine, rules, std::move(run), inlined) ? 0 : kExitOutputFailed;
}

} // namespace lotus::cli
