#include "probe.h"

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <vector>

#include "lotus.skel.h"
#include "lotus_abi.h"

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
    if (getenv("LOTUS_BPF_DEBUG"))
        return vfprintf(stderr, fmt, ap);
    return 0;
}

// The attach type of uprobe sessions (Linux 6.13+) as this kernel numbers it, or -1 when it has none (or
// LOTUS_NO_UPROBE_SESSION is set: the entry and return pair, for comparison). libbpf 1.1 predates sessions.
static int uprobe_session_attach_type()
{
    if (const char* off = getenv("LOTUS_NO_UPROBE_SESSION"); off && *off && strcmp(off, "0") != 0)
        return -1;
    btf* vmlinux = btf__load_vmlinux_btf();
    if (!vmlinux)
        return -1;
    int value = -1;
    int id = btf__find_by_name_kind(vmlinux, "bpf_attach_type", BTF_KIND_ENUM);
    if (id > 0 && btf__find_by_name_kind(vmlinux, "bpf_session_is_return", BTF_KIND_FUNC) > 0) {
        const btf_type* t = btf__type_by_id(vmlinux, id);
        const struct btf_enum* e = btf_enum(t);
        for (int i = 0; i < btf_vlen(t); i++, e++)
            if (strcmp(btf__name_by_offset(vmlinux, e->name_off), "BPF_TRACE_UPROBE_SESSION") == 0)
                value = e->val;
    }
    btf__free(vmlinux);
    return value;
}

Probe::Probe(const target::Interpreter& interp, Sink sink, const std::vector<CounterSpec>& counters,
             ProbeFeatures features)
    : interp_(interp), sink_(std::move(sink))
{
    libbpf_set_print(quiet_libbpf);
    skel_ = lotus_bpf__open();
    if (!skel_)
        throw CaptureError(fmt::format("cannot open the BPF programs: {}", strerror(errno)));
    skel_->rodata->layout = interp.layout;
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0 || counters.size() > LOTUS_MAX_PERF) {
        close();
        throw CaptureError("cannot count the CPUs, or too many counters");
    }
    skel_->rodata->nr_perf = static_cast<uint32_t>(counters.size());
    skel_->rodata->nr_cpus = static_cast<uint32_t>(ncpu);
    skel_->rodata->inline_calls = features.inline_calls ? 1 : 0;
    session_type_ = uprobe_session_attach_type();
    bool session = session_type_ >= 0;
    bpf_program__set_autoload(skel_->progs.py_call, session);
    bpf_program__set_autoload(skel_->progs.py_entry, !session);
    bpf_program__set_autoload(skel_->progs.py_return, !session);
    if (session)
        bpf_program__set_expected_attach_type(skel_->progs.py_call, static_cast<bpf_attach_type>(session_type_));
    bpf_program__set_autoload(skel_->progs.py_resume, features.inline_calls);
    bpf_program__set_autoload(skel_->progs.py_retval, features.inline_calls);
    bpf_program__set_autoload(skel_->progs.native_entry, features.native);
    bpf_program__set_autoload(skel_->progs.native_return, features.native);
    bpf_program__set_autoload(skel_->progs.on_sample, features.sampling);
    bpf_map__set_max_entries(skel_->maps.lotus_perf, static_cast<uint32_t>(LOTUS_MAX_PERF * ncpu));
    if (int err = lotus_bpf__load(skel_)) {
        close();
        throw CaptureError(fmt::format("cannot load the BPF programs: {} (set LOTUS_BPF_DEBUG=1 for the log)",
                                       strerror(-err)));
    }
    rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.events), on_record, this, nullptr);
    lib_rb_ = ring_buffer__new(bpf_map__fd(skel_->maps.lib_opens), on_library, this, nullptr);
    if (!rb_ || !lib_rb_) {
        close();
        throw CaptureError(fmt::format("cannot open the ring buffer: {}", strerror(errno)));
    }
    try {
        for (size_t k = 0; k < counters.size(); k++) {
            auto fds = open_per_cpu(counters[k]);
            for (size_t cpu = 0; cpu < fds.size(); cpu++) {
                if (fds[cpu] < 0)
                    continue;
                perf_fds_.push_back(fds[cpu]);
                uint32_t idx = static_cast<uint32_t>(k * ncpu + cpu);
                if (bpf_map_update_elem(bpf_map__fd(skel_->maps.lotus_perf), &idx, &fds[cpu], BPF_ANY))
                    throw CaptureError(fmt::format("cannot hand counter {} to BPF: {}", counters[k].name,
                                                   strerror(errno)));
            }
        }
    } catch (...) {
        close();
        throw;
    }
}

Probe::~Probe() { close(); }

void Probe::close()
{
    if (session_link_ >= 0) {
        ::close(session_link_);
        session_link_ = -1;
    }
    for (auto* l : links_)
        bpf_link__destroy(l);
    links_.clear();
    for (int fd : perf_fds_)
        ::close(fd);
    perf_fds_.clear();
    if (rb_) {
        ring_buffer__free(rb_);
        rb_ = nullptr;
    }
    if (lib_rb_) {
        ring_buffer__free(lib_rb_);
        lib_rb_ = nullptr;
    }
    if (skel_) {
        lotus_bpf__destroy(skel_); // destroys every link: uprobes and tracepoints are gone after this
        skel_ = nullptr;
    }
}

int Probe::on_record(void* ctx, void* data, size_t len)
{
    auto* self = static_cast<Probe*>(ctx);
    // A long backlog in the main ring must not delay a library's probes: look at the side ring often.
    if (++self->since_lib_check_ >= 64) {
        self->since_lib_check_ = 0;
        ring_buffer__consume(self->lib_rb_);
    }
    self->sink_(data, len);
    return 0;
}

int Probe::on_library(void* ctx, void* data, size_t len)
{
    auto* self = static_cast<Probe*>(ctx);
    if (self->lib_sink_)
        self->lib_sink_(data, len);
    return 0;
}

void Probe::attach_process_tracking()
{
    auto attach = [](bpf_program* prog, bpf_link*& link, const char* what) {
        link = bpf_program__attach(prog);
        if (!link)
            throw CaptureError(fmt::format("cannot attach the {} tracepoint: {}", what, strerror(errno)));
    };
    attach(skel_->progs.on_fork, skel_->links.on_fork, "sched_process_fork");
    attach(skel_->progs.on_exec, skel_->links.on_exec, "sched_process_exec");
    attach(skel_->progs.on_exit, skel_->links.on_exit, "sched_process_exit");
    attach(skel_->progs.on_sys_enter, skel_->links.on_sys_enter, "sys_enter");
    attach(skel_->progs.on_sys_exit, skel_->links.on_sys_exit, "sys_exit");
    attach(skel_->progs.on_switch, skel_->links.on_switch, "sched_switch");
}

void Probe::trace_process(uint32_t tgid, uint32_t root_tgid)
{
    lotus_traced_proc v{root_tgid, tgid};
    if (bpf_map_update_elem(bpf_map__fd(skel_->maps.lotus_traced), &tgid, &v, BPF_ANY))
        throw CaptureError(fmt::format("cannot add process {} to the traced set: {}", tgid, strerror(errno)));
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

void Probe::attach_python()
{
    if (session_type_ >= 0) {
        // One probe for entry and return: the kernel hooks the return only of calls whose entry asks for it.
        uint64_t offset = interp_.eval_offset;
        UprobeMultiLinkAttr attr{};
        attr.prog_fd = static_cast<uint32_t>(bpf_program__fd(skel_->progs.py_call));
        attr.attach_type = static_cast<uint32_t>(session_type_);
        attr.path = reinterpret_cast<uint64_t>(interp_.object_path.c_str());
        attr.offsets = reinterpret_cast<uint64_t>(&offset);
        attr.cnt = 1; // pid 0: every process mapping the file, filtered in BPF as below
        session_link_ = static_cast<int>(syscall(SYS_bpf, BPF_LINK_CREATE, &attr, sizeof(attr)));
        if (session_link_ < 0)
            throw CaptureError(fmt::format("cannot attach a uprobe session to {}: {}", interp_.object_path,
                                           strerror(errno)));
        return;
    }
    // pid -1: every process mapping the interpreter gets the breakpoint, so that forked workers are seen;
    // BPF drops the events of processes outside the traced set. The return probe goes first: the kernel hooks
    // a call's return when the call begins, so a call whose entry is seen must begin with the return probe in
    // place (returns without a seen entry are ignored in BPF). The other order loses the return of a call
    // that begins between the two attachments, which left every later span of that thread nested in it.
    LIBBPF_OPTS(bpf_uprobe_opts, ret_opts, .retprobe = true);
    skel_->links.py_return = bpf_program__attach_uprobe_opts(skel_->progs.py_return, -1, interp_.object_path.c_str(),
                                                             interp_.eval_offset, &ret_opts);
    if (!skel_->links.py_return)
        throw CaptureError(fmt::format("cannot attach a uretprobe to {}: {}", interp_.object_path, strerror(errno)));
    LIBBPF_OPTS(bpf_uprobe_opts, entry_opts, .retprobe = false);
    skel_->links.py_entry = bpf_program__attach_uprobe_opts(skel_->progs.py_entry, -1, interp_.object_path.c_str(),
                                                            interp_.eval_offset, &entry_opts);
    if (!skel_->links.py_entry)
        throw CaptureError(fmt::format("cannot attach a uprobe to {}: {}", interp_.object_path, strerror(errno)));
}

void Probe::attach_inline_calls(const std::vector<uint64_t>& resume_offsets, uint64_t return_offset)
{
    auto attach = [&](bpf_program* prog, uint64_t off) {
        LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = false);
        bpf_link* l = bpf_program__attach_uprobe_opts(prog, -1, interp_.object_path.c_str(), off, &opts);
        if (!l)
            throw CaptureError(fmt::format("cannot probe the interpreter's opcode handler at {:#x} of {}: {}", off,
                                           interp_.object_path, strerror(errno)));
        links_.push_back(l);
    };
    for (uint64_t off : resume_offsets)
        attach(skel_->progs.py_resume, off);
    attach(skel_->progs.py_retval, return_offset);
}

void Probe::attach_sampling(const CounterSpec& event, uint64_t freq)
{
    auto fds = open_per_cpu(event, freq);
    for (int fd : fds) {
        if (fd < 0)
            continue;
        perf_fds_.push_back(fd);
        bpf_link* l = bpf_program__attach_perf_event(skel_->progs.on_sample, fd);
        if (!l)
            throw CaptureError(fmt::format("cannot attach the sampling program: {}", strerror(errno)));
        links_.push_back(l);
    }
}

bool Probe::attach_native(const std::string& path, uint64_t offset, uint32_t cookie)
{
    // Return probe first, as for the interpreter (attach_python).
    LIBBPF_OPTS(bpf_uprobe_opts, ret_opts, .bpf_cookie = cookie, .retprobe = true);
    bpf_link* out = bpf_program__attach_uprobe_opts(skel_->progs.native_return, -1, path.c_str(), offset, &ret_opts);
    if (!out)
        return false;
    LIBBPF_OPTS(bpf_uprobe_opts, entry_opts, .bpf_cookie = cookie, .retprobe = false);
    bpf_link* in = bpf_program__attach_uprobe_opts(skel_->progs.native_entry, -1, path.c_str(), offset, &entry_opts);
    if (!in) {
        int err = errno;
        bpf_link__destroy(out);
        errno = err;
        return false;
    }
    links_.push_back(out);
    links_.push_back(in);
    return true;
}

int Probe::poll(int timeout_ms)
{
    // BPF wakes us only once a batch has accumulated; after the timeout, consume what is there anyway.
    ring_buffer__consume(lib_rb_);
    int n = ring_buffer__poll(rb_, timeout_ms);
    if (n < 0 && n != -EINTR)
        throw CaptureError(fmt::format("ring buffer poll failed: {}", strerror(-n)));
    int m = ring_buffer__consume(rb_);
    if (m < 0)
        throw CaptureError(fmt::format("ring buffer read failed: {}", strerror(-m)));
    return (n > 0 ? n : 0) + m;
}

void Probe::set_role(uint32_t space, uint64_t code, uint32_t flags, const std::vector<uint8_t>& capture_slots)
{
    lotus_role_key key{space, 0, code};
    lotus_role role{};
    int fd = bpf_map__fd(skel_->maps.lotus_roles);
    // Keep BPF's fingerprint. If the address was reused meanwhile, the new object's CODE record follows in
    // the stream and sets its role then. Best effort: a failed update only means more events than needed.
    if (bpf_map_lookup_elem(fd, &key, &role) != 0)
        return;
    role.flags = flags;
    for (size_t i = 0; i < LOTUS_SLOTS_PER_ROLE; i++)
        role.capture_slot[i] = i < capture_slots.size() ? capture_slots[i] : LOTUS_NO_SLOT;
    bpf_map_update_elem(fd, &key, &role, BPF_EXIST);
}

CaptureStats Probe::stats() const
{
    CaptureStats s;
    int fd = bpf_map__fd(skel_->maps.lotus_counters);
    int ncpu = libbpf_num_possible_cpus();
    std::vector<uint64_t> vals(static_cast<size_t>(ncpu > 0 ? ncpu : 1));
    for (uint32_t idx = 0; idx < 2; idx++) {
        if (bpf_map_lookup_elem(fd, &idx, vals.data()))
            continue;
        uint64_t sum = 0;
        for (auto v : vals)
            sum += v;
        (idx == 0 ? s.lost : s.submitted) = sum;
    }
    return s;
}

} // namespace lotus::capture
