#include "reconstruction.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/printable.h"
#include "export/html_report.h"
#include "model/engine.h"
#include "model/node_streams.h"
#include "rules_file.h"

namespace lotus::cli {

namespace {

// The run's sinks in the order they are fed: `first` (the report's figures, the observers), then the outputs'.
std::vector<Sink*> start_sinks(const Outputs& outputs, std::vector<Sink*> first, const RunStart& start)
{
    for (const auto& s : outputs.sinks())
        first.push_back(s.get());
    for (auto* s : first)
        s->begin(start);
    return first;
}

} // namespace

Reconstruction::Reconstruction(const Options& opts, Outputs& outputs, RuleLists lists, uint64_t t0,
                               const std::vector<std::string>& counter_names, model::CaptureRequests* requests)
    : opts_(opts), outputs_(outputs), t0_(t0),
      rules_(std::move(lists.pipelines), std::move(lists.spans), std::move(lists.framework)),
      figures_(t0, counter_names),
      sinks_(start_sinks(outputs, {&figures_, &observers_}, RunStart{t0, counter_names})),
      usage_([this](const model::UsagePoint& p) {
          for (auto* s : sinks_)
              s->usage(p);
      }),
      engine_(rules_,
              [this](const model::Span& s) {
                  for (auto* sink : sinks_)
                      sink->span(s);
              },
              requests)
{
    usage_.on_host([this](const model::RecordHostCpu& h) { figures_.summary.host_cpu(h); });
    // An exited process folded into its role's row: each figure kept by pid follows it.
    engine_.set_fold_sink([this](uint32_t pid, uint32_t into) {
        usage_.fold(pid, into);
        for (auto* s : sinks_)
            s->folded({pid, into, engine_.processes()});
    });
}

bool Reconstruction::finish(exporter::RunInfo run, bool calls_inlined)
{
    engine_.finish();
    for (const auto& [owner, j] : engine_.batches().joins())
        if (j.loader >= 0)
            figures_.summary.merge_group({owner, -1}, {owner, j.loader});
    usage_.finish();
    add_stream_facts(run, calls_inlined);
    job_limits(run);
    for (const auto& c : engine_.containers())
        run.containers.push_back({c.op, c.callees, c.calls, c.pid, c.in_pipeline});
    Said said;
    said.ended = process_ends(run);
    said.late = native_late(run);
    said.interpreters = interpreters(run);
    said.calls = calls_unprobed(run);
    run.output_failures = outputs_.failures();
    for (auto* s : sinks_)
        s->end_of_stream(run, engine_.processes());
    exporter::take_output_cuts(run, outputs_.cuts(), t0_); // the trace's and the record file's, if cut

    std::string trace_cut;
    for (const auto& c : run.outputs_cut)
        if (c.output == "-o" && c.path == opts_.output)
            trace_cut = fmt::format(" (cut at {:.2f} s)", c.at_s);
    auto rep = report(run, said, trace_cut, calls_inlined);
    if (!opts_.print_summary)
        say_written(run, trace_cut);
    RunEnd end{run, rep, figures_.timeline, engine_.processes(), outputs_.failures(), t0_};
    for (auto* s : sinks_)
        s->end_of_run(end);
    return outputs_.failures().empty();
}

// The report, built once from the figures, the batch analyses and the run's facts, for every sink that renders it.
exporter::Report Reconstruction::report(exporter::RunInfo& run, const Said& said, const std::string& trace_cut,
                                        bool calls_inlined)
{
    // Without readings only the processes forked while traced would have figures (from the kernel at their exit):
    // no table rather than a "job" missing the others.
    auto usage_rows = run.resources_interval_ms ? exporter::usage_rows(usage_, engine_.processes())
                                                : std::vector<exporter::UsageRow>{};
    double cpus = run.job_cpus;
    figures_.summary.set_process_usage(run.resources_interval_ms ? &usage_.processes() : nullptr);
    auto batches = exporter::summarize_batches(engine_.batches(), engine_.processes(), figures_.summary, cpus,
                                                &engine_.wait_causes());
    auto notes = summary_notes(run, said, trace_cut, calls_inlined);
    auto report = exporter::build_report({figures_.summary, batches, engine_.processes(), run, std::move(notes),
                                          std::move(usage_rows), run.resources_interval_ms, node_of_,
                                          &engine_.batches(), &engine_.wait_causes()});
    auto at = [&](uint64_t ns) { return ns > t0_ ? static_cast<double>(ns - t0_) / 1e9 : 0.0; };
    for (const auto& e : stuck_.episodes())
        report.stuck.push_back({e.pid, model::process_label(engine_.processes(), e.pid), at(e.since_ns), at(e.said_ns),
                                e.end_ns ? at(e.end_ns) : -1, static_cast<double>(e.threshold_ns) / 1e9, e.sample,
                                e.batch, e.op, e.stack});
    if (run.resources_interval_ms) {
        exporter::JobMemory jm;
        if (run.cgroup && run.cgroup->have_memory)
            jm.limit_bytes = run.cgroup->memory_limit;
        jm.peak_pss_mb = static_cast<double>(usage_.job().peak_pss_sum_kb) / 1024;
        report.worker_memory = figures_.worker_memory.finish(engine_.processes(), jm);
    }
    return report;
}

// Without the printed summary (record, export): what was written, in a line.
void Reconstruction::say_written(const exporter::RunInfo& run, const std::string& trace_cut) const
{
    if (!opts_.record.empty()) {
        if (outputs_.failures().empty())
            fmt::print(stderr, "lotus-bpf: wrote {} events ({} lost) to {}\n", run.events, run.lost_events,
                       opts_.record);
    } else if (!opts_.output.empty() && !outputs_.trace_failed()) {
        fmt::print(stderr, "lotus-bpf: wrote {}{}\n", opts_.output, trace_cut);
    }
}

// The job's cgroup limits from the stream (RecordCgroup), and the CPUs it may use: the fewest of the CPUs it may
// run on (its affinity), a --cpus limit below them, its cgroup's quota over its period and its cpuset.
void Reconstruction::job_limits(exporter::RunInfo& run) const
{
    auto l = usage_.limits();
    if (l.known) {
        exporter::RunInfo::CgroupLimits c;
        c.path = l.path;
        c.version = l.v1 && l.v2 ? "v1 and v2" : l.v2 ? "v2" : "v1";
        c.cgroups = l.cgroups;
        c.have_quota = l.have_quota;
        c.quota_cpus = l.quota_cpus();
        c.quota_us = l.quota_us;
        c.period_us = l.period_us;
        c.have_cpuset = l.have_cpuset;
        c.cpuset_cpus = l.cpuset_cpus;
        c.cpuset = l.cpuset;
        c.have_memory = l.have_memory;
        c.memory_limit = l.memory_limit == model::kNoMemoryLimit ? 0 : l.memory_limit;
        c.have_throttle = l.have_throttle;
        c.periods = l.periods;
        c.throttled_periods = l.throttled_periods;
        c.throttled_s = static_cast<double>(l.throttled_ns) / 1e9;
        run.cgroup = std::move(c);
    }
    run.job_cpus = 0;
    auto fewer = [&](double n, const char* from) {
        if (n > 0 && (run.job_cpus == 0 || n < run.job_cpus)) {
            run.job_cpus = n;
            run.cpus_from = from;
        }
    };
    fewer(run.cpus, "the CPUs it may run on (its affinity)");
    if (run.cgroup && run.cgroup->have_cpuset)
        fewer(run.cgroup->cpuset_cpus, "its cgroup's cpuset");
    if (run.limits)
        fewer(run.limits->cpus, "--cpus");
    if (run.cgroup && run.cgroup->have_quota)
        fewer(run.cgroup->quota_cpus, "its cgroup's CPU quota");
}

std::string container_note(const exporter::RunInfo::Container& c)
{
    return fmt::format("{} ran other callables in turn ({}{}) and came out as one op: `--pipeline {}` would show them "
                       "as ops. (Seen in {} of its calls{}: lotus-bpf sees an op's inner calls only while their classes "
                       "are new to it.)",
                       c.op, fmt::join(c.callees.begin(), c.callees.begin() + std::min<size_t>(c.callees.size(), 8), ", "),
                       c.callees.size() > 8 ? ", ..." : "", c.op, c.calls_seen,
                       c.in_pipeline ? ", inside a pipeline's sample" : ", called by the dataset's __getitem__ in the "
                                                                       "pipeline's place");
}

// The job's cgroup limits in words: each limit, or that it could not be read, and its throttling.
std::vector<std::string> cgroup_notes(const exporter::RunInfo& run)
{
    if (!run.cgroup)
        return {"The job's cgroup was not read (a record made before lotus-bpf read it, or /proc/PID/cgroup was "
                "unreadable): its CPU quota, cpuset and memory limit are not known."};
    const auto& c = *run.cgroup;
    std::vector<std::string> parts;
    if (!c.have_quota)
        parts.push_back("CPU quota not readable");
    else if (c.quota_cpus > 0)
        parts.push_back(fmt::format("CPU quota {:g} CPU(s) ({} us per {} us period)", c.quota_cpus, c.quota_us,
                                    c.period_us));
    else
        parts.push_back("no CPU quota");
    parts.push_back(c.have_cpuset ? fmt::format("cpuset {} ({} CPU(s))", c.cpuset, c.cpuset_cpus)
                                  : std::string("cpuset not readable"));
    if (!c.have_memory)
        parts.push_back("memory limit not readable");
    else if (c.memory_limit)
        parts.push_back(fmt::format("memory limit {:.0f} MiB", static_cast<double>(c.memory_limit) / (1 << 20)));
    else
        parts.push_back("no memory limit");
    if (c.have_throttle)
        parts.push_back(fmt::format("CPU throttled in {} of {} periods, {:.2f} s in all (cpu.stat)", c.throttled_periods,
                                    c.periods, c.throttled_s));
    else
        parts.push_back("throttling not readable");
    std::string where = c.cgroups > 1 ? fmt::format("{} cgroups, the tightest of each limit; the first {}", c.cgroups, c.path)
                                      : c.path;
    std::string note = fmt::format("The job's cgroup (cgroup {}, {}): {}.", c.version, where,
                                   fmt::join(parts, "; "));
    if (run.job_cpus > 0)
        note += fmt::format(" The advice counts the {:g} CPU(s) the job may use ({}).", run.job_cpus, run.cpus_from);
    return {note};
}

// What only the stream's end knows: the native map and counters tables, each --span's calls, the samples.
void Reconstruction::add_stream_facts(exporter::RunInfo& run, bool calls_inlined)
{
    const auto& c = engine_.counters();
    figures_.summary.set_native_map(engine_.native_map().table());
    if (engine_.counters().samples)
        run.native_map_json = figures_.summary.native_map_json();
    if (!figures_.summary.counter_rows().empty())
        run.counters_json = figures_.summary.counters_json();
    run.incomplete_spans = c.incomplete + c.lost_returns;
    run.native_calls_unended = c.native_unended;
    for (size_t i = 0; i < rules_.spans().size(); i++) {
        const auto& rule = rules_.spans()[i];
        uint64_t calls = i < engine_.span_calls().size() ? engine_.span_calls()[i] : 0;
        run.span_patterns.push_back({rule.text, calls, !calls_inlined || (calls && !rule.maybe_inlined)});
    }
    run.samples = engine_.samples();
}

// The job's fate: every traced process that was killed or exited non-zero, in the order they ended.
Reconstruction::Ended Reconstruction::process_ends(exporter::RunInfo& run)
{
    Ended out;
    for (const auto& [pid, p] : engine_.processes())
        if (!model::how_it_ended(p).empty())
            out.order.emplace_back(p.exit_ns, pid);
    std::sort(out.order.begin(), out.order.end());
    for (const auto& [exit_ns, pid] : out.order) {
        const auto& p = engine_.processes().at(pid);
        exporter::RunInfo::ProcessEnd e{pid, model::process_label(engine_.processes(), pid), model::how_it_ended(p),
                                        model::exit_signal(p), model::exit_code(p),
                                        exit_ns > t0_ ? static_cast<double>(exit_ns - t0_) / 1e9 : 0};
        out.notes.push_back(fmt::format("{} (PID {}) {} at {:.2f} s.", e.label, pid, e.how, e.at_s));
        run.process_ends.push_back(std::move(e));
    }
    return out;
}

// Native calls a process made into a library it loaded before lotus-bpf had probed it are not in the trace: said
// where the process had begun its work by then (loaded at startup, before any span, it did not matter).
std::vector<std::string> Reconstruction::native_late(exporter::RunInfo& run)
{
    std::vector<std::string> notes;
    for (const auto& l : engine_.native_late()) {
        auto p = engine_.processes().find(l.pid);
        uint64_t first = p != engine_.processes().end() ? p->second.first_span_ns : 0;
        uint64_t t0 = t0_;
        exporter::RunInfo::NativeLate n{l.pid, model::process_label(engine_.processes(), l.pid), l.library,
                                        l.loaded_ns > t0 ? static_cast<double>(l.loaded_ns - t0) / 1e9 : 0,
                                        l.live_ns > l.loaded_ns ? static_cast<double>(l.live_ns - l.loaded_ns) / 1e6 : 0,
                                        first && first < l.live_ns};
        if (n.during_work)
            notes.push_back(fmt::format(
                "{} (PID {}) loaded {} at {:.2f} s, while it ran spans, and its native probes were in place {:.1f} ms "
                "later: calls it made into it before then may be missing from the trace and the native counts.",
                n.label, l.pid, l.library, n.loaded_s, n.probed_after_ms));
        run.native_late.push_back(std::move(n));
    }
    return notes;
}

// A traced process that runs another interpreter than the probed file reaches no Python probe: its ops and samples
// are missing, which the tables alone would not tell. So too a Python process of the command outside the tree.
std::vector<std::string> Reconstruction::interpreters(exporter::RunInfo& run)
{
    std::vector<std::string> notes;
    for (const auto& o : engine_.other_interpreters()) {
        exporter::RunInfo::OtherInterpreter n{o.pid, model::process_label(engine_.processes(), o.pid), o.path};
        notes.push_back(fmt::format(
            "{} (PID {}) runs {}, another CPython interpreter than the one lotus-bpf probes ({}): its Python calls "
            "and those of the processes it forks (their ops and samples) are not in the trace.",
            n.label, o.pid, o.path, run.interpreter.empty() ? "unknown" : run.interpreter));
        run.other_interpreters.push_back(std::move(n));
    }
    for (const auto& u : engine_.untraced_pythons()) {
        notes.push_back(fmt::format(
            "PID {} ({}) ran CPython ({}) under the launched command but outside the traced process's tree: it was "
            "not traced. Launch mode traces the first of the command's processes to run CPython (PID {}) and the "
            "processes it starts; attach to another one with --pid.",
            u.pid, u.comm, u.path, run.target_pid));
        run.untraced_pythons.push_back({u.pid, u.comm, u.path});
    }
    return notes;
}

// --trainer-calls: the training processes whose object calls went unprobed, and from when, so that a transform on
// batches there is known to be missing; or, where the probe could not be taken away, that it stayed.
std::vector<std::string> Reconstruction::calls_unprobed(exporter::RunInfo& run)
{
    std::vector<std::string> notes;
    uint64_t t0 = t0_;
    auto at_s = [t0](uint64_t ns) { return ns > t0 ? static_cast<double>(ns - t0) / 1e9 : 0.0; };
    bool kept = false;
    for (const auto& [pid, p] : engine_.processes()) {
        kept = kept || p.calls_kept_ns;
        if (!p.calls_off_ns)
            continue;
        exporter::RunInfo::CallsUnprobed c{pid, model::process_label(engine_.processes(), pid), at_s(p.calls_off_ns),
                                           p.calls_on_ns ? at_s(p.calls_on_ns) : -1, p.batches_unprobed,
                                           p.calls_cut};
        std::string until = c.until_s >= 0 ? fmt::format(" to {:.2f} s", c.until_s) : std::string(" on");
        const char* why = p.calls_off_mode == model::kCallsOff    ? " off, from its first DataLoader"
                          : p.calls_off_mode == model::kCallsAuto ? " auto, as it iterated DataLoaders with workers"
                                                                  : "";
        std::string note = fmt::format(
            "{} (PID {}): its object calls were not probed from {:.2f} s{} (--trainer-calls{}): a pipeline it called "
            "itself then (a transform on batches) is not in the trace.",
            c.label, pid, c.from_s, until, why);
        if (c.batches_unprobed && c.until_s >= 0)
            note += fmt::format(" {} next() call(s) of a DataLoader without workers began before the probe was back: "
                                "those batches' ops may be missing.", c.batches_unprobed);
        else if (c.batches_unprobed)
            note += fmt::format(" {} next() call(s) of a DataLoader without workers ran then: those batches' ops are "
                                "not in the trace.", c.batches_unprobed);
        if (c.calls_cut)
            note += fmt::format(" {} call(s) in flight when the probe went are left out.", c.calls_cut);
        notes.push_back(std::move(note));
        run.object_calls_unprobed.push_back(std::move(c));
    }
    if (kept && !run.trainer_calls_unavailable.empty() && run.trainer_calls != "on")
        notes.push_back(fmt::format("--trainer-calls {}: every object call of the training processes stayed probed, "
                                    "as {}: each call of a model's modules trapped.",
                                    run.trainer_calls, run.trainer_calls_unavailable));
    return notes;
}

// What --span saw, said where it saw nothing or maybe not every call.
std::vector<std::string> Reconstruction::span_notes(bool calls_inlined) const
{
    std::vector<std::string> notes;
    for (size_t i = 0; i < rules_.spans().size(); i++) {
        const auto& rule = rules_.spans()[i];
        uint64_t calls = i < engine_.span_calls().size() ? engine_.span_calls()[i] : 0;
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
    return notes;
}

// The summary's closing notes, in order: the run, what BPF or the stream could not record, the rules, the holds,
// the processes' fates, the limits, the outputs.
// The processes the live watch named stuck (RecordStuck): which, from when, for how long, where.
std::vector<std::string> Reconstruction::stuck_notes() const
{
    std::vector<std::string> notes;
    auto at = [&](uint64_t ns) { return ns > t0_ ? static_cast<double>(ns - t0_) / 1e9 : 0.0; };
    for (const auto& e : stuck_.episodes()) {
        std::string where;
        if (e.batch >= 0)
            where += fmt::format(" in batch {}", e.batch);
        if (e.sample >= 0)
            where += fmt::format("{} sample {}", where.empty() ? " in" : ",", e.sample);
        if (!e.op.empty())
            where += fmt::format("{} op {}", where.empty() ? " in" : ",", common::printable(e.op));
        std::string frames; // its innermost two frames
        size_t from = 0;
        for (int i = 0; i < 2 && from < e.stack.size(); i++) {
            size_t nl = e.stack.find('\n', from);
            std::string f = e.stack.substr(from, nl == std::string::npos ? std::string::npos : nl - from);
            f.erase(0, f.find_first_not_of(' '));
            frames += (frames.empty() ? "" : " <- ") + common::printable(f);
            from = nl == std::string::npos ? e.stack.size() : nl + 1;
        }
        notes.push_back(fmt::format(
            "{} (PID {}) was stuck{} {} (named when it had ended no span for {:.1f} s, its threshold){}.",
            model::process_label(engine_.processes(), e.pid), e.pid, where,
            e.end_ns ? fmt::format("for {:.1f} s, from {:.2f} s to {:.2f} s",
                                   static_cast<double>(e.end_ns - e.since_ns) / 1e9, at(e.since_ns), at(e.end_ns))
                     : fmt::format("from {:.2f} s, and still was when tracing stopped", at(e.since_ns)),
            static_cast<double>(e.threshold_ns) / 1e9, frames.empty() ? "" : "; its stack: " + frames));
    }
    return notes;
}

std::vector<std::string> Reconstruction::summary_notes(const exporter::RunInfo& run, const Said& said,
                                                       const std::string& trace_cut, bool calls_inlined) const
{
    const auto& c = engine_.counters();
    std::vector<std::string> notes;
    notes.push_back(fmt::format("\n{} events, {} lost (ring buffer full); stopped: {}; trace: {}", run.events,
                                run.lost_events, run.stop_reason,
                                opts_.output.empty() ? "none" : outputs_.trace_failed() ? "not written" : opts_.output + trace_cut));
    if (run.lost_events)
        notes.push_back("Spans that lost an event are left out, never guessed.");
    if (!run.kernel.empty()) // the plan, in one line (live runs)
        notes.push_back(fmt::format("Probes on Linux {}: Python calls at the {}, in {}, by {}; syscalls: {}.", run.kernel,
                                    run.python_probes, run.python_probes_scope == "system-wide"
                                                           ? "every process of the interpreter (system-wide)"
                                                           : "the traced processes only",
                                    run.evaluator_probe, run.syscall_programs));
    for (const auto& lack : run.kernel_lacks)
        notes.push_back(fmt::format("Kernel {}: {}.", run.kernel, lack));
    if (!run.nodes.empty()) {
        std::string list;
        for (const auto& n : run.nodes)
            list += fmt::format("{}{} ({}, clock {:+.3f} ms)", list.empty() ? "" : ", ", n.name, n.record,
                                n.clock_offset_ms);
        notes.push_back(fmt::format("{} nodes in one reconstruction: {}. Each record is placed on one clock by the "
                                    "CLOCK_REALTIME its capture read at its start, which assumes the nodes' clocks "
                                    "were synchronised (NTP, PTP): an error there shifts one node's spans against the "
                                    "others', never a duration.", run.nodes.size(), list));
        for (const auto& n : run.nodes)
            if (n.ids_moved)
                notes.push_back(fmt::format("The process ids of {} collided with an earlier node's: its processes are "
                                            "shown with {} added to their pids.", n.name,
                                            static_cast<uint64_t>(n.ids_moved) * model::kNodeIdStride));
    }
    for (const auto& f : run.bpf_failures) // what BPF could not record: said where it happened
        if (f.count)
            notes.push_back(fmt::format("BPF: {} {} (otherData.bpf_failures.{}).", f.count, f.meaning, f.name));
    notes.insert(notes.end(), said.interpreters.begin(), said.interpreters.end());
    for (auto& n : span_notes(calls_inlined))
        notes.push_back(std::move(n));
    if (c.incomplete + c.lost_returns)
        notes.push_back(fmt::format("{} span(s) were still open at the end or lost their return and are not in "
                                    "the trace.",
                                    c.incomplete + c.lost_returns));
    if (run.native_calls_unended)
        notes.push_back(fmt::format("{} probed native call(s) left their function other than by its return "
                                    "instructions (an exception, or a tail call): they are not native spans "
                                    "(otherData.native_calls_unended).", run.native_calls_unended));
    if (run.native && !run.native->without_returns.empty())
        notes.push_back(fmt::format("{} native function(s) selected but not probed: no return instruction of their "
                                    "own was found (they end by tail calls, or their code did not decode): {}.",
                                    run.native->without_returns.size(),
                                    fmt::join(run.native->without_returns.begin(),
                                              run.native->without_returns.begin() +
                                                  std::min<size_t>(run.native->without_returns.size(), 5), ", ")));
    if (run.holds)
        if (auto n = exporter::holds_note(*run.holds); !n.empty())
            notes.push_back(std::move(n));
    notes.insert(notes.end(), said.late.begin(), said.late.end());
    notes.insert(notes.end(), said.calls.begin(), said.calls.end());
    notes.insert(notes.end(), said.ended.notes.begin(), said.ended.notes.end());
    if (run.limits)
        for (auto& n : limit_notes(*run.limits, engine_.processes(), said.ended.order))
            notes.push_back(std::move(n));
    for (auto& n : cgroup_notes(run))
        notes.push_back(std::move(n));
    for (auto& n : stuck_notes())
        notes.push_back(std::move(n));
    for (const auto& c : run.containers)
        notes.push_back(container_note(c));
    for (const auto& f : outputs_.failures())
        notes.push_back("Not written: " + f);
    for (const auto& cut : run.outputs_cut)
        notes.push_back(fmt::format("Cut at {:.2f} s: {} {}: {} (--disk-reserve). It keeps what it had until then, "
                                    "completed; the other outputs went on.",
                                    cut.at_s, cut.output, cut.path, cut.why));
    return notes;
}

std::vector<std::string> limit_notes(const exporter::RunInfo::Limits& l,
                                     const std::map<uint32_t, model::ProcessInfo>& processes,
                                     const std::vector<std::pair<uint64_t, uint32_t>>& ended)
{
    std::vector<std::string> out;
    auto mib = [](uint64_t b) { return static_cast<double>(b) / (1 << 20); };
    std::string asked;
    if (l.cpus > 0)
        asked += fmt::format("{}{:g} CPU(s)", asked.empty() ? "" : ", ", l.cpus);
    if (l.memory_bytes)
        asked += fmt::format("{}memory {:.0f} MiB", asked.empty() ? "" : ", ", mib(l.memory_bytes));
    if (!l.cpuset.empty())
        asked += fmt::format("{}CPUs {}", asked.empty() ? "" : ", ", l.cpuset);
    for (const auto& [dev, bps] : l.read_bps)
        asked += fmt::format("{}reads from {} at most {:.1f} MiB/s", asked.empty() ? "" : ", ", dev, mib(bps));
    for (const auto& [dev, bps] : l.write_bps)
        asked += fmt::format("{}writes to {} at most {:.1f} MiB/s", asked.empty() ? "" : ", ", dev, mib(bps));
    std::string seen;
    if (l.have_cpu && l.cpus > 0)
        seen += fmt::format("; CPU throttled in {} of {} periods of 100 ms, {:.2f} s in all", l.throttled_periods,
                            l.periods, static_cast<double>(l.throttled_ns) / 1e9);
    if (l.have_memory && l.memory_bytes)
        seen += fmt::format("; memory peak {:.0f} MiB of {:.0f} MiB, the limit reached {} time(s)", mib(l.memory_peak_bytes),
                            mib(l.memory_bytes), l.memory_limit_hits);
    if (l.have_io && (!l.read_bps.empty() || !l.write_bps.empty()))
        seen += fmt::format("; {:.1f} MiB read and {:.1f} MiB written on the limited device(s)", mib(l.io_read_bytes),
                            mib(l.io_write_bytes));
    out.push_back(fmt::format("Limits (cgroup {}, made for this run and removed): {}{}.", l.cgroup, asked, seen));
    if (l.oom_kills) {
        std::vector<std::string> killed;
        for (const auto& [ns, pid] : ended)
            if (model::exit_signal(processes.at(pid)) == 9)
                killed.push_back(fmt::format("{} (PID {})", model::process_label(processes, pid), pid));
        if (killed.size() == l.oom_kills)
            for (const auto& k : killed)
                out.push_back(fmt::format("{} was killed by the kernel's OOM killer: the job's memory limit is {:.0f} MiB "
                                          "(--memory), its peak {:.0f} MiB.",
                                          k, mib(l.memory_bytes), mib(l.memory_peak_bytes)));
        else
            out.push_back(fmt::format("The kernel's OOM killer killed {} process(es) in the job's cgroup (memory limit "
                                      "{:.0f} MiB, peak {:.0f} MiB); killed by SIGKILL while traced: {}.",
                                      l.oom_kills, mib(l.memory_bytes), mib(l.memory_peak_bytes),
                                      killed.empty() ? std::string("none seen") : fmt::format("{}", fmt::join(killed, ", "))));
    }
    if (l.left_running)
        out.push_back(fmt::format("{} process(es) of the job were still running when tracing stopped: moved out of its "
                                  "cgroup, they run on without the limits.",
                                  l.left_running));
    return out;
}

bool calls_inlined(const cpython::VersionCaps& caps, bool all_calls)
{
    return !all_calls && caps.inlines_calls;
}

RuleLists rule_lists(const Options& opts)
{
    RuleLists r{opts.pipeline_classes, opts.spans, nullptr};
    if (!opts.rules_file.empty()) {
        auto file = load_rules_file(opts.rules_file);
        r.pipelines.insert(r.pipelines.end(), file.pipelines.begin(), file.pipelines.end());
        r.spans.insert(r.spans.end(), file.spans.begin(), file.spans.end());
        r.framework = std::move(file.framework);
    }
    return r;
}

} // namespace lotus::cli
