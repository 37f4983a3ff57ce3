#include "session.h"

#include <nlohmann/json.hpp>

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <memory>

#include "capture/perf_events.h"
#include "common/clock.h"
#include "common/wake_schedule.h"
#include "capture/probe.h"
#include "capture/native_capture.h"
#include "capture/descriptions.h"
#include "capture/interpreter_watch.h"
#include "outputs.h"
#include "replay.h"
#include "reconstruction.h"
#include "self_usage.h"
#include "terminal.h"
#include "export/live_table.h"
#include "export/chrome_trace.h"
#include "record/record_file.h"
#include "export/summary.h"
#include "model/engine.h"
#include "model/messages.h"
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

namespace lotus::cli {

namespace {

using common::clock_ns;
using common::monotonic_ns;

std::atomic<int> g_stop_signal{0};

void on_signal(int sig) { g_stop_signal = sig; }

void install_signal_handlers()
{
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; // no SA_RESTART: the poll returns at once
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
}

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
    if (!f)
        return true;
    char buf[512] = {};
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    std::string s(buf, n);
    auto close = s.rfind(')');
    return close != std::string::npos && close + 2 < s.size() && (s[close + 2] == 'Z' || s[close + 2] == 'X');
}

// What the probe's holds were, for otherData and the summary.
static exporter::RunInfo::Holds holds_info(const capture::HoldStats& h, unsigned deadline_ms)
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
    return r;
}

// A process and its traced ancestors, whose memory holds what it inherited at fork: where to read an object a
// fork child described once the child is gone.
std::vector<uint32_t> lineage(uint32_t tgid, const std::map<uint32_t, uint32_t>& parents)
{
    std::vector<uint32_t> pids;
    for (uint32_t pid = tgid; pid && pids.size() < 64;) {
        pids.push_back(pid);
        auto p = parents.find(pid);
        pid = p == parents.end() ? 0 : p->second;
    }
    return pids;
}

// Slots of named locals of a code object, read from the target's co_localsplusnames.
std::vector<uint8_t> resolve_locals(uint32_t tgid, uint64_t code, const std::vector<std::string>& wanted,
                                    const lotus_py_layout& layout, const std::map<uint32_t, uint32_t>& parents)
{
    std::optional<std::vector<std::string>> names;
    for (uint32_t pid : lineage(tgid, parents))
        if (!names)
            names = cpython::read_local_names(static_cast<int>(pid), code, layout);
    std::vector<uint8_t> slots;
    for (const auto& w : wanted) {
        uint8_t slot = LOTUS_NO_SLOT;
        for (size_t i = 0; names && i < names->size() && i < 64; i++)
            if ((*names)[i] == w)
                slot = static_cast<uint8_t>(i);
        slots.push_back(slot);
    }
    return slots;
}

// LOTUS_DEBUG_EVENTS=1: one line per record on stderr, to debug a reconstruction from its events.
void dump_event(const void* data, size_t len)
{
    auto* h = static_cast<const lotus_event_header*>(data);
    std::string line = fmt::format("ev {} pid {} tid {} ts {}", h->type, h->tgid, h->tid, h->ts_ns);
    if (h->type == LOTUS_EV_PY_ENTRY && len >= sizeof(lotus_py_entry)) {
        auto* e = static_cast<const lotus_py_entry*>(data);
        line += fmt::format(" entry depth {} code {:#x} caller {:#x} self {:#x} type {:#x}", e->depth, e->code,
                            e->chain_len ? e->chain_code[0] : 0, e->self_obj, e->self_type);
    } else if (h->type == LOTUS_EV_PY_RETURN && len >= sizeof(lotus_py_return)) {
        line += fmt::format(" return depth {}", static_cast<const lotus_py_return*>(data)->depth);
    } else if (h->type == LOTUS_EV_TYPE && len >= sizeof(lotus_type_info)) {
        auto* t = static_cast<const lotus_type_info*>(data);
        line += fmt::format(" type {:#x} own {} {:.{}}", t->type, t->own_space, t->name, strnlen(t->name, sizeof(t->name)));
    } else if (h->type == LOTUS_EV_CODE && len >= sizeof(lotus_code_info)) {
        auto* c = static_cast<const lotus_code_info*>(data);
        line += fmt::format(" code {:#x} {:.{}}", c->code, c->name, strnlen(c->name, sizeof(c->name)));
    } else if (h->type == LOTUS_EV_MSG && len >= sizeof(lotus_msg)) {
        auto* m = static_cast<const lotus_msg*>(data);
        auto q = model::parse_queue_message(m->data, std::min<size_t>(m->nbytes, sizeof(m->data)));
        static constexpr const char* kinds[] = {"other", "indexed", "resume"};
        line += fmt::format(" msg {} file {:#x} {} index {}{}{}", m->dir == LOTUS_MSG_IN ? "in" : "out", m->file,
                            kinds[q.kind], q.index, q.task ? " task" : "", q.stop ? " stop" : "");
    } else if (h->type == LOTUS_EV_SAMPLE && len >= sizeof(lotus_sample)) {
        line += fmt::format(" sample frames {}", static_cast<const lotus_sample*>(data)->nr_ips);
    }
    fmt::print(stderr, "{}\n", line);
}

} // namespace

int run_session(const Options& opts)
{
    try {
        if (!opts.replay.empty())
            return replay(opts);
        capture::check_privileges();
        auto lists = rule_lists(opts);
        std::vector<capture::CounterSpec> counters;
        if (!opts.counters.empty()) {
            auto choice = capture::choose_counters(
                capture::parse_counters(opts.counters == "default" ? capture::default_counters() : opts.counters));
            if (!choice.note.empty())
                fmt::print(stderr, "lotus-bpf: {}\n", choice.note);
            counters = choice.counters;
        }
        std::vector<std::string> counter_names;
        for (const auto& c : counters)
            counter_names.push_back(c.name);
        std::vector<elf::NativeSpec> native_specs;
        if (opts.native_map || !opts.native.empty()) {
            native_specs = elf::default_native_specs();
            for (const auto& n : opts.native)
                native_specs.push_back(elf::parse_native_spec(n));
        }


        // --cpus/--memory/--cpuset: the launched job's cgroup, made before it starts and removed after the launcher
        // is gone (declared first: destroyed last).
        std::unique_ptr<launch::JobCgroup> cgroup;
        if (!opts.pid && opts.limits.any())
            cgroup = std::make_unique<launch::JobCgroup>(opts.limits);
        std::unique_ptr<launch::Launcher> launcher;
        cpython::Interpreter interp;
        int root = 0;
        if (opts.pid) {
            root = *opts.pid;
            interp = cpython::find_interpreter(root);
            if (opts.all_calls && interp.caps.perf_trampoline)
                throw std::runtime_error("--all-calls on CPython 3.12+ needs launch mode (-- COMMAND): CPython must "
                                         "start with PYTHONPERFSUPPORT=1");
        }
        // Every output opened now, before anything is attached or launched: a bad destination stops here.
        Outputs outputs(opts);
        std::unique_ptr<record::RecordWriter> recorder;
        if (!opts.record.empty())
            recorder = std::make_unique<record::RecordWriter>(opts.record, outputs.sink());
        if (!opts.pid) {
            // --all-calls: 3.12+ started with PYTHONPERFSUPPORT=1 runs every Python call through a C
            // trampoline into the evaluator (no inlining); 3.10 never inlines.
            std::vector<std::string> env;
            if (opts.all_calls)
                env.push_back("PYTHONPERFSUPPORT=1");
            launcher = std::make_unique<launch::Launcher>(opts.command, env);
            root = launcher->pid();
            if (cgroup) { // before it runs: what it forks stays in the cgroup
                cgroup->add(launcher->command_pid());
                if (launcher->pid() != launcher->command_pid())
                    cgroup->add(launcher->pid());
            }
            interp = launcher->interpreter();
        }
        // --all-calls where calls are inlined and there is no trampoline (3.11): probes on the evaluator's
        // RESUME and RETURN_VALUE handlers, found in its computed-goto table.
        std::optional<std::vector<uint64_t>> handlers;
        if (opts.all_calls)
            if (auto found = cpython::inline_call_handlers(interp); !found.empty())
                handlers = std::move(found);

        // --span and --all-calls name functions, not objects: they need every call from C into Python, at the
        // evaluator's entry; otherwise the type-slot functions, where only calls of objects pass.
        const bool evaluator = opts.all_calls || !lists.spans.empty();
        uint64_t t0 = monotonic_ns();
        const unsigned cpus = proc::allowed_cpus(root).value_or(0); // for the summary's advice
        if (recorder) {
            nlohmann::json meta{{"python", interp.version.str()}, {"interpreter", interp.target_path}, {"cpus", cpus},
                                {"layout", interp.layout_source}, {"counters", counter_names},
                                {"pipelines", lists.pipelines}, {"spans", lists.spans}, {"all_calls", opts.all_calls},
                                {"resources_interval_ms", opts.resources_interval_ms},
                                {"pss_interval_ms", opts.pss_interval_ms}};
            recorder->begin(record::RecordHeader{t0, static_cast<uint32_t>(root), meta.dump()});
        }
        std::unique_ptr<capture::Probe> probe;
        std::unique_ptr<capture::NativeCapture> native;
        std::map<uint32_t, uint32_t> engine_parents; // pid -> parent, to read a dead fork child's memory
        std::vector<char> completed; // a description record with the names capture read (the probe's callback)
        // What capture learns from the target while the engine reads a record (capture slots) goes into the
        // stream right after that record: the engine and the record file see the same stream.
        std::vector<model::RecordSlots> resolved;
        Reconstruction rec(
            opts, outputs, std::move(lists), t0, counter_names,
            [&](uint32_t tgid, uint32_t space, uint64_t code, const model::CodeRole& r) {
                std::vector<uint8_t> slots;
                if (!r.capture_locals.empty()) {
                    slots = resolve_locals(tgid, code, r.capture_locals, interp.layout, engine_parents);
                    model::RecordSlots rs{model::kRecordSlots, tgid, 0, 0, 0, code, {}};
                    memset(rs.slots, LOTUS_NO_SLOT, sizeof(rs.slots));
                    memcpy(rs.slots, slots.data(), std::min(slots.size(), sizeof(rs.slots)));
                    resolved.push_back(rs);
                }
                probe->set_role(space, code, r.flags, slots);
            },
            [&](uint32_t space, uint64_t type, uint32_t flags) { probe->set_type(space, type, flags); });
        // Every record, the kernel's and capture's own, goes to the record file and the engine alike.
        auto feed = [&](const void* data, size_t len) {
            if (recorder)
                recorder->write(data, len);
            rec.consume(data, len);
            while (!resolved.empty()) {
                auto rs = resolved.front();
                resolved.erase(resolved.begin());
                if (recorder)
                    recorder->write(&rs, sizeof(rs));
                rec.consume(&rs, sizeof(rs));
            }
        };
        // RANK from a process's environment, into the stream (the record file keeps it for replays).
        auto rank_of = [&](uint32_t pid) {
            auto rank = proc::env_int(static_cast<int>(pid), "RANK");
            if (!rank)
                return;
            model::RecordRank r{model::kRecordRank, pid, pid, 0, monotonic_ns(), *rank,
                                proc::env_int(static_cast<int>(pid), "LOCAL_RANK").value_or(-1)};
            feed(&r, sizeof(r));
        };
        // Resource use: every traced process's /proc, read in one sweep (one timestamp) every interval; PSS (a walk
        // of its page tables: 5-15 ms for a process that mapped torch here) as --pss-interval says.
        uint64_t last_sweep = 0;
        proc::ProcUsageReader proc_reader;
        proc::PssSchedule pss_schedule(opts.pss_interval_ms, cpus, t0);
        auto sweep = [&](uint64_t now) {
            bool pss = pss_schedule.due(now);
            uint64_t cpu0 = pss ? thread_cpu_ns() : 0;
            last_sweep = now;
            std::vector<uint32_t> live;
            for (const auto& [pid, p] : rec.engine().processes())
                if (!p.exited)
                    live.push_back(pid);
            proc_reader.keep_only(live);
            for (uint32_t pid : live) {
                auto u = proc_reader.read(static_cast<int>(pid), pss);
                if (!u)
                    continue;
                auto net = probe->net_bytes(pid);
                model::RecordUsage r{model::kRecordUsage, pid, pid, 0, now, u->user_ns, u->system_ns, u->rss_kb,
                                     u->hwm_kb, u->pss_kb.value_or(model::kNoPss), u->read_bytes, u->write_bytes,
                                     u->nvcsw, u->nivcsw, u->threads, probe->counts_network() ? model::kUsageNet : 0,
                                     net.sent, net.recv};
                feed(&r, sizeof(r));
            }
            if (pss)
                pss_schedule.done(now, thread_cpu_ns() - cpu0);
        };
        capture::InterpreterWatch interpreters(interp, feed); // Python processes no probe sees
        const bool debug_events = common::knob_value("LOTUS_DEBUG_EVENTS") != nullptr;
        uint64_t delivered = 0; // records read from the ring buffer: equals BPF's submitted count once drained
        size_t initial = 1;
        try {
            probe = std::make_unique<capture::Probe>(interp, [&](const void* data, size_t len) {
                delivered++;
                if (capture::incomplete_description(data, len)) {
                    auto tgid = static_cast<const lotus_event_header*>(data)->tgid;
                    completed = capture::complete_description(data, len, lineage(tgid, engine_parents), interp.layout);
                    data = completed.data();
                }
                auto* h = static_cast<const lotus_event_header*>(data);
                if (debug_events)
                    dump_event(data, len);
                if (len >= sizeof(lotus_proc_event) && h->type == LOTUS_EV_FORK)
                    engine_parents[h->tgid] = static_cast<const lotus_proc_event*>(data)->parent_tgid;
                if (native)
                    native->on_event(data, len); // symbol records go first: the sample's names
                feed(data, len);
                if (h->type == LOTUS_EV_EXEC) { // a new program: its own environment (torchrun sets RANK)
                    rank_of(h->tgid);
                    interpreters.look_at(h->tgid, monotonic_ns());
                }
            }, counters, capture::ProbeFeatures{evaluator, handlers.has_value(), !native_specs.empty(),
                                                   !native_specs.empty() && opts.sample_freq > 0,
                                                   opts.resources_interval_ms > 0 && opts.net, opts.sample_stack,
                                                   opts.hold_deadline_ms * 1'000'000ull});
            if (!native_specs.empty() || opts.native_map) {
                native = std::make_unique<capture::NativeCapture>(*probe, native_specs, feed);
                probe->set_library_sink([&](const void* data, size_t len) { native->on_library_open(data, len); });
            }

            install_signal_handlers();
            probe->attach_process_tracking();
            probe->trace_process(static_cast<uint32_t>(root), static_cast<uint32_t>(root));
            auto known = [&](uint32_t pid, uint32_t parent, bool is_root) {
                model::RecordProcess rp{model::kRecordProcess, pid, 0, 0, 0, parent, is_root};
                feed(&rp, sizeof(rp));
            };
            known(static_cast<uint32_t>(root), 0, true);
            rank_of(static_cast<uint32_t>(root));
            if (opts.pid) {
                // Processes alive now (DataLoader workers already running); later ones join through fork.
                for (int d : proc::descendants(root)) {
                    probe->trace_process(static_cast<uint32_t>(d), static_cast<uint32_t>(root));
                    auto parent = static_cast<uint32_t>(proc::parent_pid(d).value_or(0));
                    known(static_cast<uint32_t>(d), parent, false);
                    if (parent) // (forks seen later tell theirs through their FORK records)
                        engine_parents[static_cast<uint32_t>(d)] = parent;
                    rank_of(static_cast<uint32_t>(d));
                    interpreters.look_at(static_cast<uint32_t>(d), monotonic_ns());
                    initial++;
                }
            }
            if (native) {
                // Libraries mapped now; the ones opened later are probed when their openat is seen.
                native->scan_process(static_cast<uint32_t>(root));
                for (int d : proc::descendants(root))
                    native->scan_process(static_cast<uint32_t>(d));
                if (opts.sample_freq) {
                    probe->attach_sampling(capture::sampling_event(), opts.sample_freq);
                    if (size_t n = probe->threads_unsampled())
                        fmt::print(stderr, "lotus-bpf: {} thread{} of the traced processes carr{} more perf events "
                                           "than lotus-bpf looks through: not sampled, the native map has none of "
                                           "their samples\n", n, n == 1 ? "" : "s", n == 1 ? "ies" : "y");
                }
            }
            probe->attach_python();
            if (handlers) {
                std::vector<uint64_t> resume(handlers->begin(), handlers->end() - 1);
                probe->attach_inline_calls(resume, handlers->back());
            }
        } catch (const std::exception&) {
            // A target that dies while probes are being attached makes them fail on its vanished files.
            if (!launcher && gone(root))
                throw std::runtime_error(fmt::format("PID {} exited while lotus-bpf was attaching: nothing was "
                                                     "traced and no output was written", root));
            throw;
        }
        if (opts.resources_interval_ms) {
            sweep(monotonic_ns()); // the baseline of every process alive now (a first PSS later: the launched
                                   // job has only just exec'd)
        }
        if (launcher)
            launcher->release();
        fmt::print(stderr, "lotus-bpf: tracing PID {} (CPython {}, {}) and {} descendant(s); Ctrl-C to stop\n",
                       root, interp.version.str(), interp.target_path, initial - 1);

        bool tty = isatty(STDERR_FILENO) && !opts.quiet && !opts.top;
        uint64_t last_status = 0;
        // top: the live table, redrawn every second from the spans as they end.
        std::optional<LiveScreen> screen;
        exporter::LiveTable live;
        std::string last_frame;
        uint64_t last_frame_ns = 0;
        auto draw = [&](uint64_t now) {
            auto st = probe->stats();
            exporter::LiveHeader h{static_cast<uint32_t>(root), interp.version.str(), t0, st.submitted, st.lost};
            last_frame = live.frame(now, h, rec.engine().processes(), screen->width(), screen->height());
            screen->draw(last_frame);
            last_frame_ns = now;
        };
        if (opts.top) {
            rec.observe([&](const model::Span& s) { live.add(s); });
            screen.emplace();
        }
        std::string stop_reason;
        int launched_status = 0;
        // The end of the command (launch mode) or of the target wakes the loop through a pidfd; where there is
        // none, the loop looks every 50 ms, as it did at every wake-up before (7 syscalls each).
        const pid_t watched = launcher ? launcher->command_pid() : root;
        common::UniqueFd exit_fd = proc::pidfd_of(watched);
        if (exit_fd)
            probe->wake_on(exit_fd.get());
        // LOTUS_POLL_MS: a fixed sleep instead (tests make it long, so that a wake-up lost while the loop was busy
        // shows as a child held that long).
        const char* poll_env = common::knob_value("LOTUS_POLL_MS");
        const int fixed_poll_ms = poll_env && atoi(poll_env) > 0 ? atoi(poll_env) : 0;
        auto sleep_ms = [&](uint64_t now) {
            if (fixed_poll_ms)
                return fixed_poll_ms;
            common::WakeSchedule wake(now, exit_fd && !probe->retry_pending() ? 1000 : 50);
            if (opts.resources_interval_ms)
                wake.due_at(last_sweep + opts.resources_interval_ms * 1'000'000ull);
            if (tty)
                wake.due_at(last_status + 500'000'000ull);
            if (screen)
                wake.due_at(last_frame_ns + 1'000'000'000ull);
            if (opts.duration_s > 0)
                wake.due_at(t0 + static_cast<uint64_t>(opts.duration_s * 1e9));
            if (interpreters.pending())
                wake.due_at(now + 100'000'000ull);
            return wake.sleep_ms();
        };
        uint64_t now = monotonic_ns();
        while (true) {
            probe->poll(sleep_ms(now));
            now = monotonic_ns();
            if (g_stop_signal) {
                stop_reason = g_stop_signal == SIGINT ? "interrupted" : "terminated by signal";
                if (launcher && g_stop_signal != SIGINT) {
                    probe->let_children_start(1000); // none orphaned by a signal that came while it was held
                    launcher->signal(g_stop_signal);
                }
                break;
            }
            if (opts.duration_s > 0 && static_cast<double>(now - t0) / 1e9 >= opts.duration_s) {
                stop_reason = fmt::format("{} s elapsed", opts.duration_s);
                break;
            }
            if ((!exit_fd || readable(exit_fd.get())) && (launcher ? launcher->exited() : gone(root))) {
                stop_reason = "target exited";
                if (launcher)
                    launched_status = launcher->exit_code();
                break;
            }
            if (screen && screen->quit_pressed()) {
                stop_reason = "quit";
                break;
            }
            if (opts.resources_interval_ms && now - last_sweep >= opts.resources_interval_ms * 1'000'000ull)
                sweep(now);
            interpreters.check(now);
            if (launcher)
                interpreters.scan_command(static_cast<uint32_t>(launcher->command_pid()), static_cast<uint32_t>(root), now);
            if (screen && now - last_frame_ns >= 1'000'000'000ull)
                draw(now);
            if (tty && now - last_status > 500000000ull) {
                last_status = now;
                auto st = probe->stats();
                size_t live = 0;
                for (const auto& [pid, p] : rec.engine().processes())
                    live += !p.exited;
                fmt::print(stderr, "\r\033[K[lotus-bpf] {:.1f} s  processes {}  events {}  drops {}  samples {}",
                           static_cast<double>(now - t0) / 1e9, live, st.submitted, st.lost, rec.engine().samples());
            }
        }
        // Drain what is already in the ring buffer, then detach before doing the heavy writing.
        while (probe->poll(0) > 0) {
        }
        interpreters.check(monotonic_ns());
        if (launcher)
            interpreters.scan_command(static_cast<uint32_t>(launcher->command_pid()), static_cast<uint32_t>(root),
                                      monotonic_ns(), true);
        auto stats = probe->stats();
        const std::string evaluator_probe = probe->evaluator_probe(), python_probes = probe->python_probes();
        const std::string python_scope = probe->per_process() ? "traced processes" : "system-wide";
        const std::string syscall_programs = probe->syscall_programs();
        const size_t native_links = probe->native_links();
        probe->close(); // it also continues the children still held: count them after
        std::optional<exporter::RunInfo::Holds> holds;
        if (probe->per_process())
            holds = holds_info(probe->holds(), opts.hold_deadline_ms);
        if (tty)
            fmt::print(stderr, "\r\033[K");
        if (screen) { // back to the normal screen, where the last view stays
            screen.reset();
            fmt::print("{}", last_frame);
            fflush(stdout);
        }

        exporter::RunInfo run;
        run.tool = "lotus-bpf " LOTUS_VERSION;
        run.target_pid = static_cast<uint32_t>(root);
        run.t0_monotonic_ns = t0;
        run.python = interp.version.str();
        run.interpreter = interp.target_path;
        run.layout = interp.layout_source;
        run.cpus = cpus;
        run.resources_interval_ms = opts.resources_interval_ms;
        if (cgroup) {
            auto st = cgroup->stats();
            exporter::RunInfo::Limits l;
            l.cpus = opts.limits.cpus;
            l.memory_bytes = opts.limits.memory_bytes;
            l.cpuset = opts.limits.cpuset;
            for (const auto& r : opts.limits.read_bps)
                l.read_bps.emplace_back(r.device, r.bytes_per_s);
            for (const auto& r : opts.limits.write_bps)
                l.write_bps.emplace_back(r.device, r.bytes_per_s);
            l.have_io = st.have_io;
            l.io_read_bytes = st.io_read_bytes;
            l.io_write_bytes = st.io_write_bytes;
            l.cgroup = cgroup->version();
            l.have_cpu = st.have_cpu;
            l.have_memory = st.have_memory;
            l.periods = st.periods;
            l.throttled_periods = st.throttled_periods;
            l.throttled_ns = st.throttled_ns;
            l.memory_peak_bytes = st.memory_peak_bytes;
            l.memory_limit_hits = st.memory_limit_hits;
            l.oom_kills = st.oom_kills;
            l.left_running = cgroup->members().size();
            run.limits = l;
        }
        run.evaluator_probe = evaluator_probe;
        run.python_probes = python_probes;
        run.python_probes_scope = python_scope;
        run.syscall_programs = syscall_programs;
        run.holds = holds;
        run.events = stats.submitted;
        run.events_delivered = delivered;
        run.lost_events = stats.lost;
        for (const auto& f : capture::kBpfFailures)
            run.bpf_failures.push_back({std::string(f.name), stats.failures[f.slot], std::string(f.meaning)});
        run.stop_reason = stop_reason;
        run.tracer_peak_rss_kb = peak_rss_kb();
        run.tracer_cpu_ms = cpu_ms();
        if (native) {
            exporter::RunInfo::Native n{native->functions(), native_links, native->attach_seconds(),
                                        opts.sample_freq ? capture::sampling_event().name : "none",
                                        opts.sample_freq ? opts.sample_stack : 0, probe->sampling_scope(),
                                        stats.sampled_elsewhere, {}};
            // A --native spec that selected nothing is said, not silently dropped.
            size_t first_user = native_specs.size() - opts.native.size();
            for (size_t i = first_user; i < native_specs.size(); i++) {
                if (native->matched()[i])
                    continue;
                fmt::print(stderr, "lotus-bpf: --native '{}' matched no function in the libraries the traced "
                                   "processes mapped\n", opts.native[i - first_user]);
                n.specs_unmatched.push_back(opts.native[i - first_user]);
            }
            run.native = std::move(n);
        }
        if (recorder) {
            record::RecordEnd end{record::kRecordEnd, static_cast<uint32_t>(root), 0, 0, monotonic_ns(),
                                    stats.submitted, stats.lost};
            recorder->write(&end, sizeof(end));
            recorder->close();
        }
        bool written = rec.finish(std::move(run), calls_inlined(interp.caps, opts.all_calls));
        if (!written)
            return kExitOutputFailed;
        return launcher ? launched_status : 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "lotus-bpf: {}\n", e.what());
        return 1;
    }
}

} // namespace lotus::cli