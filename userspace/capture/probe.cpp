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
#include "probe_plan.h"
#include "proc/proc_maps.h"
#include "thread_sampling.h"
#include "tracepoint_ids.h"
#include "lotus.skel.h"
#include "lotus_abi.h"
#include "common/knobs.h"

namespace lotus::capture {

void check_privileges()
{
    if (geteuid() == 0)
        return;
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    if (syscall(SYS_capget, &hdr, data) == 0) {
        auto has = [&](int cap) { return data[cap / 32].effective & (1u << (cap % 32)); };
        if (has(CAP_BPF) && has(CAP_PERFMON))
            return;
    }
    throw CaptureError("lotus-bpf needs root (or CAP_BPF and CAP_PERFMON) to load BPF programs");
}

// libbpf's own messages only when asked for: errors reach the user as one line from us.
static int quiet_libbpf(enum libbpf_print_level, const char* fmt, va_list ap)
{
    if (common::knob_value("LOTUS_BPF_DEBUG"))
        return vfprintf(stderr, fmt, ap);
    return 0;
}

// How long a continued child counts as still starting (let_children_start waits for its getppid or exit): one
// that has not called getppid by then never will soon.
constexpr uint64_t kStartingNs = 2'000'000'000ull;

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
        start_guardian();
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
    multi_type_ = kernel.uprobe_multi_type;
    session_type_ = kernel.uprobe_session_type;
    slots_ = plan.slots;
    py_offsets_ = {interp.eval_offset};
    py_cookies_ = {0};
    if (slots_) {
        py_offsets_.clear();
        py_cookies_.clear();
        for (int k = 1; k < LOTUS_SLOTS_PROBED; k++) {
            skel_->rodata->slot_vaddr[k] = interp.slots->vaddr[static_cast<size_t>(k)];
            py_offsets_.push_back(interp.slots->offset[static_cast<size_t>(k)]);
            py_cookies_.push_back(static_cast<uint64_t>(k));
        }
        skel_->rodata->tstate_vaddr = interp.slots->tstate_vaddr;
    }
    hold_ = plan.hold;
    hold_self_ = plan.hold_self;
    perf_links_ = plan.perf_links;
    calls_apart_ = slots_ && session_type_ >= 0 && hold_;
    job_ = features.job;
    hold_deadline_ns_ = features.hold_deadline_ns ? features.hold_deadline_ns
                        : perf_links_                ? 2'000'000'000ull
                                                     : 500'000'000ull;
    net_ = plan.net;
    skel_->rodata->count_net = net_ ? 1 : 0;
    thread_sampling_ = plan.thread_sampling;
    skel_->rodata->thread_sampling = thread_sampling_ ? 1 : 0;
    native_ = features.native;
    libc_ = plan.libc;
    os_read_ = plan.os_read;
    if (os_read_) {
        py_offsets_.push_back(*interp.os_read_offset);
        py_cookies_.push_back(LOTUS_PY_OS_READ);
    }
    if (plan.try_syscall_events)
        if (auto ids = tracepoint_ids(kSyscallEvents))
            syscall_ids_ = std::move(*ids);
    syscall_events_ = !syscall_ids_.empty();
    choose_programs(plan);
}

void Probe::choose_programs(const ProbePlan& plan)
{
    const auto& load = plan.load;
    auto& progs = skel_->progs;
    for (auto [prog, on] : {std::pair{progs.on_fork_hold, load.on_fork_hold}, {progs.on_exec_hold, load.on_exec_hold},
                            {progs.on_fork_note, load.on_fork_note}, {progs.on_child_start, load.on_child_start},
                            {progs.on_exec_stop, load.on_exec_stop}, {progs.find_keepers, load.find_keepers},
                            {progs.on_sock_send, load.on_sock_send}, {progs.on_sock_recv, load.on_sock_recv},
                            {progs.py_call, load.py_call}, {progs.py_entry, load.py_entry},
                            {progs.py_slot, load.py_slot}, {progs.py_slot_entry, load.py_slot_entry},
                            {progs.py_return, load.py_return}, {progs.py_resume, load.py_resume},
                            {progs.py_retval, load.py_retval}, {progs.native_call, load.native_call},
                            {progs.on_sample, load.on_sample}, {progs.unsampled_threads, load.unsampled_threads},
                            {progs.libc_call, load.libc_call}})
        bpf_program__set_autoload(prog, on);
    // The exit tracepoint's arguments differ by kernel (lotus.bpf.c): the variant this one's match.
    bpf_program__set_autoload(progs.on_exit, kernel_.exit_group_dead);
    bpf_program__set_autoload(progs.on_exit_counted, !kernel_.exit_group_dead);
    if (plan.session)
        for (bpf_program* prog : {progs.py_call, progs.py_slot})
            bpf_program__set_expected_attach_type(prog, static_cast<bpf_attach_type>(session_type_));
    if (multi_type_ >= 0)
        for (bpf_program* prog : {progs.py_entry, progs.py_slot_entry, progs.py_return, progs.py_resume,
                                  progs.py_retval, progs.native_call, progs.on_child_start})
            bpf_program__set_expected_attach_type(prog, static_cast<bpf_attach_type>(multi_type_));
    for (bpf_program* prog : {progs.on_write, progs.on_getppid, progs.on_openat, progs.on_read_done,
                              progs.on_openat_done})
        bpf_program__set_autoload(prog, syscall_events_);
    for (bpf_program* prog : {progs.on_sys_enter, progs.on_sys_exit}) // every syscall's, the last resort
        bpf_program__set_autoload(prog, !libc_ && !syscall_events_);
    if (libc_)
        bpf_program__set_expected_attach_type(progs.libc_call, static_cast<bpf_attach_type>(session_type_));
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

void Probe::hold_exec_of(const std::string& path)
{
    struct stat st{};
    if (!skel_ || !hold_ || ::stat(path.c_str(), &st) != 0)
        return;
    for (auto& ino : skel_->bss->exec_inodes) {
        if (ino == st.st_ino)
            return;
        if (!ino) {
            ino = st.st_ino;
            return;
        }
    }
}

void Probe::start_guardian()
{
    hold_exec_of(interp_.object_path);
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    bpf_program* holder = hold_self_ ? skel_->progs.on_child_start : skel_->progs.on_fork_hold;
    if (bpf_obj_get_info_by_fd(bpf_program__fd(holder), &info, &len))
        throw CaptureError(fmt::format("cannot read the hold program's id: {}", strerror(errno)));
    guardian_ = std::make_unique<Guardian>(bpf_map__fd(skel_->maps.lotus_held), info.id, hold_deadline_ns_);
    if (job_ > 0) // out of the tracer's cgroup before any hold can be made: it must not die with the tracer
        guardian_cgroups_ = place_guardian(guardian_->pid(), job_);
    skel_->bss->tracer_tgid = static_cast<uint32_t>(getpid());
    skel_->bss->guardian_tgid = static_cast<uint32_t>(guardian_->pid());
    if (!hold_self_)
        return;
    // Without the kfuncs BPF knows the two by their task structs, found by a task iterator.
    Link link(bpf_program__attach_iter(skel_->progs.find_keepers, nullptr));
    common::UniqueFd it(link ? bpf_iter_create(bpf_link__fd(link.get())) : -1);
    if (!it)
        throw CaptureError(fmt::format("cannot run the BPF task iterator that finds the tracer: {}", strerror(errno)));
    char buf[64];
    while (::read(it.get(), buf, sizeof(buf)) > 0) {
    }
    if (!skel_->bss->tracer_task || !skel_->bss->guardian_task)
        throw CaptureError("the BPF task iterator did not find the tracer and its guardian");
}

// A tracepoint program attached by its section name, into its skeleton link; throws with the tracepoint named.
static void attach_tracepoint(bpf_program* prog, bpf_link*& link, const char* what)
{
    link = bpf_program__attach(prog);
    if (!link)
        throw CaptureError(fmt::format("cannot attach the {} tracepoint: {}", what, strerror(errno)));
}

void Probe::attach_self_holds()
{
    attach_tracepoint(skel_->progs.on_fork_note, skel_->links.on_fork_note, "sched_process_fork");
    attach_tracepoint(skel_->progs.on_exec_stop, skel_->links.on_exec_stop, "sched_process_exec");
    // Every process of the interpreter traps there, once per fork: a child of a traced process stops itself.
    bpf_program* prog = skel_->progs.on_child_start;
    child_start_link_ = multi_type_ >= 0 ? multi_link(prog, multi_type_, pin(interp_.object_path),
                                                      {*after_fork_offset_})
                                         : perf_uprobe_link(bpf_program__fd(prog), pin(interp_.object_path),
                                                            *after_fork_offset_, 0, false, -1);
    if (!child_start_link_)
        throw CaptureError(fmt::format("cannot probe PyOS_AfterFork_Child in {}: {}", interp_.object_path,
                                       strerror(errno)));
}

void Probe::SkeletonFree::operator()(lotus_bpf* s) const { lotus_bpf__destroy(s); }
void Probe::RingFree::operator()(ring_buffer* r) const { ring_buffer__free(r); }
void Probe::LinkFree::operator()(bpf_link* l) const { bpf_link__destroy(l); }

Probe::~Probe() { close(); }

// Detaching uprobes waits for RCU grace periods. A perf-event uprobe is detached under a global mutex, one
// after another, which made the native map's stop take seconds (docs/performance.md: "Stop latency", and
// "Kernels without per-process probes"). A uprobe_multi link waits once for all its probes, and waits from
// several threads share grace periods (close_in_parallel).
// In the order the members' destructors would go, but with the uprobe_multi links closed in parallel.
void Probe::close()
{
    for (bpf_link** l : {skel_ ? &skel_->links.on_fork_hold : nullptr, skel_ ? &skel_->links.on_exec_hold : nullptr,
                         skel_ ? &skel_->links.on_fork_note : nullptr, skel_ ? &skel_->links.on_exec_stop : nullptr})
        if (l && *l) { // no new holds, then nothing left stopped
            bpf_link__destroy(*l);
            *l = nullptr;
        }
    child_start_link_.reset();
    if (skel_ && hold_) {
        release_held(false, true);
        for (size_t r = 0; r < LOTUS_UNHELD_REASONS; r++)
            holds_.unheld_by[r] = skel_->bss->unheld[r];
        holds_.spawned_python = skel_->bss->exec_held;
    }
    // Every uprobe link in one batch: each close waits for RCU grace periods, and waits that overlap share them.
    std::vector<common::UniqueFd> fds = process_links_.release_all();
    fds.push_back(std::move(session_link_));
    for (auto& l : multi_links_)
        fds.push_back(std::move(l));
    multi_links_.clear();
    close_in_parallel(std::move(fds));
    process_links_.clear(); // and the processes' closings still under way
    sampling_.reset();
    links_.clear();
    perf_fds_.clear();
    rb_.reset();
    lib_rb_.reset();
    skel_.reset(); // its tracepoint links and the programs: nothing of lotus-bpf is attached after this
    guardian_.reset(); // it continues what the job's user stopped once they continue it, and exits
}

int Probe::on_record(void* ctx, void* data, size_t len)
{
    auto* self = static_cast<Probe*>(ctx);
    // A long backlog in the main ring must not delay a library's probes: look at the side ring often.
    if (++self->since_lib_check_ >= 64) {
        self->since_lib_check_ = 0;
        ring_buffer__consume(self->lib_rb_.get());
        if (self->hold_)
            self->release_held();
    }
    auto* h = static_cast<const lotus_event_header*>(data);
    if (self->hold_ && h->type == LOTUS_EV_EXIT) {
        self->process_links_.exited(h->tgid);
        if (!self->process_links_.has(h->tgid))
            self->call_links_.erase(h->tgid);
    }
    if (self->libc_ && h->type == LOTUS_EV_EXIT) {
        self->libc_linked_.erase(h->tgid);
        self->libc_pending_.erase(h->tgid);
        self->libc_borrowed_.erase(h->tgid);
    }
    // A new image may map another libc (an exec into another root): looked at once it has mapped one. So may the
    // children that took this process's libc as theirs: one forked after this exec, held and attached before
    // this record was read, took the old image's.
    if (self->libc_ && h->type == LOTUS_EV_EXEC && self->process_links_.has(h->tgid)) {
        uint64_t now = common::monotonic_ns();
        self->libc_pending_.emplace(h->tgid, now);
        for (auto it = self->libc_borrowed_.begin(); it != self->libc_borrowed_.end();) {
            if (it->second == h->tgid) {
                self->libc_pending_.emplace(it->first, now);
                it = self->libc_borrowed_.erase(it);
            } else {
                ++it;
            }
        }
    }
    if (h->type == LOTUS_EV_GETPPID || h->type == LOTUS_EV_EXIT)
        self->starting_.erase(h->tgid);
    if (self->hold_ && h->type == LOTUS_EV_EXIT) { // a vfork-like child that never exec'd: its entry waited for it
        lotus_hold hold{};
        int fd = bpf_map__fd(self->skel_->maps.lotus_held);
        if (bpf_map_lookup_elem(fd, &h->tgid, &hold) == 0 && (hold.flags & (LOTUS_HOLD_SHARED_MM | LOTUS_HOLD_PENDING)))
            bpf_map_delete_elem(fd, &h->tgid);
    }
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
        attach_self_holds();
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

void Probe::trace_process(uint32_t tgid, uint32_t root_tgid)
{
    lotus_traced_proc v{root_tgid, tgid, 0};
    if (bpf_map_update_elem(bpf_map__fd(skel_->maps.lotus_traced), &tgid, &v, BPF_ANY))
        throw CaptureError(fmt::format("cannot add process {} to the traced set: {}", tgid, strerror(errno)));
    hold_exec_of(fmt::format("/proc/{}/exe", tgid));
}

bool Probe::is_traced(uint32_t tgid) const
{
    lotus_traced_proc v;
    return bpf_map_lookup_elem(bpf_map__fd(skel_->maps.lotus_traced), &tgid, &v) == 0;
}

// BPF_LINK_CREATE's attributes for a uprobe_multi link, as the kernel lays them out (the uapi header of
// this distribution predates them).
struct UprobeMultiLinkAttr {
    uint32_t prog_fd, target_fd, attach_type, flags;
    uint64_t path, offsets, ref_ctr_offsets, cookies;
    uint32_t cnt, multi_flags, pid, pad;
};
constexpr uint32_t kUprobeMultiReturn = 1; // BPF_F_UPROBE_MULTI_RETURN

common::UniqueFd Probe::multi_link(bpf_program* prog, int attach_type, const std::string& path,
                                   const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies, bool ret,
                                   uint32_t pid)
{
    UprobeMultiLinkAttr attr{};
    attr.prog_fd = static_cast<uint32_t>(bpf_program__fd(prog));
    attr.attach_type = static_cast<uint32_t>(attach_type);
    attr.path = reinterpret_cast<uint64_t>(path.c_str());
    attr.offsets = reinterpret_cast<uint64_t>(offsets.data());
    attr.cookies = cookies.empty() ? 0 : reinterpret_cast<uint64_t>(cookies.data());
    attr.cnt = static_cast<uint32_t>(offsets.size());
    attr.multi_flags = ret ? kUprobeMultiReturn : 0;
    // pid 0: every process mapping the file (BPF drops the events of processes outside the traced set). Else
    // the kernel installs the probes in that process only (and in what it maps after an exec) and runs the
    // program only for its threads.
    attr.pid = pid;
    return common::UniqueFd(static_cast<int>(syscall(SYS_bpf, BPF_LINK_CREATE, &attr, sizeof(attr))));
}

std::vector<common::UniqueFd> Probe::multi_pair(bpf_program* entry, bpf_program* ret, const std::string& path,
                                                const std::vector<uint64_t>& offsets,
                                                const std::vector<uint64_t>& cookies, uint32_t pid)
{
    // The return probe goes first: the kernel hooks a call's return when the call begins, so a call whose
    // entry is seen must begin with the return probe in place (returns without a seen entry are ignored in
    // BPF). The other order loses the return of a call that begins between the two attachments, which left
    // every later span of that thread nested in it.
    std::vector<common::UniqueFd> fds = probe_links(ret, path, offsets, cookies, true, pid);
    if (fds.empty())
        return fds;
    std::vector<common::UniqueFd> entries = probe_links(entry, path, offsets, cookies, false, pid);
    if (entries.empty()) {
        int err = errno;
        fds.clear();
        errno = err;
        return fds;
    }
    for (auto& fd : entries)
        fds.push_back(std::move(fd));
    return fds;
}

std::vector<common::UniqueFd> Probe::probe_links(bpf_program* prog, const std::string& path,
                                                 const std::vector<uint64_t>& offsets,
                                                 const std::vector<uint64_t>& cookies, bool ret, uint32_t pid)
{
    std::vector<common::UniqueFd> fds;
    if (!perf_links_ || !pid) {
        fds.push_back(multi_link(prog, multi_type_, path, offsets, cookies, ret, pid));
    } else {
        // A return's cookie also names its process: older kernels run it for every process's returns (py_return).
        uint64_t owner = ret ? static_cast<uint64_t>(pid) << 32 : 0;
        for (size_t i = 0; i < offsets.size() && (fds.empty() || fds.back()); i++)
            fds.push_back(perf_uprobe_link(bpf_program__fd(prog), path, offsets[i],
                                           owner | (cookies.empty() ? 0 : cookies[i]), ret, static_cast<int>(pid)));
    }
    if (!fds.empty() && !fds.back()) {
        int err = errno;
        fds.clear();
        errno = err;
    }
    return fds;
}

bool Probe::attach_pair(bpf_program* entry, bpf_program* ret, const std::string& path,
                        const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies)
{
    if (multi_type_ >= 0) {
        auto fds = multi_pair(entry, ret, path, offsets, cookies);
        for (auto& fd : fds)
            multi_links_.push_back(std::move(fd));
        return !fds.empty();
    }
    if (offsets.size() != 1)
        return false;
    uint64_t cookie = cookies.empty() ? 0 : cookies[0];
    LIBBPF_OPTS(bpf_uprobe_opts, ret_opts, .bpf_cookie = cookie, .retprobe = true);
    Link out(bpf_program__attach_uprobe_opts(ret, -1, path.c_str(), offsets[0], &ret_opts));
    if (!out)
        return false;
    LIBBPF_OPTS(bpf_uprobe_opts, entry_opts, .bpf_cookie = cookie, .retprobe = false);
    Link in(bpf_program__attach_uprobe_opts(entry, -1, path.c_str(), offsets[0], &entry_opts));
    if (!in) {
        int err = errno;
        out.reset();
        errno = err;
        return false;
    }
    links_.push_back(std::move(out));
    links_.push_back(std::move(in));
    return true;
}

// The keys of a BPF hash map keyed by tgid, as they are now.
static std::vector<uint32_t> tgid_keys(int map_fd)
{
    std::vector<uint32_t> keys;
    uint32_t key = 0, next = 0;
    for (uint32_t* prev = nullptr; bpf_map_get_next_key(map_fd, prev, &next) == 0; prev = &key) {
        keys.push_back(next);
        key = next;
    }
    return keys;
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
    const auto& offsets = py_offsets_;
    const auto& cookies = py_cookies_;
    if (hold_) {
        pin(interp_.object_path); // for the links of later children; now, while the process it was found in lives
        // The children held so far (new processes), then every other process traced so far; later children
        // get theirs while held.
        python_on_ = true;
        release_held(true, true);
        for (uint32_t tgid : tgid_keys(bpf_map__fd(skel_->maps.lotus_traced)))
            if (!process_links_.has(tgid))
                attach_python_to(tgid);
        if (!attach_error_.empty())
            throw CaptureError(attach_error_);
        return;
    }
    if (session_type_ >= 0) {
        // One probe for entry and return: the kernel hooks the return only of calls whose entry asks for it.
        session_link_ = multi_link(slots_ ? skel_->progs.py_slot : skel_->progs.py_call, session_type_,
                                   interp_.object_path, offsets, cookies);
        if (!session_link_)
            throw CaptureError(fmt::format("cannot attach a uprobe session to {}: {}", interp_.object_path,
                                           strerror(errno)));
        return;
    }
    bpf_program* entry = slots_ ? skel_->progs.py_slot_entry : skel_->progs.py_entry;
    // Without uprobe_multi links (kernels before 6.6), one perf-event probe pair per function.
    bool ok = multi_type_ >= 0 ? attach_pair(entry, skel_->progs.py_return, interp_.object_path, offsets, cookies)
                               : true;
    for (size_t i = 0; multi_type_ < 0 && ok && i < offsets.size(); i++)
        ok = attach_pair(entry, skel_->progs.py_return, interp_.object_path, {offsets[i]}, {cookies[i]});
    if (!ok)
        throw CaptureError(fmt::format("cannot attach a uprobe and a uretprobe to {}: {}", interp_.object_path,
                                       strerror(errno)));
}

std::string Probe::pin(const std::string& path)
{
    auto it = pinned_.find(path);
    if (it == pinned_.end()) {
        common::UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
        if (!fd)
            return path; // the attach then fails with the reason
        it = pinned_.emplace(path, std::move(fd)).first;
    }
    return fmt::format("/proc/self/fd/{}", it->second.get());
}

void Probe::attach_python_to(uint32_t tgid, uint32_t forked_from)
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
    std::vector<common::UniqueFd> python;
    std::string interp = pin(interp_.object_path);
    int call_link = -1;
    if (calls_apart_) {
        // The object calls' probe in a link of its own, which detach_object_calls can take away.
        std::vector<uint64_t> offsets, cookies;
        for (size_t i = 0; i < py_offsets_.size(); i++)
            if (py_cookies_[i] != LOTUS_SLOT_CALL) {
                offsets.push_back(py_offsets_[i]);
                cookies.push_back(py_cookies_[i]);
            }
        python.push_back(multi_link(skel_->progs.py_slot, session_type_, interp, offsets, cookies, false, tgid));
        if (python.back()) {
            python.push_back(object_call_link(tgid));
            call_link = python.back().get();
        }
    } else if (session_type_ >= 0)
        python.push_back(multi_link(slots_ ? skel_->progs.py_slot : skel_->progs.py_call, session_type_, interp,
                                    py_offsets_, py_cookies_, false, tgid));
    else
        python = multi_pair(slots_ ? skel_->progs.py_slot_entry : skel_->progs.py_entry, skel_->progs.py_return,
                            interp, py_offsets_, py_cookies_, tgid);
    if (!made(std::move(python), "Python", interp_.object_path))
        return;
    for (const auto& lib : per_process_natives_)
        if (!made(native_multi(pin(lib.path), lib.offsets, lib.cookies, tgid), "native", lib.path))
            return;
    if (!inline_resume_.empty() && !made(inline_links(tgid), "opcode-handler", interp_.object_path))
        return;
    libc_linked_.erase(tgid); // an earlier process's, under the same pid
    if (libc_ && !attach_libc_to(tgid, fds, forked_from))
        libc_pending_.emplace(tgid, common::monotonic_ns()); // stopped at its exec: no libc mapped yet
    process_links_.add(tgid, std::move(fds));
    if (call_link >= 0)
        call_links_[tgid] = call_link;
}

common::UniqueFd Probe::object_call_link(uint32_t tgid)
{
    for (size_t i = 0; i < py_offsets_.size(); i++)
        if (py_cookies_[i] == LOTUS_SLOT_CALL)
            return multi_link(skel_->progs.py_slot, session_type_, pin(interp_.object_path), {py_offsets_[i]},
                              {LOTUS_SLOT_CALL}, false, tgid);
    errno = ENOENT;
    return {};
}

common::UniqueFd Probe::detach_object_calls(uint32_t tgid)
{
    auto it = call_links_.find(tgid);
    if (it == call_links_.end())
        return {};
    common::UniqueFd fd = process_links_.take(tgid, it->second);
    call_links_.erase(it);
    return fd;
}

bool Probe::attach_object_calls(uint32_t tgid)
{
    if (!calls_apart_ || call_links_.count(tgid) || !process_links_.has(tgid))
        return false;
    common::UniqueFd fd = object_call_link(tgid);
    if (!fd)
        return false;
    call_links_[tgid] = fd.get();
    std::vector<common::UniqueFd> v;
    v.push_back(std::move(fd));
    process_links_.append(tgid, std::move(v));
    return true;
}

bool Probe::attach_libc_to(uint32_t tgid, std::vector<common::UniqueFd>& fds, uint32_t forked_from)
{
    // A child just forked maps what its parent mapped: the parent's libc, without reading the child's maps
    // (long for a process that loaded torch, while the child is held: docs/performance.md, "What costs what").
    std::optional<elf::LibcMapping> libc;
    if (auto parent = libc_linked_.find(forked_from); forked_from && parent != libc_linked_.end() &&
                                                        parent->second.size() == 1) {
        const auto& [major, minor, inode] = *parent->second.begin();
        libc = elf::LibcMapping{libc_paths_.at(*parent->second.begin()), inode, major, minor};
        libc_borrowed_[tgid] = forked_from;
    } else {
        libc = elf::mapped_libc(static_cast<int>(tgid));
    }
    if (!libc)
        return false;
    auto file = std::make_tuple(libc->dev_major, libc->dev_minor, libc->inode);
    auto& linked = libc_linked_[tgid];
    if (linked.count(file))
        return true; // an exec that mapped the same libc again: its links hold for the new image
    auto it = libc_files_.find(file);
    if (it == libc_files_.end())
        it = libc_files_.emplace(file, elf::libc_wrappers(libc->path)).first;
    if (!it->second) {
        if (attach_error_.empty())
            attach_error_ = fmt::format("process {} maps {}, where read, write, open, openat or getppid is not found "
                                        "(LOTUS_SYSCALL_EVENTS=1 watches their syscalls instead)",
                                        tgid, libc->path);
        return true;
    }
    const auto& w = *it->second;
    if (native_ && !w.dlopen) {
        if (attach_error_.empty())
            attach_error_ = fmt::format("process {} maps {}, which has no dlopen (glibc before 2.34): the libraries "
                                        "it loads cannot be seen at libc's wrappers (LOTUS_SYSCALL_EVENTS=1 sees "
                                        "them at the open syscalls)",
                                        tgid, libc->path);
        return true;
    }
    std::vector<uint64_t> offsets, cookies;
    for (size_t i = 0; i < w.offsets.size(); i++)
        if (!os_read_ || w.cookies[i] != LOTUS_LIBC_READ) {
            offsets.push_back(w.offsets[i]);
            cookies.push_back(w.cookies[i]);
        }
    if (native_) { // the libraries it loads later, for the native map
        offsets.push_back(*w.dlopen);
        cookies.push_back(LOTUS_LIBC_DLOPEN);
    }
    // One pinned name per file: the path differs by process (/proc/PID/root/...), and a pin per worker would
    // hold a descriptor for every process the job ever ran.
    std::string path = pin(libc_paths_.emplace(file, libc->path).first->second);
    common::UniqueFd link = multi_link(skel_->progs.libc_call, session_type_, path, offsets, cookies, false, tgid);
    if (!link) {
        if (errno != ESRCH && attach_error_.empty())
            attach_error_ = fmt::format("cannot attach the libc probes of {} to process {}: {}", libc->path, tgid,
                                        strerror(errno));
        return true;
    }
    fds.push_back(std::move(link));
    linked.insert(file);
    return true;
}

void Probe::retry_libc()
{
    // A process maps its libc within milliseconds of its exec; one that maps none by then has no wrapper to see.
    constexpr uint64_t kLibcWaitNs = 10'000'000'000ull;
    uint64_t now = common::monotonic_ns();
    for (auto it = libc_pending_.begin(); it != libc_pending_.end();) {
        std::vector<common::UniqueFd> fds;
        bool gone = !proc::process_exists(static_cast<int>(it->first));
        bool done = gone || attach_libc_to(it->first, fds);
        if (!fds.empty())
            process_links_.append(it->first, std::move(fds));
        // It has run its dynamic loader since its exec (the same libc again, or another): the native map probes
        // what that mapped.
        if (done && !gone && native_ && lib_sink_) {
            lotus_event_header loaded{};
            loaded.type = LOTUS_EV_LOADED;
            loaded.tgid = loaded.tid = it->first;
            lib_sink_(&loaded, sizeof(loaded));
        }
        if (done || now - it->second > kLibcWaitNs)
            it = libc_pending_.erase(it);
        else
            ++it;
    }
}

void Probe::release_held(bool attach, bool all)
{
    // Read before the walk: a child held during it moves the count again, and the next call walks again.
    uint64_t held = __atomic_load_n(&skel_->bss->held_total, __ATOMIC_ACQUIRE);
    if (held == held_walked_ && !all)
        return;
    held_walked_ = held;
    int fd = bpf_map__fd(skel_->maps.lotus_held);
    for (uint32_t tgid : tgid_keys(fd)) {
        lotus_hold hold{};
        // ATTACHED: the guardian continues it once its job runs again. SHARED_MM: a vfork-like child, until its
        // exec (holds.bpf.h).
        // PENDING: a child that will hold itself, or never runs Python (holds.bpf.h).
        if (bpf_map_lookup_elem(fd, &tgid, &hold) != 0 ||
            (hold.flags & (LOTUS_HOLD_ATTACHED | LOTUS_HOLD_SHARED_MM | LOTUS_HOLD_PENDING)))
            continue;
        // A new process: any links under its pid were an earlier process's (ProcessLinks::add).
        uint64_t before = common::monotonic_ns();
        bool attached = attach && python_on_;
        bool parents_image = (hold.flags & LOTUS_HOLD_STOPPED) && !(hold.flags & LOTUS_HOLD_AT_EXEC);
        if (attached)
            attach_python_to(tgid, parents_image ? hold.parent_tgid : 0);
        // Again: the guardian may have continued it meanwhile (its deadline passed).
        if (bpf_map_lookup_elem(fd, &tgid, &hold) != 0)
            continue; // gone with its process: the guardian forgot it
        uint64_t t = common::monotonic_ns();
        uint64_t d = t > hold.since_ns ? t - hold.since_ns : 0;
        if (!(hold.flags & LOTUS_HOLD_STOPPED) || (hold.flags & LOTUS_HOLD_RELEASED)) {
            // It ran before its probes were in: not held, or continued by the guardian.
            bpf_map_delete_elem(fd, &tgid);
            holds_.deadline_released += (hold.flags & LOTUS_HOLD_RELEASED) ? 1 : 0;
            if (attached) {
                holds_.unseen_children++;
                holds_.unseen_total_ns += d;
                holds_.unseen_max_ns = std::max(holds_.unseen_max_ns, d);
            }
            continue;
        }
        if (stop_under_way(static_cast<pid_t>(hold.parent_tgid))) {
            // The job was stopped by its user: not ours to continue. The guardian does once the parent runs.
            hold.flags |= LOTUS_HOLD_ATTACHED;
            bpf_map_update_elem(fd, &tgid, &hold, BPF_EXIST);
        } else if (bpf_map_delete_elem(fd, &tgid) == 0) {
            continue_held(fd, tgid, hold);
        }
        holds_.attach_ns += t - before;
        std::erase_if(starting_, [&](const auto& kv) { return t - kv.second > kStartingNs; });
        starting_[tgid] = t;
        holds_.children++;
        holds_.total_ns += d;
        holds_.max_ns = std::max(holds_.max_ns, d);
    }
}

size_t Probe::let_children_start(int wait_ms)
{
    if (!hold_)
        return 0;
    release_held(true, true);
    uint64_t now = common::monotonic_ns(), until = now + static_cast<uint64_t>(wait_ms) * 1'000'000ull;
    while (true) {
        std::erase_if(starting_, [&](const auto& kv) { return now - kv.second > kStartingNs; });
        if (starting_.empty() || now >= until)
            return starting_.size();
        poll(10); // their GETPPID or EXIT records erase them
        now = common::monotonic_ns();
    }
}

std::vector<common::UniqueFd> Probe::inline_links(uint32_t tgid)
{
    std::string interp = pin(interp_.object_path);
    std::vector<common::UniqueFd> fds = probe_links(skel_->progs.py_resume, interp, inline_resume_, {}, false, tgid);
    if (fds.empty())
        return fds;
    std::vector<common::UniqueFd> rets = probe_links(skel_->progs.py_retval, interp, {inline_return_}, {}, false, tgid);
    if (rets.empty()) {
        int err = errno;
        fds.clear();
        errno = err;
        return fds;
    }
    fds.push_back(std::move(rets[0]));
    return fds;
}

void Probe::attach_inline_calls(const std::vector<uint64_t>& resume_offsets, uint64_t return_offset)
{
    auto refused = [&](uint64_t off) {
        return CaptureError(fmt::format("cannot probe the interpreter's opcode handler at {:#x} of {}: {}", off,
                                        interp_.object_path, strerror(errno)));
    };
    if (hold_) {
        // Per traced process, like the Python probes: another process of this interpreter never traps at its
        // opcodes. Those traced now (launch mode: the command, not yet running); held children in attach_python_to.
        inline_resume_ = resume_offsets;
        inline_return_ = return_offset;
        for (uint32_t tgid : process_links_.tgids()) {
            auto fds = inline_links(tgid);
            if (fds.empty()) {
                if (errno == ESRCH)
                    continue;
                throw refused(resume_offsets.empty() ? return_offset : resume_offsets[0]);
            }
            process_links_.append(tgid, std::move(fds));
        }
        return;
    }
    if (multi_type_ >= 0) {
        for (auto [prog, offsets] : {std::pair{skel_->progs.py_resume, resume_offsets},
                                     std::pair{skel_->progs.py_retval, std::vector<uint64_t>{return_offset}}}) {
            auto fd = multi_link(prog, multi_type_, interp_.object_path, offsets);
            if (!fd)
                throw refused(offsets[0]);
            multi_links_.push_back(std::move(fd));
        }
        return;
    }
    auto attach = [&](bpf_program* prog, uint64_t off) {
        LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = false);
        Link l(bpf_program__attach_uprobe_opts(prog, -1, interp_.object_path.c_str(), off, &opts));
        if (!l)
            throw refused(off);
        links_.push_back(std::move(l));
    };
    for (uint64_t off : resume_offsets)
        attach(skel_->progs.py_resume, off);
    attach(skel_->progs.py_retval, return_offset);
}

void Probe::attach_sampling(const CounterSpec& event, uint64_t freq)
{
    if (thread_sampling_) {
        sampling_ = std::make_unique<ThreadSampling>(skel_->progs.on_sample, skel_->progs.unsampled_threads, event,
                                                     freq);
        sampling_scope_ = "threads";
        return;
    }
    sampling_scope_ = "cpus";
    for (auto& fd : open_per_cpu(event, freq)) {
        if (!fd)
            continue;
        Link l(bpf_program__attach_perf_event(skel_->progs.on_sample, fd.get()));
        if (!l)
            throw CaptureError(fmt::format("cannot attach the sampling program: {}", strerror(errno)));
        fd.release(); // the link closes it
        links_.push_back(std::move(l));
    }
}

size_t Probe::threads_unsampled() const { return sampling_ ? sampling_->unknown() : 0; }

// A function's points as the kernel takes them: its return instructions, then its entry (a return seen without
// its entry, as one probe after the other goes live, is dropped; an entry without its return would stay open).
static void flatten(const NativePoints& f, std::vector<uint64_t>& offsets, std::vector<uint64_t>& cookies)
{
    for (uint64_t r : f.returns) {
        offsets.push_back(r);
        cookies.push_back(LOTUS_NATIVE_RETURN_POINT | f.id);
    }
    offsets.push_back(f.entry);
    cookies.push_back(f.id);
}

std::vector<bool> Probe::attach_native(const std::string& path, const std::vector<NativePoints>& fns)
{
    std::vector<bool> ok(fns.size(), false);
    std::vector<uint64_t> offsets, cookies;
    for (const auto& f : fns)
        flatten(f, offsets, cookies);
    if (offsets.empty())
        return ok;
    if (hold_ && !perf_links_) { // (a perf event per point and process would hold each new worker too long)
        // Per traced process: those traced now (held children get theirs in attach_python_to). A process that
        // exits meanwhile (ESRCH) needs none; any other refusal falls back to probing every process.
        std::vector<std::pair<uint32_t, std::vector<common::UniqueFd>>> made;
        bool refused = false;
        for (uint32_t tgid : process_links_.tgids()) {
            auto fds = native_multi(path, offsets, cookies, tgid);
            if (fds.empty() && errno != ESRCH) {
                refused = true;
                break;
            }
            made.emplace_back(tgid, std::move(fds));
        }
        if (!refused) {
            for (auto& [tgid, fds] : made)
                process_links_.append(tgid, std::move(fds));
            per_process_natives_.push_back({path, offsets, cookies});
            pin(path);
            native_links_++;
            return std::vector<bool>(fns.size(), true);
        }
    }
    // One link for the whole library where the kernel takes all its points; else one function at a time, so that
    // one it refuses does not cost the others.
    if (multi_type_ >= 0) {
        if (auto fd = multi_link(skel_->progs.native_call, multi_type_, path, offsets, cookies)) {
            multi_links_.push_back(std::move(fd));
            native_links_++;
            return std::vector<bool>(fns.size(), true);
        }
    }
    for (size_t i = 0; i < fns.size(); i++) {
        std::vector<uint64_t> o, k;
        flatten(fns[i], o, k);
        std::vector<Link> mine;
        for (size_t j = 0; j < o.size() && (mine.empty() || mine.back()); j++) {
            LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = k[j], .retprobe = false);
            mine.emplace_back(bpf_program__attach_uprobe_opts(skel_->progs.native_call, -1, path.c_str(), o[j], &opts));
        }
        if (!mine.back())
            continue; // (its links made so far go: a function is probed whole or not at all)
        ok[i] = true;
        native_links_ += mine.size();
        for (auto& l : mine)
            links_.push_back(std::move(l));
    }
    return ok;
}

std::vector<common::UniqueFd> Probe::native_multi(const std::string& path, const std::vector<uint64_t>& offsets,
                                                  const std::vector<uint64_t>& cookies, uint32_t pid)
{
    return probe_links(skel_->progs.native_call, path, offsets, cookies, false, pid);
}

int Probe::poll(int timeout_ms)
{
    // BPF wakes us only once a batch has accumulated; after the timeout, consume what is there anyway.
    ring_buffer__consume(lib_rb_.get());
    // Before sleeping: the side ring's wake-up for a child held since was just consumed, and would not wake us.
    if (hold_)
        release_held();
    if (timeout_ms > 0) {
        epoll_event ev[4];
        if (epoll_wait(epoll_.get(), ev, 4, timeout_ms) < 0 && errno != EINTR)
            throw CaptureError(fmt::format("ring buffer poll failed: {}", strerror(errno)));
    }
    int m = ring_buffer__consume(rb_.get());
    if (m < 0)
        throw CaptureError(fmt::format("ring buffer read failed: {}", strerror(-m)));
    if (hold_)
        release_held(); // also those whose HOLD record did not fit in the side ring (BPF's count says)
    if (!libc_pending_.empty())
        retry_libc();

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
