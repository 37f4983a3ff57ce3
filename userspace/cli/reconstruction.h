// The one pipeline from a record stream to the run's outputs, shared by the live and the replayed session:
// the rules and the engine, built from the options here, feeding the report's figures and the run's sinks
// (outputs.h) each span, reading and fold; at the end the run's facts, the report, and each sink's end.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cpython/cpython_layouts.h"
#include "export/run_info.h"
#include "export/report.h"
#include "model/usage.h"
#include "model/engine.h"
#include "outputs.h"
#include "report_figures.h"
#include "options.h"

namespace lotus::cli {

// The rules a run reconstructs with: --pipeline/--span plus those of --rules FILE (and, on replay, those the
// capture ran with).
struct RuleLists {
    std::vector<std::string> pipelines, spans;
    // The torch/torchvision knowledge of the --rules file (or, on replay, of the record's capture); null: built in.
    std::shared_ptr<const model::framework::Framework> framework;
    const model::framework::Framework& knowledge() const { return framework ? *framework : model::framework::builtin(); }
};
RuleLists rule_lists(const Options& opts);

// Whether the capture's default probes missed calls CPython ran inline: a version that inlines calls, without
// --all-calls.
bool calls_inlined(const cpython::VersionCaps& caps, bool all_calls);

// The job's own cgroup limits (RunInfo::cgroup) and the CPUs the advice counts, in words; what was not read is said.
std::vector<std::string> cgroup_notes(const exporter::RunInfo& run);
// An op that ran other objects' calls in turn (model::Engine::containers): the --pipeline flag that would split it.
std::string container_note(const exporter::RunInfo::Container& c);
// What the summary says of --cpus/--memory/--cpuset: the limits and what the kernel counted, the processes the
// OOM killer killed (named where the count matches the processes seen killed by SIGKILL), a job left running.
// ended: (end time, pid) of the processes that did not end cleanly.
std::vector<std::string> limit_notes(const exporter::RunInfo::Limits& limits,
                                     const std::map<uint32_t, model::ProcessInfo>& processes,
                                     const std::vector<std::pair<uint64_t, uint32_t>>& ended);

class Reconstruction {
public:
    // t0: the run's start (CLOCK_MONOTONIC ns); counter_names: --counters' events, in slot order. roles/types:
    // the engine's notifications to capture (none on replay).
    Reconstruction(const Options& opts, Outputs& outputs, RuleLists rule_lists, uint64_t t0,
                   const std::vector<std::string>& counter_names, model::CaptureRequests* requests = nullptr);
    Reconstruction(const Reconstruction&) = delete;
    Reconstruction& operator=(const Reconstruction&) = delete;

    void consume(const void* data, size_t len)
    {
        engine_.consume(data, len);
        usage_.consume(data, len);
        stuck_.consume(data, len);
        figures_.worker_memory.consume(data, len);
    }
    // Also hands every span to `f` as it ends (the live view, the metrics).
    void observe(std::function<void(const model::Span&)> f) { observers_.spans.push_back(std::move(f)); }
    // Also hands every resource reading to `f` (the metrics).
    void observe_usage(std::function<void(const model::UsagePoint&)> f)
    {
        observers_.readings.push_back(std::move(f));
    }
    const model::Engine& engine() const { return engine_; }
    // Which node a process is on (the per-rank table). labelled: several nodes, so labels name theirs too.
    void set_node_of(std::function<std::string(uint32_t)> f, bool labelled)
    {
        node_of_ = f;
        if (labelled)
            engine_.set_node_of(std::move(f));
    }
    const model::Rules& rules() const { return rules_; }

    // Ends the run: each sink's end (the trace's, then with the report the printed summary and the files). run:
    // what the session knows of the run; the rest (samples, process ends, output failures...) is added here.
    // calls_inlined: the capture could not see calls CPython ran inline (3.11+ without --all-calls). False when
    // an output failed.
    bool finish(exporter::RunInfo run, bool calls_inlined);

private:
    // The processes that did not end cleanly, in the order they ended ((end time, pid)), and what is said of each.
    struct Ended {
        std::vector<std::pair<uint64_t, uint32_t>> order;
        std::vector<std::string> notes;
    };
    // What finish() learns for the summary's notes while it fills the run's facts.
    struct Said {
        Ended ended;
        std::vector<std::string> late, interpreters, calls;
    };
    void add_stream_facts(exporter::RunInfo& run, bool calls_inlined);
    void job_limits(exporter::RunInfo& run) const;
    Ended process_ends(exporter::RunInfo& run);
    std::vector<std::string> native_late(exporter::RunInfo& run);
    std::vector<std::string> interpreters(exporter::RunInfo& run);
    std::vector<std::string> calls_unprobed(exporter::RunInfo& run);
    std::vector<std::string> span_notes(bool calls_inlined) const;
    std::vector<std::string> stuck_notes() const;
    std::vector<std::string> summary_notes(const exporter::RunInfo& run, const Said& said, const std::string& trace_cut,
                                           bool calls_inlined) const;
    exporter::Report report(exporter::RunInfo& run, const Said& said, const std::string& trace_cut, bool calls_inlined);
    void say_written(const exporter::RunInfo& run, const std::string& trace_cut) const;

    const Options& opts_;
    Outputs& outputs_;
    uint64_t t0_;
    model::Rules rules_;
    ReportFigures figures_;
    Observers observers_;
    std::vector<Sink*> sinks_; // the figures, the observers, then the outputs' sinks
    std::function<std::string(uint32_t)> node_of_;
    model::UsageTracker usage_;
    model::StuckEpisodes stuck_; // the stream's RecordStuck
    model::Engine engine_; // last: it refers to the rules and its sink to the sinks
};

} // namespace lotus::cli
