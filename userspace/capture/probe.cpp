#include "probe.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <sys/epoll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fmt/format.h>
#include <initializer_list>
#include <system_error>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "elf/elf_file.h"
#include "guardian.h"
#include "lotus_abi.h"
#include "perf_uprobe.h"
#include "plan_programs.h"
#include "probe_plan.h"
#include "proc/proc_maps.h"
#include "thread_sampling.h"
#include "tracepoint_ids.h"
#include "lotus.skel.h"
#include "lotus_abi.h"
#include "common/knobs.h"
#include "probe_internal.h"

namespace lotus::capture {

namespace {

bool has_capability(int cap)
{
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    return syscall(SYS_capget, &hdr, data) == 0 && (data[cap / 32].effective & (1u << (cap % 32)));
}

} // namespace

void check_privileges()
{
    if (geteuid() == 0 || (has_capability(CAP_BPF) && has_capability(CAP_PERFMON)))
        return;
    throw CaptureError("lotus-bpf needs root (or CAP_BPF and CAP_PERFMON) to load BPF programs");
}

bool has_sys_admin()
{
    return has_capability(CAP_SYS_ADMIN);
}

bool libbpf_skips_unlisted_modules()
{
    return libbpf_major_version() > 1 || (libbpf_major_version() == 1 && libbpf_minor_version() >= 2);
}

// libbpf's own messages only when asked for: errors reach the user as one line from us.
static int quiet_libbpf(enum libbpf_print_level, const char* fmt, va_list ap)
{
    if (common::knob_value("LOTUS_BPF_DEBUG"))
        return vfprintf(stderr, fmt, ap);
    return 0;
}

// The watched syscalls' own events, in the order of the programs attached to them below.
static const std::vector<std::string> kSyscallEvents = {"syscalls/sys_enter_write", "syscalls/sys_enter_getppid",
                                                        "syscalls/sys_enter_openat", "syscalls/sys_exit_read",
                                                        "syscalls/sys_exit_openat"};

// A program on a tracepoint event by its id (what libbpf's attach by name does, with the id read by us: tracefs
// need not be mounted where lotus-bpf runs).
static bpf_link* attach_tracepoint_id(bpf_program* prog, uint32_t id)
{
    perf_event_attr attr{};
    attr.type = PERF_TYPE_TRACEPOINT;
    attr.size = sizeof(attr);
    attr.config = id;
    int pfd = static_cast<int>(syscall(__NR_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC));
    if (pfd < 0)
        return nullptr;
    bpf_link* link = bpf_program__attach_perf_event(prog, pfd); // owns pfd from here
    if (!link) {
        int err = errno;
        close(pfd);
        errno = err;
    }
    return link;
}

std::optional<uint64_t> after_fork_offset(const std::string& interp_path)
{
    try {
        elf::ElfFile elf(interp_path);
        if (auto sym = elf.symbol("PyOS_AfterFork_Child"); sym && sym->function)
            return elf.file_offset(sym->value);
    } catch (const std::exception&) {
    }
    return std::nullopt;
}

// Opening, planning and loading, in that order: nothing is attached here (the attach_* calls do that).
Probe::Probe(const cpython::Interpreter& interp, Sink sink, const std::vector<CounterSpec>& counters,
             ProbeFeatures features)
    : interp_(interp), sink_(std::move(sink))
{
    libbpf_set_print(quiet_libbpf);
    const KernelFeatures& kernel = this_kernel();
    if (auto refusal = kernel_refusal(kernel); !refusal.empty())
        throw CaptureError(refusal);
    kernel_ = kernel;
    skel_.reset(lotus_bpf__open());
    if (!skel_)
        throw CaptureError(fmt::format("cannot open the BPF programs: {}", strerror(errno)));
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0 || counters.size() > LOTUS_MAX_PERF)
        throw CaptureError("cannot count the CPUs, or too many counters");
    set_constants(interp, counters, features, ncpu);
    plan_ = make_plan(kernel, interp, features);
    apply_plan(plan_, kernel, interp, features);
    bpf_map__set_max_entries(skel_->maps.lotus_perf, static_cast<uint32_t>(LOTUS_MAX_PERF * ncpu));
    if (int err = lotus_bpf__load(skel_.get())) {
        // 3.11's opcode-handler program is the largest: older verifiers (6.1's) stop before its end.
        if (err == -E2BIG && plan_.load.py_resume)
            throw CaptureError(fmt::format("--all-calls on CPython 3.11 cannot run on Linux {}: its verifier gives up "
                                           "on the opcode-handler program (1,000,000 instructions; Linux 6.12 "
                                           "verifies it, 6.1 does not); without --all-calls lotus-bpf runs here",
                                           kernel_.release));
        throw CaptureError(fmt::format("cannot load the BPF programs: {} (set LOTUS_BPF_DEBUG=1 for the log)",
                                       strerror(-err)));
    }
    if (thread_sampling_) {
        bpf_prog_info info{};
        uint32_t len = sizeof(info);
        if (bpf_obj_get_info_by_fd(bpf_program__fd(skel_->progs.on_sample), &info, &len))
            throw CaptureError(fmt::format("cannot read the sampling program's id: {}", strerror(errno)));
        skel_->bss->sampler_prog_id = info.id;
    }
    if (hold_)
        holds_->start_guardian(interp_.object_path);
    open_rings();
    hand_counters(counters, ncpu);
}

// What BPF reads as constants: the interpreter's layout, the counters' sources, the CPUs, the call features.
void Probe::set_constants(const cpython::Interpreter& interp, const std::vector<CounterSpec>& counters,
                          const ProbeFeatures& features, int ncpu)
{
    skel_->rodata->layout = interp.layout;
    skel_->rodata->nr_perf = static_cast<uint32_t>(counters.size());
    for (size_t k = 0; k < counters.size(); k++)
        skel_->rodata->perf_src[k] = counters[k].source;
    skel_->rodata->nr_cpus = static_cast<uint32_t>(ncpu);
    skel_->rodata->inline_calls = features.inline_calls ? 1 : 0;
    skel_->rodata->sample_frames = features.sample_frames;
    skel_->rodata->sample_copy_stack = features.sample_copy_stack ? 1 : 0;
    skel_->rodata->hold_while_tracer_stopped = common::knob_on("LOTUS_TEST_HOLD_WHILE_STOPPED");
}

// The plan of what loads (probe_plan.h: pure, unit-tested) from the kernel's features, the run's and the knobs.
ProbePlan Probe::make_plan(const KernelFeatures& kernel, const cpython::Interpreter& interp,
                           const ProbeFeatures& features)
{
    PlanInputs in;
    in.evaluator = features.evaluator;
    in.inline_calls = features.inline_calls;
    in.native = features.native;
    in.sampling = features.sampling;
    in.network = features.network;
    in.interp_slots = interp.slots.has_value();
    in.interp_os_read = interp.os_read_offset.has_value();
    after_fork_offset_ = after_fork_offset(interp.object_path);
    in.interp_after_fork = after_fork_offset_.has_value();
    in.links_libc = elf::links_libc(interp.object_path);
    in.libc_dlopen = true; // read below only where the plan would use libc's wrappers with the native map
    in.knob_evaluator = common::knob_on("LOTUS_EVALUATOR_PROBE");
    in.knob_system_wide = common::knob_on("LOTUS_SYSTEM_WIDE_PROBES");
    in.knob_per_cpu_sampling = common::knob_on("LOTUS_PER_CPU_SAMPLING");
    in.knob_raw_syscalls = common::knob_on("LOTUS_RAW_SYSCALLS");
    in.knob_syscall_events = common::knob_on("LOTUS_SYSCALL_EVENTS");
    in.knob_libc_read = common::knob_on("LOTUS_LIBC_READ");
    ProbePlan plan = plan_probes(kernel, in);
    if (plan.libc && in.native) { // the native map needs the libraries the dynamic loader maps: libc's dlopen
        auto libc = elf::linked_libc(interp.object_path);
        auto w = libc ? elf::libc_wrappers(*libc) : std::nullopt;
        in.libc_dlopen = w && w->dlopen;
        plan = plan_probes(kernel, in);
    }
    plan_inputs_ = in;
    return plan;
}

// The plan into the probe's state (which Python probes, holds, network, sampling, libc or syscall events) and
// into the skeleton: the slot addresses, the programs that load and their attach types.
void Probe::apply_plan(const ProbePlan& plan, const KernelFeatures& kernel, const cpython::Interpreter& interp,
                       const ProbeFeatures& features)
{
    session_type_ = kernel.uprobe_session_type;
    slots_ = plan.slots;
    PythonProbes python{interp.object_path, {interp.eval_offset}, {0}};
    if (slots_) {
        python.offsets.clear();
        python.cookies.clear();
        for (int k = 1; k < LOTUS_SLOTS_PROBED; k++) {
            skel_->rodata->slot_vaddr[k] = interp.slots->vaddr[static_cast<size_t>(k)];
            python.offsets.push_back(interp.slots->offset[static_cast<size_t>(k)]);
            python.cookies.push_back(static_cast<uint64_t>(k));
        }
        skel_->rodata->tstate_vaddr = interp.slots->tstate_vaddr;
    }
    hold_ = plan.hold;
    hold_self_ = plan.hold_self;
    calls_apart_ = slots_ && session_type_ >= 0 && hold_;
    uint64_t hold_deadline_ns = features.hold_deadline_ns ? features.hold_deadline_ns
                                : plan.perf_links            ? 2'000'000'000ull
                                                             : 500'000'000ull;
    holds_ = std::make_unique<Holds>(skel_.get(), hold_self_, hold_deadline_ns, features.job,
                                     [this](uint32_t tgid, uint32_t forked_from) { attach_to(tgid, forked_from); });
    net_ = plan.net;
    skel_->rodata->count_net = net_ ? 1 : 0;
    thread_sampling_ = plan.thread_sampling;
    skel_->rodata->thread_sampling = thread_sampling_ ? 1 : 0;
    libc_ = plan.libc;
    os_read_ = plan.os_read;
    uprobes_ = std::make_unique<UprobeLinks>(kernel.uprobe_multi_type, plan.perf_links);
    if (libc_)
        libc_links_.emplace(
            os_read_, features.native, [this](const std::string& path) { return uprobes_->pin(path); },
            [this](const std::string& path, const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies,
                   uint32_t tgid) {
                return UprobeLinks::multi_link(skel_->progs.libc_call, session_type_, path, offsets, cookies, false,
                                               tgid);
            },
            attach_error_);
    if (os_read_) {
        python.offsets.push_back(*interp.os_read_offset);
        python.cookies.push_back(LOTUS_PY_OS_READ);
    }
    python.slots = slots_;
    python.per_process = hold_;
    python.calls_apart = calls_apart_;
    python.session_type = session_type_;
    python_ = std::make_unique<PythonLinks>(skel_.get(), std::move(python), *uprobes_, process_links_);
    native_ = std::make_unique<NativeLinks>(skel_.get(), thread_sampling_, hold_ && !plan.perf_links, *uprobes_,
                                            process_links_);
    if (plan.try_syscall_events)
        if (auto ids = tracepoint_ids(kSyscallEvents))
            syscall_ids_ = std::move(*ids);
    syscall_events_ = !syscall_ids_.empty();
    choose_programs(skel_.get(), plan, kernel, syscall_events_);
}

// The record ring and the side ring of library opens, both waking one epoll set (a held child waits for us).
void Probe::open_rings()
{
    rb_.reset(ring_buffer__new(bpf_map__fd(skel_->maps.lotus_events), on_record, this, nullptr));
    lib_rb_.reset(ring_buffer__new(bpf_map__fd(skel_->maps.lotus_lib_opens), on_library, this, nullptr));
    if (!rb_ || !lib_rb_)
        throw CaptureError(fmt::format("cannot open the ring buffer: {}", strerror(errno)));
    if (ring_buffer__add(rb_.get(), bpf_map__fd(skel_->maps.lotus_lib_opens), on_library, this))
        throw CaptureError(fmt::format("cannot open the ring buffer: {}", strerror(errno)));
    epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_)
        throw CaptureError(fmt::format("cannot open the ring buffer: {}", strerror(errno)));
    wake_on(ring_buffer__epoll_fd(rb_.get()));
}

// --counters that are perf events: one per CPU each, handed to BPF, which reads them at each switch.
void Probe::hand_counters(const std::vector<CounterSpec>& counters, int ncpu)
{
    for (size_t k = 0; k < counters.size(); k++) {
        if (counters[k].source != LOTUS_SRC_PERF_EVENT)
            continue; // BPF reads the thread's own counts
        auto fds = open_per_cpu(counters[k]);
        for (size_t cpu = 0; cpu < fds.size(); cpu++) {
            if (!fds[cpu])
                continue;
            uint32_t idx = static_cast<uint32_t>(k * ncpu + cpu);
            int fd = fds[cpu].get();
            perf_fds_.push_back(std::move(fds[cpu]));
            if (bpf_map_update_elem(bpf_map__fd(skel_->maps.lotus_perf), &idx, &fd, BPF_ANY))
                throw CaptureError(fmt::format("cannot hand counter {} to BPF: {}", counters[k].name, strerror(errno)));
        }
    }
}

void Probe::SkeletonFree::operator()(lotus_bpf* s) const { lotus_bpf__destroy(s); }
void Probe::RingFree::operator()(ring_buffer* r) const { ring_buffer__free(r); }

Probe::~Probe() { close(); }

// Detaching uprobes waits for RCU grace periods. A perf-event uprobe is detached under a global mutex, one
// after another, which made the native map's stop take seconds (docs/performance.md: "Stop latency", and
// "Kernels without per-process probes"). A uprobe_multi link waits once for all its probes, and waits from
// several threads share grace periods (close_in_parallel).
// In the order probe.h states: no new holds and nothing left stopped before any probe goes, the uprobe_multi
// links of every unit closed in parallel, the programs last, the guardian after them.
void Probe::close()
{
    for (bpf_link** l : {skel_ ? &skel_->links.on_fork_hold : nullptr, skel_ ? &skel_->links.on_exec_hold : nullptr,
                         skel_ ? &skel_->links.on_fork_note : nullptr, skel_ ? &skel_->links.on_exec_stop : nullptr})
        if (l && *l) { // no new holds, then nothing left stopped
            bpf_link__destroy(*l);
            *l = nullptr;
        }
    if (skel_ && hold_)
        holds_->stop();
    // Every uprobe link in one batch: each close waits for RCU grace periods, and waits that overlap share them.
    std::vector<common::UniqueFd> fds = process_links_.release_all();
    if (python_)
        python_->release(fds);
    if (native_)
        native_->release(fds);
    close_in_parallel(std::move(fds));
    process_links_.clear(); // and the processes' closings still under way
    if (native_) {
        native_->close_sampling();
        native_->close_perf_links(); // (the per-CPU sampling events' links among them)
    }
    if (python_)
        python_->close_perf_links();
    perf_fds_.clear();
    rb_.reset();
    lib_rb_.reset();
    skel_.reset(); // its tracepoint links and the programs: nothing of lotus-bpf is attached after this
    if (holds_)
        holds_->end_guardian(); // it continues what the job's user stopped once they continue it, and exits
}

int Probe::on_record(void* ctx, void* data, size_t len)
{
    auto* self = static_cast<Probe*>(ctx);
    // A long backlog in the main ring must not delay a library's probes: look at the side ring often.
    if (++self->since_lib_check_ >= 64) {
        self->since_lib_check_ = 0;
        ring_buffer__consume(self->lib_rb_.get());
        if (self->hold_)
            self->holds_->release_held();
    }
    auto* h = static_cast<const lotus_event_header*>(data);
    if (self->hold_ && h->type == LOTUS_EV_EXIT) {
        self->process_links_.exited(h->tgid);
        self->python_->exited(h->tgid);
    }
    if (self->libc_links_ && h->type == LOTUS_EV_EXIT)
        self->libc_links_->exited(h->tgid);
    if (self->libc_links_ && h->type == LOTUS_EV_EXEC && self->process_links_.has(h->tgid))
        self->libc_links_->exec(h->tgid, common::monotonic_ns());
    self->holds_->seen(h->type, h->tgid);
    if (self->hold_ && h->type == LOTUS_EV_EXIT) // a vfork-like child that never exec'd: its entry waited for it
        self->holds_->exited(h->tgid);
    self->sink_(data, len);
    return 0;
}

int Probe::on_library(void* ctx, void* data, size_t len)
{
    auto* self = static_cast<Probe*>(ctx);
    if (static_cast<const lotus_event_header*>(data)->type == LOTUS_EV_HOLD)
        return 0; // a wake-up: which children are held, lotus_held says
    if (self->lib_sink_)
        self->lib_sink_(data, len);
    return 0;
}

void Probe::attach_process_tracking()
{
    attach_tracepoint(skel_->progs.on_fork, skel_->links.on_fork, "sched_process_fork");
    if (hold_ && hold_self_) {
        holds_->attach_self_holds([this] { return child_start_link(); }, interp_.object_path);
    } else if (hold_) {
        attach_tracepoint(skel_->progs.on_fork_hold, skel_->links.on_fork_hold, "sched_process_fork");
        attach_tracepoint(skel_->progs.on_exec_hold, skel_->links.on_exec_hold, "sched_process_exec");
    }
    if (net_) {
        attach_tracepoint(skel_->progs.on_sock_send, skel_->links.on_sock_send, "sock_send_length");
        attach_tracepoint(skel_->progs.on_sock_recv, skel_->links.on_sock_recv, "sock_recv_length");
    }
    attach_tracepoint(skel_->progs.on_exec, skel_->links.on_exec, "sched_process_exec");
    if (kernel_.exit_group_dead)
        attach_tracepoint(skel_->progs.on_exit, skel_->links.on_exit, "sched_process_exit");
    else
        attach_tracepoint(skel_->progs.on_exit_counted, skel_->links.on_exit_counted, "sched_process_exit");
    attach_tracepoint(skel_->progs.on_rename, skel_->links.on_rename, "task_rename");
    if (syscall_events_) {
        bpf_program* progs[] = {skel_->progs.on_write, skel_->progs.on_getppid, skel_->progs.on_openat,
                                skel_->progs.on_read_done, skel_->progs.on_openat_done};
        bpf_link** links[] = {&skel_->links.on_write, &skel_->links.on_getppid, &skel_->links.on_openat,
                              &skel_->links.on_read_done, &skel_->links.on_openat_done};
        for (size_t i = 0; i < kSyscallEvents.size(); i++)
            if (!(*links[i] = attach_tracepoint_id(progs[i], syscall_ids_[i])))
                throw CaptureError(fmt::format("cannot attach the {} tracepoint: {}", kSyscallEvents[i],
                                               strerror(errno)));
    } else if (!libc_) {
        attach_tracepoint(skel_->progs.on_sys_enter, skel_->links.on_sys_enter, "sys_enter");
        attach_tracepoint(skel_->progs.on_sys_exit, skel_->links.on_sys_exit, "sys_exit");
    }
    attach_tracepoint(skel_->progs.on_switch, skel_->links.on_switch, "sched_switch");
}

void Probe::adopt_threads()
{
    // A task iterator's program runs for every task of the machine as the iterator is read.
    Link link(bpf_program__attach_iter(skel_->progs.adopt_threads, nullptr));
    common::UniqueFd it(link ? bpf_iter_create(bpf_link__fd(link.get())) : -1);
    if (!it)
        throw CaptureError(fmt::format("cannot run the BPF task iterator that finds the traced threads: {}",
                                       strerror(errno)));
    char buf[256];
    while (::read(it.get(), buf, sizeof(buf)) > 0) {
    }
}

void Probe::attach_python()
{
    adopt_threads();
    if (!hold_) {
        python_->attach_everywhere();
        return;
    }
    uprobes_->pin(interp_.object_path); // for the links of later children; now, while the process it was found in lives
    // The children held so far (new processes), then every other process traced so far; later children get theirs
    // while held.
    holds_->attach_children();
    holds_->release_held(true, true);
    for (uint32_t tgid : tgid_keys(bpf_map__fd(skel_->maps.lotus_traced)))
        if (!process_links_.has(tgid))
            attach_to(tgid);
    if (!attach_error_.empty())
        throw CaptureError(attach_error_);
}

void Probe::attach_to(uint32_t tgid, uint32_t forked_from)
{
    std::vector<common::UniqueFd> fds;
    // A set of this process's links, or false with the refusal noted (ESRCH: it is gone already, nothing to say);
    // the links made before it close with fds.
    auto made = [&](std::vector<common::UniqueFd> more, const char* what, const std::string& path) {
        if (more.empty() || !more.back()) {
            if (errno != ESRCH && attach_error_.empty())
                attach_error_ = fmt::format("cannot attach the {} probes of {} to process {}: {}", what, path, tgid,
                                            strerror(errno));
            return false;
        }
        for (auto& fd : more)
            fds.push_back(std::move(fd));
        return true;
    };
    int call_link = -1;
    if (!made(python_->process_links(tgid, call_link), "Python", interp_.object_path))
        return;
    for (const auto& lib : native_->per_process())
        if (!made(native_->process_links(lib, tgid), "native", lib.path))
            return;
    if (python_->inline_per_process() && !made(python_->inline_links(tgid), "opcode-handler", interp_.object_path))
        return;
    if (libc_links_) {
        libc_links_->new_process(tgid); // (an earlier process's files, under the same pid)
        if (!libc_links_->attach_to(tgid, fds, forked_from))
            libc_links_->pend(tgid, common::monotonic_ns()); // stopped at its exec: no libc mapped yet
    }
    process_links_.add(tgid, std::move(fds));
    python_->added(tgid, call_link);
}

void Probe::attach_inline_calls(const std::vector<uint64_t>& resume_offsets, uint64_t return_offset)
{
    python_->attach_inline_calls(resume_offsets, return_offset);
}

common::UniqueFd Probe::detach_object_calls(uint32_t tgid) { return python_->detach_object_calls(tgid); }

bool Probe::attach_object_calls(uint32_t tgid) { return python_->attach_object_calls(tgid); }

void Probe::attach_sampling(const CounterSpec& event, uint64_t freq) { native_->attach_sampling(event, freq); }

size_t Probe::threads_unsampled() const { return native_->threads_unsampled(); }

std::vector<bool> Probe::attach_native(const std::string& path, const std::vector<NativePoints>& fns)
{
    return native_->attach(path, fns);
}

void Probe::trace_process(uint32_t tgid, uint32_t root_tgid)
{
    lotus_traced_proc v{root_tgid, tgid, 0};
    if (bpf_map_update_elem(bpf_map__fd(skel_->maps.lotus_traced), &tgid, &v, BPF_ANY))
        throw CaptureError(fmt::format("cannot add process {} to the traced set: {}", tgid, strerror(errno)));
    hold_exec_of(fmt::format("/proc/{}/exe", tgid));
}

void Probe::hold_exec_of(const std::string& path)
{
    if (skel_ && hold_)
        holds_->hold_exec_of(path);
}

size_t Probe::let_children_start(int wait_ms)
{
    if (!hold_)
        return 0;
    return holds_->let_children_start(wait_ms, [this](int timeout_ms) { return poll(timeout_ms); });
}

common::UniqueFd Probe::child_start_link()
{
    bpf_program* prog = skel_->progs.on_child_start;
    int multi_type = uprobes_->multi_type();
    return multi_type >= 0 ? UprobeLinks::multi_link(prog, multi_type, uprobes_->pin(interp_.object_path),
                                                     {*after_fork_offset_})
                           : perf_uprobe_link(bpf_program__fd(prog), uprobes_->pin(interp_.object_path),
                                              *after_fork_offset_, 0, false, -1);
}

bool Probe::is_traced(uint32_t tgid) const
{
    lotus_traced_proc v;
    return bpf_map_lookup_elem(bpf_map__fd(skel_->maps.lotus_traced), &tgid, &v) == 0;
}

int Probe::poll(int timeout_ms)
{
    // BPF wakes us only once a batch has accumulated; after the timeout, consume what is there anyway.
    ring_buffer__consume(lib_rb_.get());
    // Before sleeping: the side ring's wake-up for a child held since was just consumed, and would not wake us.
    if (hold_)
        holds_->release_held();
    if (timeout_ms > 0) {
        epoll_event ev[4];
        if (epoll_wait(epoll_.get(), ev, 4, timeout_ms) < 0 && errno != EINTR)
            throw CaptureError(fmt::format("ring buffer poll failed: {}", strerror(errno)));
    }
    int m = ring_buffer__consume(rb_.get());
    if (m < 0)
        throw CaptureError(fmt::format("ring buffer read failed: {}", strerror(-m)));
    if (hold_)
        holds_->release_held(); // also those whose HOLD record did not fit in the side ring (BPF's count says)
    if (libc_links_ && libc_links_->pending())
        libc_links_->retry(process_links_, lib_sink_);

    if (!attach_error_.empty())
        throw CaptureError(attach_error_);
    return m;
}

void Probe::wake_on(int fd)
{
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev))
        throw CaptureError(fmt::format("cannot watch fd {} for wake-ups: {}", fd, strerror(errno)));
}

void Probe::set_role(uint32_t space, uint64_t code, uint64_t fingerprint, uint32_t flags,
                     const std::vector<uint8_t>& capture_slots)
{
    // Keyed by the object described (its fingerprint): the address may hold another code object by now, and
    // BPF's entry for the address is BPF's alone (lotus_class_key). A failed update only means more events
    // than needed.
    lotus_class_key key{space, 0, code, fingerprint};
    lotus_role role{};
    role.flags = flags;
    role.fingerprint = fingerprint;
    for (size_t i = 0; i < LOTUS_SLOTS_PER_ROLE; i++)
        role.capture_slot[i] = i < capture_slots.size() ? capture_slots[i] : LOTUS_NO_SLOT;
    bpf_map_update_elem(bpf_map__fd(skel_->maps.lotus_code_classes), &key, &role, BPF_ANY);
}

void Probe::set_type(uint32_t space, uint64_t type, uint64_t fingerprint, uint32_t flags)
{
    // As set_role. (An LRU eviction of BPF's entry only means it is described again.)
    lotus_class_key key{space, 0, type, fingerprint};
    lotus_type_role role{flags, 0, fingerprint};
    bpf_map_update_elem(bpf_map__fd(skel_->maps.lotus_type_classes), &key, &role, BPF_ANY);
}

lotus_net_bytes Probe::net_bytes(uint32_t tgid) const
{
    lotus_net_bytes b{};
    if (net_ && bpf_map_lookup_elem(bpf_map__fd(skel_->maps.lotus_net), &tgid, &b) != 0)
        b = {};
    return b;
}

CaptureStats Probe::stats() const
{
    CaptureStats s;
    int fd = bpf_map__fd(skel_->maps.lotus_counters);
    int ncpu = libbpf_num_possible_cpus();
    std::vector<uint64_t> vals(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
    for (uint32_t idx = 0; idx < LOTUS_COUNT_SLOTS; idx++) {
        if (bpf_map_lookup_elem(fd, &idx, vals.data()))
            continue;
        uint64_t sum = 0;
        for (auto v : vals)
            sum += v;
        if (idx == LOTUS_COUNT_LOST)
            s.lost = sum;
        else if (idx == LOTUS_COUNT_SUBMITTED)
            s.submitted = sum;
        else if (idx == LOTUS_COUNT_SAMPLED_ELSEWHERE)
            s.sampled_elsewhere = sum;
        else
            s.failures[idx] = sum;
    }
    return s;
}

} // namespace lotus::capture
