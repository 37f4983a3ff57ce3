// One live run (run_session): its phases and the state they share. session.cpp holds the phases,
// session_stages.cpp the record stream's stage chain, session_sweeps.cpp the resource sweeps, run_facts.cpp the
// run's facts.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/registry.h>

#include "session.h"
#include "capture/descriptions.h"
#include "capture/engine_requests.h"
#include "capture/interpreter_watch.h"
#include "capture/native_capture.h"
#include "capture/object_calls_switch.h"
#include "capture/object_reads.h"
#include "capture/perf_events.h"
#include "capture/probe.h"
#include "capture/role_writer.h"
#include "common/clock.h"
#include "common/unique_fd.h"
#include "cpython/interpreter.h"
#include "debug_dump.h"
#include "elf/native_functions.h"
#include "export/live_table.h"
#include "export/run_info.h"
#include "launch/cgroup.h"
#include "launch/launcher.h"
#include "live_stuck.h"
#include "lotus_abi.h"
#include "metrics/endpoint.h"
#include "metrics/pipeline_metrics.h"
#include "model/record_dispatch.h"
#include "outputs.h"
#include "proc/process_tree.h"
#include "proc/proc_usage.h"
#include "reconstruction.h"
#include "record/record_file.h"
#include "terminal.h"

namespace lotus::cli {

// One live run, in the phases run_session calls in turn: plan, open the target, attach, loop, detach, finish.
// Members are declared in the order they must outlive each other (the cgroup first: removed last, once the
// launcher is gone).
class Session {
public:
    explicit Session(const Options& opts) : opts_(opts) {}

    // What to capture, from the options alone: the rules, the counters, the native functions.
    void plan();
    // The target found (attach) or started stopped at its interpreter (launch), and every output opened before
    // anything is attached or launched: a bad destination stops here.
    void open_target();
    // The probes loaded and attached to the target and the processes it has now; the launched command released.
    void attach();
    // Polls until a stop: a signal, --duration, the target's exit, or top's quit.
    void loop();
    // Drains the ring buffer and detaches everything, before the heavy writing.
    void detach();
    // The run's end into the record file and the outputs written; the exit status.
    int finish();

private:
    void open_outputs();
    void build_pipeline();
    void attach_probes();
    void attach_existing();
    void attach_native();
    void watch_trainer_calls();
    void feed(const void* data, size_t len);
    void on_record(const void* data, size_t len);
    void started_as(uint32_t pid);
    void known(uint32_t pid, uint32_t parent, bool is_root);
    void sweep(uint64_t now);
    void cgroup_sweep(uint64_t now, const std::vector<uint32_t>& pids);
    std::vector<uint32_t> live_pids() const
    {
        std::vector<uint32_t> live;
        for (const auto& [pid, p] : rec_->engine().processes())
            if (!p.exited)
                live.push_back(pid);
        return live;
    }
    void cgroup_exit(uint32_t pid);
    void cgroup_record(uint32_t pid, const launch::ProcessCgroup& cg, uint64_t now);
    int sleep_ms(uint64_t now) const;
    bool stop_due(uint64_t now);
    void tick(uint64_t now);
    void update_metrics(uint64_t now);
    void draw(uint64_t now);
    exporter::RunInfo run_info();

    const Options& opts_;
    // plan
    RuleLists lists_; // moved into the reconstruction when the pipeline is built
    bool evaluator_ = false;
    std::vector<capture::CounterSpec> counters_;
    std::vector<std::string> counter_names_;
    std::vector<elf::NativeSpec> native_specs_;
    // target and outputs
    std::unique_ptr<launch::JobCgroup> cgroup_;
    std::unique_ptr<launch::Launcher> launcher_;
    cpython::Interpreter interp_;
    int root_ = 0;
    std::unique_ptr<Outputs> outputs_;
    std::unique_ptr<record::RecordWriter> recorder_;
    std::shared_ptr<metrics::SharedRegistry> registry_; // --metrics: what the endpoint serves
    std::unique_ptr<metrics::Endpoint> endpoint_;
    std::shared_ptr<metrics::PipelineMetrics> metrics_;
    uint64_t last_metrics_ns_ = 0;
    std::optional<std::vector<uint64_t>> handlers_; // --all-calls on 3.11: the RESUME and RETURN_VALUE handlers
    uint64_t t0_ = 0;
    unsigned cpus_ = 0;
    // capture and the stream's stages: completion, the record file, the engine
    std::unique_ptr<capture::Probe> probe_;
    std::unique_ptr<capture::NativeCapture> native_;
    proc::ProcessTree tree_;
    std::unique_ptr<capture::Completion> completion_;
    std::unique_ptr<capture::RoleWriter> roles_;
    std::unique_ptr<capture::ObjectReads> object_reads_; // (none where the version's object layout is unknown)
    std::unique_ptr<capture::ObjectCallsSwitch> object_calls_; // --trainer-calls, where the probes allow it
    std::string trainer_calls_unavailable_; // why not, where they do not
    std::unique_ptr<capture::EngineRequests> requests_; // the engine's requests, answered by the three above
    std::unique_ptr<Reconstruction> rec_;
    std::unique_ptr<LiveStuck> stuck_; // processes that end no span inside work (live_stuck.h)
    // A new program (EXEC): its own environment (torchrun sets RANK), and maybe an interpreter to watch.
    struct ExecWatch : model::RecordHandler {
        Session& s;
        explicit ExecWatch(Session& session) : s(session) {}
        void process_event(const lotus_proc_event& p) override
        {
            if (p.h.type == LOTUS_EV_EXIT)
                s.cgroup_exit(p.h.tgid); // its cgroup's throttling at its end
            if (p.h.type != LOTUS_EV_EXEC)
                return;
            s.started_as(p.h.tgid);
            s.interpreters_->look_at(p.h.tgid, common::monotonic_ns());
        }
    } exec_watch_{*this};
    uint64_t last_sweep_ = 0;
    std::map<uint32_t, launch::ProcessCgroup> cgroups_; // each traced process's, read at its first sweep
    proc::ProcUsageReader proc_reader_;
    std::optional<proc::PssSchedule> pss_schedule_;
    std::unique_ptr<capture::InterpreterWatch> interpreters_;
    std::optional<DebugDump> debug_; // LOTUS_DEBUG_EVENTS
    uint64_t delivered_ = 0; // records read from the ring buffer: equals BPF's submitted count once drained
    size_t initial_ = 1;     // processes traced at attach
    // loop
    bool tty_ = false;
    uint64_t last_status_ = 0;
    std::optional<LiveScreen> screen_; // top: the live table, redrawn every second from the spans as they end
    exporter::LiveTable live_;
    std::string last_frame_;
    uint64_t last_frame_ns_ = 0;
    std::string stop_reason_;
    int launched_status_ = 0;
    common::UniqueFd exit_fd_;
    int fixed_poll_ms_ = 0;
    // detach
    capture::CaptureStats stats_;
    std::string evaluator_probe_, python_probes_, python_scope_, syscall_programs_;
    std::vector<std::string> kernel_lacks_; // what the kernel could not give this run (said at attach and in the end)
    size_t native_links_ = 0;
    std::optional<exporter::RunInfo::Holds> holds_;
    std::optional<exporter::RunInfo::AttachCost> attach_cost_; // loading, verifying, attaching the programs
};

} // namespace lotus::cli
