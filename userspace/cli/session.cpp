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
#include "model/record_dispatch.h"
#include "elf/elf_file.h"
#include "cpython/interpreter.h"
#include "cpython/opcode_handlers.h"
#include "launch/cgroup.h"
#include "cpython/cpython_layouts.h"
#include "launch/launcher.h"
#include "proc/proc_maps.h"
#include "proc/proc_usage.h"
#include "cpython/remote_memory.h"
#include "capture/bpf_failures.h"
#include "common/knobs.h"
#include "metrics/endpoint.h"
#include "metrics/pipeline_metrics.h"

#include "live_session.h"
#include "run_facts.h"

namespace lotus::cli {

namespace {

using common::clock_ns;
using common::monotonic_ns;

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

} // namespace

void Session::plan()
{
    capture::check_privileges();
    // A kernel lotus-bpf cannot run on is refused before any job starts (one line: what it lacks).
    if (auto refusal = capture::kernel_refusal(capture::this_kernel()); !refusal.empty())
        throw std::runtime_error(refusal);
    // Likewise a kernel whose uprobes (perf events) or kfuncs this process may not reach without CAP_SYS_ADMIN.
    if (auto refusal = capture::capability_refusal(capture::this_kernel(), capture::has_sys_admin(),
                                                   capture::libbpf_skips_unlisted_modules());
        !refusal.empty())
        throw std::runtime_error(refusal);
    lists_ = rule_lists(opts_);
    if (!opts_.counters.empty()) {
        auto choice = capture::choose_counters(opts_.counters);
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
        registry_ = std::make_shared<metrics::SharedRegistry>();
        endpoint_ = std::make_unique<metrics::Endpoint>(metrics::parse_bind_address(opts_.metrics), registry_);
    }
    outputs_ = std::make_unique<Outputs>(opts_);
    if (!opts_.record.empty())
        recorder_ = std::make_unique<record::RecordWriter>(opts_.record, outputs_->sink(), opts_.disk_reserve_pct,
                                                                 &outputs_->cuts());
}

void Session::attach()
{
    build_pipeline();
    auto started = usage_now();
    try {
        attach_probes();
        attach_cost_ = usage_between(started, usage_now());
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
                               opts_.hold_deadline_ms * 1'000'000ull, opts_.sample_unwind == SampleUnwind::Cfi, root_});
    roles_ = std::make_unique<capture::RoleWriter>(*probe_, interp_.layout, tree_);
    requests_->set_roles(roles_.get());
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
    using M = model::TrainerCalls;
    M mode = requests_->trainer_calls();
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
    requests_->set_calls_switch(object_calls_.get());
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
    if (stop_signal()) {
        stop_reason_ = stop_signal() == SIGINT ? "interrupted" : "terminated by signal";
        if (launcher_ && stop_signal() != SIGINT) {
            probe_->let_children_start(1000); // none orphaned by a signal that came while it was held
            launcher_->signal(stop_signal());
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