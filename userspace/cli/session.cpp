#include "session.h"

#include <nlohmann/json.hpp>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <memory>

#include "capture/perf_events.h"
#include "common/clock.h"
#include "common/printable.h"
#include "common/wake_schedule.h"
#include "capture/probe.h"
#include "capture/native_capture.h"
#include "capture/descriptions.h"
#include "capture/object_reads.h"
#include "capture/object_calls_switch.h"
#include "capture/role_writer.h"
#include "proc/process_tree.h"
#include "capture/interpreter_watch.h"
#include "outputs.h"
#include "replay.h"
#include "reconstruction.h"
#include "rules_file.h"
#include "self_usage.h"
#include "terminal.h"
#include "live_stuck.h"
#include "export/live_table.h"
#include "export/chrome_trace.h"
#include "record/record_file.h"
#include "export/summary.h"
#include "model/engine.h"
#include "model/framework.h"
#include "model/messages.h"
#include "model/record_dispatch.h"
#include "elf/elf_file.h"
#include "cpython/interpreter.h"
#include "cpython/opcode_handlers.h"
#include "launch/cgroup.h"
#include "cpython/cpython_layouts.h"
#include "launch/launcher.h"
#include "proc/proc_maps.h"
#include "proc/host_cpu.h"
#include "proc/proc_usage.h"
#include "cpython/remote_memory.h"
#include "capture/bpf_failures.h"
#include "common/knobs.h"
#include "metrics/endpoint.h"
#include "metrics/pipeline_metrics.h"

namespace lotus::cli {

namespace {

using common::clock_ns;
using common::monotonic_ns;

std::atomic<int> g_stop_signal{0};

void on_signal(int sig) { g_stop_signal = sig; }

} // namespace

int stop_signal() { return g_stop_signal; }

void install_stop_handlers()
{
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; // no SA_RESTART: the poll returns at once
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
}

namespace {

// This thread's CPU time: what the PSS walks cost the tracer.
uint64_t thread_cpu_ns()
{
    return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

// True when fd is readable now (a pidfd: its process has exited).
bool readable(int fd)
{
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
}

// True when the process is gone or a zombie.
bool gone(int pid)
{
    if (!proc::process_exists(pid))
        return true;
    FILE* f = fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
    if (!f) // (EMFILE, ENFILE: descriptors short, not the process gone)
        return errno == ENOENT || errno == ESRCH;
    char buf[512] = {};
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    std::string s(buf, n);
    auto close = s.rfind(')');
    return close != std::string::npos && close + 2 < s.size() && (s[close + 2] == 'Z' || s[close + 2] == 'X');
}

// What the probe's holds were, for otherData and the summary.
exporter::RunInfo::Holds holds_info(const capture::HoldStats& h, unsigned deadline_ms,
                                    const std::vector<capture::GuardianCgroup>& guardian_cgroups)
{
    exporter::RunInfo::Holds r{h.children, h.total_ns / 1e6, h.max_ns / 1e6, h.attach_ns / 1e6};
    r.deadline_ms = deadline_ms;
    r.shared_memory = h.unheld_by[LOTUS_UNHELD_SHARED_MM];
    r.tracer_not_running = h.unheld_by[LOTUS_UNHELD_TRACER];
    r.guardian_not_running = h.unheld_by[LOTUS_UNHELD_GUARDIAN];
    r.refused = h.unheld_by[LOTUS_UNHELD_SIGNAL] + h.unheld_by[LOTUS_UNHELD_MAP];
    r.released_at_deadline = h.deadline_released;
    r.unseen = h.unseen_children;
    r.unseen_max_ms = h.unseen_max_ns / 1e6;
    r.unseen_total_ms = h.unseen_total_ns / 1e6;
    r.spawned_python = h.spawned_python;
    for (const auto& g : guardian_cgroups)
        r.guardian_cgroups.push_back({g.hierarchy, g.tracer, g.job, g.guardian, g.why, g.stuck});
    r.guardian_stuck = capture::stuck_note(guardian_cgroups).value_or("");
    return r;
}

// LOTUS_DEBUG_EVENTS=1: one line per record on stderr, to debug a reconstruction from its events; the details of
// the records that carry most of it.
class DebugDump : public model::RecordHandler {
public:
    explicit DebugDump(const model::framework::Framework& fw) : fw_(fw) {} // (the queues' pickle globals)
    void py_entry(const lotus_py_entry& e) override
    {
        line_ += fmt::format(" entry depth {} code {:#x} caller {:#x} self {:#x} type {:#x}", e.depth, e.code,
                             e.chain_len ? e.chain_code[0] : 0, e.self_obj, e.self_type);
    }
    void py_return(const lotus_py_return& r) override { line_ += fmt::format(" return depth {}", r.depth); }
    void type(const lotus_type_info& t) override
    {
        line_ += fmt::format(" type {:#x} own {} {:.{}}", t.type, t.own_space, t.name, strnlen(t.name, sizeof(t.name)));
    }
    void code(const lotus_code_info& c) override
    {
        line_ += fmt::format(" code {:#x} fingerprint {:#x} {:.{}}", c.code, c.fingerprint, c.name,
                             strnlen(c.name, sizeof(c.name)));
    }
    void msg(const lotus_msg& m) override
    {
        auto q = model::parse_queue_message(m.data, std::min<size_t>(m.nbytes, sizeof(m.data)), fw_);
        static constexpr const char* kinds[] = {"other", "indexed", "resume"};
        line_ += fmt::format(" msg {} file {:#x} {} index {}{}{}", m.dir == LOTUS_MSG_IN ? "in" : "out", m.file,
                             kinds[q.kind], q.index, q.task ? " task" : "", q.stop ? " stop" : "");
    }
    void sample(const lotus_sample& s) override { line_ += fmt::format(" sample frames {}", s.nr_ips); }

    void print(const void* data, size_t len)
    {
        auto* h = static_cast<const lotus_event_header*>(data);
        line_ = fmt::format("ev {} pid {} tid {} ts {}", h->type, h->tgid, h->tid, h->ts_ns);
        model::dispatch(data, len, *this);
        fmt::print(stderr, "{}\n", common::printable(line_));
    }

private:
    const model::framework::Framework& fw_;
    std::string line_;
};


// --cpus/--memory/--cpuset as the summary reports them, with what the kernel counted in the job's cgroup.
exporter::RunInfo::Limits limits_info(const launch::Limits& limits, const launch::JobCgroup& cgroup)
{
    auto st = cgroup.stats();
    exporter::RunInfo::Limits l;
    l.cpus = limits.cpus;
    l.memory_bytes = limits.memory_bytes;
    l.cpuset = limits.cpuset;
    for (const auto& r : limits.read_bps)
        l.read_bps.emplace_back(r.device, r.bytes_per_s);
    for (const auto& r : limits.write_bps)
        l.write_bps.emplace_back(r.device, r.bytes_per_s);
    l.have_io = st.have_io;
    l.io_read_bytes = st.io_read_bytes;
    l.io_write_bytes = st.io_write_bytes;
    l.cgroup = cgroup.version();
    l.have_cpu = st.have_cpu;
    l.have_memory = st.have_memory;
    l.periods = st.periods;
    l.throttled_periods = st.throttled_periods;
    l.throttled_ns = st.throttled_ns;
    l.memory_peak_bytes = st.memory_peak_bytes;
    l.memory_limit_hits = st.memory_limit_hits;
    l.oom_kills = st.oom_kills;
    l.left_running = cgroup.members().size();
    return l;
}

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
    std::shared_ptr<prometheus::Registry> registry_; // --metrics: what the endpoint serves
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
            s.interpreters_->look_at(p.h.tgid, monotonic_ns());
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
};

void Session::plan()
{
    capture::check_privileges();
    // A kernel lotus-bpf cannot run on is refused before any job starts (one line: what it lacks).
    if (auto refusal = capture::kernel_refusal(capture::this_kernel()); !refusal.empty())
        throw std::runtime_error(refusal);
    lists_ = rule_lists(opts_);
    if (!opts_.counters.empty()) {
        auto choice = capture::choose_counters(
            capture::parse_counters(opts_.counters == "default" ? capture::default_counters() : opts_.counters));
        if (!choice.note.empty())
            fmt::print(stderr, "lotus-bpf: {}\n", choice.note);
        counters_ = choice.counters;
    }
    for (const auto& c : counters_)
        counter_names_.push_back(c.name);
    // --span and --all-calls name functions, not objects: they need every call from C into Python, at the
    // evaluator's entry; otherwise the type-slot functions, where only calls of objects pass.
    evaluator_ = opts_.all_calls || !lists_.spans.empty();
    if (opts_.native_map || !opts_.native.empty()) {
        for (const auto& row : lists_.knowledge().native_set) // the built-in set (or the --rules file's)
            native_specs_.push_back({std::string(row.library), std::string(row.symbol)});
        for (const auto& n : opts_.native)
            native_specs_.push_back(elf::parse_native_spec(n));
    }
}

void Session::open_target()
{
    // --cpus/--memory/--cpuset: the launched job's cgroup, made before it starts.
    if (!opts_.pid && opts_.limits.any())
        cgroup_ = std::make_unique<launch::JobCgroup>(opts_.limits);
    if (opts_.pid) {
        root_ = *opts_.pid;
        interp_ = cpython::find_interpreter(root_);
        if (opts_.all_calls && interp_.caps.perf_trampoline)
            throw std::runtime_error("--all-calls on CPython 3.12+ needs launch mode (-- COMMAND): CPython must "
                                     "start with PYTHONPERFSUPPORT=1");
    }
    open_outputs();
    if (!opts_.pid) {
        // --all-calls: 3.12+ started with PYTHONPERFSUPPORT=1 runs every Python call through a C trampoline into
        // the evaluator (no inlining); 3.10 never inlines.
        std::vector<std::string> env;
        if (opts_.all_calls)
            env.push_back("PYTHONPERFSUPPORT=1");
        launcher_ = std::make_unique<launch::Launcher>(opts_.command, env);
        root_ = launcher_->pid();
        if (cgroup_) { // before it runs: what it forks stays in the cgroup
            cgroup_->add(launcher_->command_pid());
            if (launcher_->pid() != launcher_->command_pid())
                cgroup_->add(launcher_->pid());
        }
        interp_ = launcher_->interpreter();
    }
    // --all-calls where calls are inlined and there is no trampoline (3.11): probes on the evaluator's RESUME
    // and RETURN_VALUE handlers, found in its computed-goto table.
    if (opts_.all_calls)
        if (auto found = cpython::inline_call_handlers(interp_); !found.empty())
            handlers_ = std::move(found);
    t0_ = monotonic_ns();
    uint64_t t0_realtime = clock_ns(CLOCK_REALTIME); // (the pair that places this run on other nodes' clocks)
    cpus_ = proc::allowed_cpus(root_).value_or(0); // for the summary's advice
    if (recorder_) {
        nlohmann::json meta{{"python", interp_.version.str()}, {"interpreter", interp_.target_path}, {"cpus", cpus_},
                            {"layout", interp_.layout_source}, {"counters", counter_names_},
                            {"pipelines", lists_.pipelines}, {"spans", lists_.spans}, {"all_calls", opts_.all_calls},
                            {"resources_interval_ms", opts_.resources_interval_ms},
                            {"pss_interval_ms", opts_.pss_interval_ms}, {"node", node_name(opts_)},
                            {"clock", {{"realtime_ns", t0_realtime}, {"monotonic_ns", t0_}}}};
        if (lists_.framework) // (a replay reconstructs with the knowledge the capture ran with)
            meta["framework"] = framework_json(*lists_.framework);
        // Always: a record file without them is older than them, and its samples were named without them.
        meta["sample_anchors"] = lists_.knowledge().sample_anchors;
        recorder_->begin(record::RecordHeader{t0_, static_cast<uint32_t>(root_), meta.dump()});
    }
}

void Session::open_outputs()
{
    if (opts_.metrics_registry) { // the agent's: it serves them
        registry_ = opts_.metrics_registry;
    } else if (!opts_.metrics.empty()) { // bound before any output is opened and anything attached or launched
        registry_ = std::make_shared<prometheus::Registry>();
        endpoint_ = std::make_unique<metrics::Endpoint>(metrics::parse_bind_address(opts_.metrics), registry_);
    }
    outputs_ = std::make_unique<Outputs>(opts_);
    if (!opts_.record.empty())
        recorder_ = std::make_unique<record::RecordWriter>(opts_.record, outputs_->sink());
}

void Session::build_pipeline()
{
    completion_ = std::make_unique<capture::Completion>(interp_.layout, tree_);
    rec_ = std::make_unique<Reconstruction>(
        opts_, *outputs_, std::move(lists_), t0_, counter_names_,
        [this](uint32_t tgid, uint32_t space, uint64_t code, uint64_t fingerprint, const model::CodeRole& r) {
            roles_->code_role(tgid, space, code, fingerprint, r);
        },
        [this](uint32_t space, uint64_t type, uint64_t fingerprint, uint32_t flags) {
            roles_->type_role(space, type, fingerprint, flags);
        });
    rec_->set_node_of([node = node_name(opts_)](uint32_t) { return node; }, false); // (one node: the labels say none)
    if (auto objects = cpython::object_layout_for(interp_.version)) {
        object_reads_ = std::make_unique<capture::ObjectReads>(interp_.layout, *objects);
        rec_->set_describe_sink([this](uint32_t tgid, uint64_t object, uint32_t kind) {
            object_reads_->read(tgid, object, kind);
        });
    }
    pss_schedule_.emplace(opts_.pss_interval_ms, cpus_, t0_);
    interpreters_ = std::make_unique<capture::InterpreterWatch>(
        interp_, [this](const void* data, size_t len) { feed(data, len); }); // Python processes no probe sees
    if (common::knob_value("LOTUS_DEBUG_EVENTS"))
        debug_.emplace(rec_->rules().framework());
    stuck_ = std::make_unique<LiveStuck>(opts_.stuck_after_s, t0_, [this](const void* data, size_t len) { feed(data, len); });
    rec_->observe([this](const model::Span& s) { stuck_->span(s); });
    if (registry_) {
        metrics_ = std::make_shared<metrics::PipelineMetrics>(
            registry_, metrics::JobIdentity{node_name(opts_), LOTUS_VERSION, interp_.version.str(),
                                            static_cast<uint32_t>(root_),
                                            prometheus::Labels(opts_.metrics_labels.begin(), opts_.metrics_labels.end())});
        rec_->observe([this](const model::Span& s) { metrics_->span(s, rec_->engine().processes()); });
        rec_->observe_usage([this](const model::UsagePoint& p) { metrics_->usage(p, rec_->engine().processes()); });
    }
}

// Every record, the kernel's and capture's own, goes to the record file and the engine alike; then what capture
// learnt from the target while the engine read it (locals' slots).
void Session::feed(const void* data, size_t len)
{
    if (recorder_)
        recorder_->write(data, len);
    rec_->consume(data, len);
    for (auto slots = roles_->take(); !slots.empty(); slots = roles_->take())
        for (const auto& rs : slots) {
            if (recorder_)
                recorder_->write(&rs, sizeof(rs));
            rec_->consume(&rs, sizeof(rs));
        }
    for (auto reads = object_reads_ ? object_reads_->take() : std::vector<model::RecordObject>{}; !reads.empty();
         reads = object_reads_->take())
        for (const auto& ro : reads) {
            if (recorder_)
                recorder_->write(&ro, sizeof(ro));
            rec_->consume(&ro, sizeof(ro));
        }
}

// A record from the ring buffer: completed, then seen by the native capture (symbol records go first: the
// sample's names), then into the stream.
void Session::on_record(const void* raw, size_t raw_len)
{
    delivered_++;
    lotus_sample unwound;
    if (raw_len >= sizeof(lotus_sample_stack) &&
        static_cast<const lotus_event_header*>(raw)->type == LOTUS_EV_SAMPLE_STACK) { // its copy stops here
        if (!native_)
            return;
        unwound = native_->unwound(*static_cast<const lotus_sample_stack*>(raw), opts_.sample_stack);
        raw = &unwound, raw_len = sizeof(unwound);
    }
    auto [data, len] = completion_->complete(raw, raw_len);
    if (debug_)
        debug_->print(data, len);
    if (native_)
        native_->on_event(data, len);
    feed(data, len);
    model::dispatch(data, len, exec_watch_);
}

// RANK from a process's environment, and its command line (a helper's role), into the stream (the record file
// keeps them for replays).
void Session::started_as(uint32_t pid)
{
    model::RecordCommand c{model::kRecordCommand, pid, pid, 0, monotonic_ns(), {}};
    std::string line = proc::command_line(static_cast<int>(pid));
    memcpy(c.command, line.data(), std::min(line.size(), sizeof(c.command) - 1));
    if (!line.empty())
        feed(&c, sizeof(c));
    auto rank = proc::env_int(static_cast<int>(pid), "RANK");
    if (!rank)
        return;
    model::RecordRank r{model::kRecordRank, pid, pid, 0, monotonic_ns(), *rank,
                        proc::env_int(static_cast<int>(pid), "LOCAL_RANK").value_or(-1),
                        proc::env_int(static_cast<int>(pid), "WORLD_SIZE").value_or(-1), 0};
    feed(&r, sizeof(r));
}

void Session::known(uint32_t pid, uint32_t parent, bool is_root)
{
    model::RecordProcess rp{model::kRecordProcess, pid, 0, 0, 0, parent, is_root};
    feed(&rp, sizeof(rp));
}

// Resource use: every traced process's /proc, read in one sweep (one timestamp) every interval; PSS (a walk of its
// page tables) as --pss-interval says.
void Session::sweep(uint64_t now)
{
    bool pss = pss_schedule_->due(now);
    uint64_t cpu0 = pss ? thread_cpu_ns() : 0;
    last_sweep_ = now;
    std::vector<uint32_t> live = live_pids();
    proc_reader_.keep_only(live);
    pss_schedule_->seen(live, now);
    for (uint32_t pid : live) {
        bool young = !pss && pss_schedule_->young_due(pid, now);
        uint64_t young0 = young ? thread_cpu_ns() : 0;
        auto u = proc_reader_.read(static_cast<int>(pid), pss || young);
        if (young)
            pss_schedule_->young_done(pid, now, thread_cpu_ns() - young0);
        if (!u)
            continue;
        auto net = probe_->net_bytes(pid);
        model::RecordUsage r{model::kRecordUsage, pid, pid, 0, now, u->user_ns, u->system_ns, u->rss_kb,
                             u->hwm_kb, u->pss_kb.value_or(model::kNoPss), u->read_bytes, u->write_bytes,
                             u->nvcsw, u->nivcsw, u->threads, probe_->counts_network() ? model::kUsageNet : 0,
                             net.sent, net.recv, u->private_kb.value_or(model::kNoPss),
                             u->shared_dirty_kb.value_or(model::kNoPss), u->anon_kb.value_or(model::kNoPss)};
        feed(&r, sizeof(r));
    }
    if (root_ > 0)
        if (auto h = proc::read_host_cpu(root_)) {
            model::RecordHostCpu r{model::kRecordHostCpu, static_cast<uint32_t>(root_), 0, 0, now, h->busy_ns,
                                   h->total_ns, h->nice_ns, h->cpus, 0};
            feed(&r, sizeof(r));
        }
    cgroup_sweep(now, live);
    if (pss)
        pss_schedule_->done(now, thread_cpu_ns() - cpu0);
}

// Each process's cgroup: its limits read once (at its first sweep), its cgroup's throttling at every sweep (once
// per cgroup), into the stream as RecordCgroup.
void Session::cgroup_sweep(uint64_t now, const std::vector<uint32_t>& pids)
{
    std::map<std::string, launch::ProcessCgroup> read; // by cpu directory: this sweep's throttling
    for (uint32_t pid : pids) {
        auto it = cgroups_.find(pid);
        if (it == cgroups_.end()) {
            auto cg = launch::read_process_cgroup(static_cast<int>(pid));
            if (!cg)
                continue;
            it = cgroups_.emplace(pid, std::move(*cg)).first;
        } else if (!it->second.cpu_dir.empty()) {
            auto r = read.find(it->second.cpu_dir);
            if (r == read.end()) {
                launch::ProcessCgroup again = it->second;
                again.have_throttle = launch::read_throttling(again);
                r = read.emplace(it->second.cpu_dir, std::move(again)).first;
            }
            it->second.have_throttle = r->second.have_throttle;
            it->second.periods = r->second.periods;
            it->second.throttled_periods = r->second.throttled_periods;
            it->second.throttled_ns = r->second.throttled_ns;
        }
        cgroup_record(pid, it->second, now);
    }
}

// A traced process ended: its cgroup's throttling now, as at the end of its life (the cgroup outlives it).
void Session::cgroup_exit(uint32_t pid)
{
    auto it = cgroups_.find(pid);
    if (it == cgroups_.end())
        return;
    launch::ProcessCgroup cg = std::move(it->second);
    cgroups_.erase(it);
    cg.have_throttle = launch::read_throttling(cg);
    cgroup_record(pid, cg, monotonic_ns());
}

void Session::cgroup_record(uint32_t pid, const launch::ProcessCgroup& cg, uint64_t now)
{
    model::RecordCgroup r{};
    r.type = model::kRecordCgroup;
    r.tgid = r.tid = pid;
    r.ts_ns = now;
    r.flags = (cg.have_quota ? model::kCgroupQuota : 0) | (cg.have_cpuset ? model::kCgroupCpuset : 0) |
              (cg.have_memory ? model::kCgroupMemory : 0) | (cg.have_throttle ? model::kCgroupThrottle : 0) |
              (cg.v1 ? model::kCgroupV1 : 0) | (cg.v2 ? model::kCgroupV2 : 0);
    if (!(r.flags & (model::kCgroupQuota | model::kCgroupCpuset | model::kCgroupMemory | model::kCgroupThrottle)))
        return; // nothing readable: nothing said
    r.cpuset_cpus = cg.cpuset_cpus;
    r.quota_us = cg.quota_us;
    r.period_us = cg.period_us;
    r.memory_limit = cg.memory_limit;
    r.periods = cg.periods;
    r.throttled_periods = cg.throttled_periods;
    r.throttled_ns = cg.throttled_ns;
    memcpy(r.path, cg.path.data(), std::min(cg.path.size(), sizeof(r.path) - 1));
    memcpy(r.cpuset, cg.cpuset.data(), std::min(cg.cpuset.size(), sizeof(r.cpuset) - 1));
    feed(&r, sizeof(r));
}

void Session::attach()
{
    build_pipeline();
    try {
        attach_probes();
    } catch (const std::exception&) {
        // A target that dies while probes are being attached makes them fail on its vanished files.
        if (!launcher_ && gone(root_))
            throw std::runtime_error(fmt::format("PID {} exited while lotus-bpf was attaching: nothing was "
                                                 "traced and no output was written", root_));
        throw;
    }
    if (opts_.resources_interval_ms)
        sweep(monotonic_ns()); // the baseline of every process alive now (a first PSS later: the launched job has
                               // only just exec'd)
    else
        cgroup_sweep(monotonic_ns(), live_pids()); // the job's limits, at least
    if (launcher_)
        launcher_->release();
    fmt::print(stderr, "lotus-bpf: tracing PID {} (CPython {}, {}) and {} descendant(s); Ctrl-C to stop\n", root_,
               interp_.version.str(), common::printable(interp_.target_path), initial_ - 1);
    if (auto stuck = capture::stuck_note(probe_->guardian_cgroups())) // the summary says it again
        fmt::print(stderr, "lotus-bpf: {}\n", common::printable(*stuck));
    // What the kernel lacks, once at the start and in one line (each sentence's head); the summary and
    // otherData.kernel_lacks say what each changes.
    std::string lacks;
    for (const auto& lack : probe_->kernel_lacks())
        lacks += (lacks.empty() ? "" : "; ") + lack.substr(0, lack.find(':'));
    if (!lacks.empty())
        fmt::print(stderr, "lotus-bpf: Linux {}: {} (what each changes: the summary's end)\n", probe_->kernel().release,
                   lacks);
    if (endpoint_) {
        update_metrics(monotonic_ns());
        auto at = metrics::parse_bind_address(opts_.metrics);
        at.port = endpoint_->port();
        fmt::print(stderr, "lotus-bpf: metrics at http://{}/metrics\n", at.str());
    }
}

void Session::attach_probes()
{
    const bool natives = !native_specs_.empty();
    probe_ = std::make_unique<capture::Probe>(
        interp_, [this](const void* data, size_t len) { on_record(data, len); }, counters_,
        capture::ProbeFeatures{evaluator_, handlers_.has_value(), natives, natives && opts_.sample_freq > 0,
                               opts_.resources_interval_ms > 0 && opts_.net, opts_.sample_stack,
                               opts_.hold_deadline_ms * 1'000'000ull, opts_.sample_unwind == "cfi", root_});
    roles_ = std::make_unique<capture::RoleWriter>(*probe_, interp_.layout, tree_);
    watch_trainer_calls();
    if (natives || opts_.native_map) {
        native_ = std::make_unique<capture::NativeCapture>(*probe_, native_specs_, tree_,
                                                           [this](const void* data, size_t len) { feed(data, len); });
        probe_->set_library_sink([this](const void* data, size_t len) { native_->on_library_open(data, len); });
    }
    install_stop_handlers();
    probe_->attach_process_tracking();
    probe_->trace_process(static_cast<uint32_t>(root_), static_cast<uint32_t>(root_));
    known(static_cast<uint32_t>(root_), 0, true);
    started_as(static_cast<uint32_t>(root_));
    if (opts_.pid)
        attach_existing();
    if (native_)
        attach_native();
    probe_->attach_python();
    if (handlers_) {
        std::vector<uint64_t> resume(handlers_->begin(), handlers_->end() - 1);
        probe_->attach_inline_calls(resume, handlers_->back());
    }
}

// --trainer-calls: the engine asks, the switch takes each training process's object-calls probe away or puts it
// back (where the probes allow: else every call stays probed, and the summary says why where it mattered).
void Session::watch_trainer_calls()
{
    using M = model::Engine::TrainerCalls;
    M mode = opts_.trainer_calls == "on" ? M::On : opts_.trainer_calls == "off" ? M::Off : M::Auto;
    rec_->set_trainer_calls(mode);
    if (!probe_->object_calls_apart())
        trainer_calls_unavailable_ =
            evaluator_                  ? "--span and --all-calls probe the evaluator's entry, which every call passes"
            : !probe_->per_process()    ? "the Python probes are system-wide here (no per-process uprobe links)"
            : std::string(probe_->evaluator_probe()) != "uprobe session"
                ? "the kernel has no uprobe sessions (Linux 6.13+), which a probe taken away mid-call needs"
                : "the object calls are not probed apart here";
    if (mode == M::On || !trainer_calls_unavailable_.empty())
        return;
    object_calls_ = std::make_unique<capture::ObjectCallsSwitch>(
        *probe_, [this](const void* data, size_t len) { feed(data, len); },
        mode == M::Off ? model::kCallsOff : model::kCallsAuto);
    rec_->set_calls_sink([this](uint32_t tgid, bool on) { object_calls_->ask(tgid, on); });
}

// Processes alive now (DataLoader workers already running); later ones join through fork.
void Session::attach_existing()
{
    for (int d : proc::descendants(root_)) {
        auto pid = static_cast<uint32_t>(d);
        probe_->trace_process(pid, static_cast<uint32_t>(root_));
        auto parent = static_cast<uint32_t>(proc::parent_pid(d).value_or(0));
        known(pid, parent, false);
        if (parent) // (forks seen later tell theirs through their FORK records)
            tree_.add(pid, parent);
        started_as(pid);
        interpreters_->look_at(pid, monotonic_ns());
        initial_++;
    }
}

// Libraries mapped now (the ones opened later are probed when their openat is seen), and the sampling events.
void Session::attach_native()
{
    native_->scan_process(static_cast<uint32_t>(root_));
    for (int d : proc::descendants(root_))
        native_->scan_process(static_cast<uint32_t>(d));
    if (!opts_.sample_freq)
        return;
    probe_->attach_sampling(capture::sampling_event(), opts_.sample_freq);
    if (size_t n = probe_->threads_unsampled())
        fmt::print(stderr, "lotus-bpf: {} thread{} of the traced processes carr{} more perf events than lotus-bpf "
                           "looks through: not sampled, the native map has none of their samples\n",
                   n, n == 1 ? "" : "s", n == 1 ? "ies" : "y");
}

int Session::sleep_ms(uint64_t now) const
{
    if (fixed_poll_ms_)
        return fixed_poll_ms_;
    common::WakeSchedule wake(now, exit_fd_ && !probe_->retry_pending() ? 1000 : 50);
    if (opts_.resources_interval_ms)
        wake.due_at(last_sweep_ + opts_.resources_interval_ms * 1'000'000ull);
    if (tty_)
        wake.due_at(last_status_ + 500'000'000ull);
    if (metrics_)
        wake.due_at(last_metrics_ns_ + 500'000'000ull);
    if (screen_)
        wake.due_at(last_frame_ns_ + 1'000'000'000ull);
    wake.due_at(now + LiveStuck::kIntervalNs); // (the stuck-process watch)
    if (opts_.duration_s > 0)
        wake.due_at(t0_ + static_cast<uint64_t>(opts_.duration_s * 1e9));
    if (interpreters_->pending())
        wake.due_at(now + 100'000'000ull);
    if (object_calls_ && object_calls_->pending())
        wake.due_at(now + 20'000'000ull);
    return wake.sleep_ms();
}

// Sets stop_reason_ when the run should stop now.
bool Session::stop_due(uint64_t now)
{
    if (g_stop_signal) {
        stop_reason_ = g_stop_signal == SIGINT ? "interrupted" : "terminated by signal";
        if (launcher_ && g_stop_signal != SIGINT) {
            probe_->let_children_start(1000); // none orphaned by a signal that came while it was held
            launcher_->signal(g_stop_signal);
        }
        return true;
    }
    if (opts_.duration_s > 0 && static_cast<double>(now - t0_) / 1e9 >= opts_.duration_s) {
        stop_reason_ = fmt::format("{} s elapsed", opts_.duration_s);
        return true;
    }
    if ((!exit_fd_ || readable(exit_fd_.get())) && (launcher_ ? launcher_->exited() : gone(root_))) {
        stop_reason_ = "target exited";
        if (launcher_)
            launched_status_ = launcher_->exit_code();
        return true;
    }
    if (screen_ && screen_->quit_pressed()) {
        stop_reason_ = "quit";
        return true;
    }
    return false;
}

// --metrics: the gauges (memory, processes, the info series) and the capture's counts, at most twice a second.
void Session::update_metrics(uint64_t now)
{
    last_metrics_ns_ = now;
    auto st = probe_->stats();
    metrics::CaptureFigures f{st.submitted, st.lost, {}};
    for (const auto& b : capture::kBpfFailures)
        f.failures.emplace_back(std::string(b.name), st.failures[b.slot]);
    metrics_->capture(f);
    metrics_->refresh(rec_->engine().processes(), &rec_->engine().batches());
}

void Session::draw(uint64_t now)
{
    auto st = probe_->stats();
    exporter::LiveHeader h{static_cast<uint32_t>(root_), interp_.version.str(), t0_, st.submitted, st.lost};
    last_frame_ = live_.frame(now, h, rec_->engine().processes(), screen_->width(), screen_->height());
    screen_->draw(last_frame_);
    last_frame_ns_ = now;
}

// What is due at a wake-up that does not stop the run: a resource sweep, the interpreters' watch, top's frame,
// the status line.
void Session::tick(uint64_t now)
{
    if (opts_.resources_interval_ms && now - last_sweep_ >= opts_.resources_interval_ms * 1'000'000ull) {
        sweep(now);
        if (metrics_) // (memory per role at each reading: a worker that lives a second shows)
            metrics_->refresh(rec_->engine().processes(), &rec_->engine().batches());
    }
    interpreters_->check(now);
    if (launcher_)
        interpreters_->scan_command(static_cast<uint32_t>(launcher_->command_pid()), static_cast<uint32_t>(root_), now);
    if (screen_ && now - last_frame_ns_ >= 1'000'000'000ull)
        draw(now);
    stuck_->check(now, rec_->engine(), opts_.top, tty_);
    if (metrics_)
        metrics_->stuck(stuck_->stuck());
    if (metrics_ && now - last_metrics_ns_ >= 500'000'000ull)
        update_metrics(now);
    if (tty_ && now - last_status_ > 500000000ull) {
        last_status_ = now;
        auto st = probe_->stats();
        size_t live = 0;
        for (const auto& [pid, p] : rec_->engine().processes())
            live += !p.exited;
        fmt::print(stderr, "\r\033[K[lotus-bpf] {:.1f} s  processes {}  events {}  drops {}  samples {}{}",
                   static_cast<double>(now - t0_) / 1e9, live, st.submitted, st.lost, rec_->engine().samples(),
                   stuck_->stuck() ? fmt::format("  STUCK {}", stuck_->stuck()) : "");
    }
}

void Session::loop()
{
    tty_ = isatty(STDERR_FILENO) && !opts_.quiet && !opts_.top;
    if (opts_.top) {
        rec_->observe([this](const model::Span& s) { live_.add(s); });
        screen_.emplace();
    }
    // The end of the command (launch mode) or of the target wakes the loop through a pidfd; where there is none,
    // the loop looks every 50 ms.
    exit_fd_ = proc::pidfd_of(launcher_ ? launcher_->command_pid() : root_);
    if (exit_fd_)
        probe_->wake_on(exit_fd_.get());
    // LOTUS_POLL_MS: a fixed sleep instead (tests make it long, so that a wake-up lost while the loop was busy
    // shows as a child held that long).
    const char* poll_env = common::knob_value("LOTUS_POLL_MS");
    fixed_poll_ms_ = poll_env && atoi(poll_env) > 0 ? atoi(poll_env) : 0;
    uint64_t now = monotonic_ns();
    while (true) {
        probe_->poll(sleep_ms(now));
        if (object_calls_)
            object_calls_->apply();
        now = monotonic_ns();
        if (stop_due(now))
            break;
        tick(now);
    }
}

void Session::detach()
{
    while (probe_->poll(0) > 0) {
    }
    stuck_->check(monotonic_ns(), rec_->engine(), opts_.top, tty_, true); // (who resumed in the last records)
    cgroup_sweep(monotonic_ns(), live_pids()); // the throttling of the processes still running, at the end
    if (object_calls_)
        object_calls_->apply(true);
    interpreters_->check(monotonic_ns());
    if (launcher_)
        interpreters_->scan_command(static_cast<uint32_t>(launcher_->command_pid()), static_cast<uint32_t>(root_),
                                    monotonic_ns(), true);
    if (metrics_)
        update_metrics(monotonic_ns()); // (the figures the summary will give)
    stats_ = probe_->stats();
    evaluator_probe_ = probe_->evaluator_probe();
    python_probes_ = probe_->python_probes();
    python_scope_ = probe_->per_process() ? "traced processes" : "system-wide";
    syscall_programs_ = probe_->syscall_programs();
    kernel_lacks_ = probe_->kernel_lacks();
    native_links_ = probe_->native_links();
    probe_->close(); // it also continues the children still held: count them after
    if (probe_->per_process())
        holds_ = holds_info(probe_->holds(), probe_->hold_deadline_ms(), probe_->guardian_cgroups());
    if (tty_)
        fmt::print(stderr, "\r\033[K");
    if (screen_) { // back to the normal screen, where the last view stays
        screen_.reset();
        fmt::print("{}", last_frame_);
        fflush(stdout);
    }
}

exporter::RunInfo Session::run_info()
{
    exporter::RunInfo run;
    run.tool = "lotus-bpf " LOTUS_VERSION;
    run.target_pid = static_cast<uint32_t>(root_);
    run.t0_monotonic_ns = t0_;
    run.python = interp_.version.str();
    run.interpreter = interp_.target_path;
    run.layout = interp_.layout_source;
    run.cpus = cpus_;
    run.resources_interval_ms = opts_.resources_interval_ms;
    if (cgroup_)
        run.limits = limits_info(opts_.limits, *cgroup_);
    run.evaluator_probe = evaluator_probe_;
    run.python_probes = python_probes_;
    run.python_probes_scope = python_scope_;
    if (probe_) {
        run.kernel = probe_->kernel().release;
        run.kernel_lacks = kernel_lacks_;
    }
    run.trainer_calls = opts_.trainer_calls;
    run.trainer_calls_unavailable = trainer_calls_unavailable_;
    run.syscall_programs = syscall_programs_;
    run.holds = holds_;
    run.events = stats_.submitted;
    run.events_delivered = delivered_;
    run.lost_events = stats_.lost;
    for (const auto& f : capture::kBpfFailures)
        run.bpf_failures.push_back({std::string(f.name), stats_.failures[f.slot], std::string(f.meaning)});
    run.stop_reason = stop_reason_;
    run.tracer_peak_rss_kb = peak_rss_kb();
    run.tracer_cpu_ms = cpu_ms();
    if (native_) {
        exporter::RunInfo::Native n{native_->functions(), native_links_, native_->attach_seconds(),
                                    opts_.sample_freq ? capture::sampling_event().name : "none",
                                    opts_.sample_freq ? opts_.sample_stack : 0, probe_->sampling_scope(),
                                    stats_.sampled_elsewhere, {}};
        n.sampling_unwind = !opts_.sample_freq || opts_.sample_stack <= 1 ? "none" : opts_.sample_unwind;
        n.unwound_samples = native_->unwound_samples();
        n.unwound_callers = native_->unwound_callers();
        n.without_returns = native_->without_returns();
        // A --native spec that selected nothing is said, not silently dropped.
        size_t first_user = native_specs_.size() - opts_.native.size();
        for (size_t i = first_user; i < native_specs_.size(); i++) {
            if (native_->matched()[i])
                continue;
            fmt::print(stderr, "lotus-bpf: --native '{}' matched no function in the libraries the traced "
                               "processes mapped\n", opts_.native[i - first_user]);
            n.specs_unmatched.push_back(opts_.native[i - first_user]);
        }
        run.native = std::move(n);
    }
    return run;
}

int Session::finish()
{
    if (endpoint_) // its figures are final: it stops while the outputs are written
        endpoint_->stop();
    auto run = run_info();
    if (recorder_) {
        record::RecordEnd end{record::kRecordEnd, static_cast<uint32_t>(root_), 0, 0, monotonic_ns(),
                              stats_.submitted, stats_.lost};
        recorder_->write(&end, sizeof(end));
        recorder_->close();
    }
    if (metrics_ && opts_.metrics_handoff)
        opts_.metrics_handoff(metrics_);
    if (!rec_->finish(std::move(run), calls_inlined(interp_.caps, opts_.all_calls)))
        return kExitOutputFailed;
    return launcher_ ? launched_status_ : 0;
}

} // namespace

std::string node_name(const Options& opts)
{
    if (!opts.node.empty())
        return opts.node;
    char host[256] = {};
    return gethostname(host, sizeof(host) - 1) == 0 ? std::string(host) : std::string("unknown");
}

int run_session(const Options& opts)
{
    try {
        if (!opts.replay.empty())
            return replay(opts);
        Session session(opts);
        session.plan();
        session.open_target();
        session.attach();
        session.loop();
        session.detach();
        return session.finish();
    } catch (const std::exception& e) { // (a reason may quote a path or name from the target)
        if (opts.on_failure)
            opts.on_failure(e.what());
        else
            fmt::print(stderr, "lotus-bpf: {}\n", common::printable(e.what()));
        return 1;
    }
}

} // namespace lotus::cli
