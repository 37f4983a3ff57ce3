// Loads the BPF programs, attaches them, feeds the ring buffer to a callback and detaches everything when
// destroyed. Produces events only; what they mean is the model's business.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture_error.h"
#include "common/unique_fd.h"
#include "perf_events.h"
#include "process_links.h"
#include "probe_plan.h"
#include "libc_links.h"
#include "lotus_abi.h"
#include "native_links.h"
#include "python_links.h"
#include "uprobe_links.h"
#include "cpython/interpreter.h"
#include "guardian_cgroup.h"
#include "holds.h"

struct lotus_bpf;
struct bpf_program;
struct ring_buffer;
struct bpf_link;

namespace lotus::capture {

class ThreadSampling;

struct CaptureStats {
    uint64_t submitted = 0; // records written to the ring buffer
    uint64_t lost = 0;      // records dropped because it was full
    uint64_t sampled_elsewhere = 0; // sampling interrupts of threads outside the traced processes (per-CPU events)
    uint64_t failures[LOTUS_COUNT_SLOTS] = {}; // by LOTUS_FAIL_* slot (bpf_failures.h)
};

// Throws CaptureError unless this process may load BPF and open perf events (root, or CAP_BPF+CAP_PERFMON).
void check_privileges();
// Whether this process has CAP_SYS_ADMIN in its effective set (root's usually; capability_refusal asks).
bool has_sys_admin();
// Whether this libbpf (1.2+) goes on without the modules' BTF where it may not list them (EPERM).
bool libbpf_skips_unlisted_modules();

// Where a forked child of a traced process holds itself on kernels without the hold kfuncs: the file offset of
// PyOS_AfterFork_Child in the interpreter's file (CPython calls it in the child of os.fork), if it has one.
std::optional<uint64_t> after_fork_offset(const std::string& interp_path);

// Programs that only some runs attach are loaded (and verified: most of the attach time) only then.
struct ProbeFeatures {
    // Probe the evaluator's entry (every call from C into Python: --span, --all-calls) rather than the type-slot
    // functions (calls of objects, iter/next of DataLoaders: the default, where the interpreter's slots are found).
    bool evaluator = false;
    bool inline_calls = false; // --all-calls where calls are inlined (3.11): attach_inline_calls follows
    bool native = false;       // attach_native may follow
    bool sampling = false;     // attach_sampling may follow
    bool network = false;      // count network bytes per traced process (resources), where the kernel can
    uint32_t sample_frames = 1; // user-stack frames per sample (--sample-stack): the leaf, then callers
    uint64_t hold_deadline_ns = 0; // how long a new child may be held for its probes (--hold-deadline); 0: the default
    bool sample_copy_stack = false; // --sample-unwind cfi: samples carry a copy of the stack for user space to unwind
    pid_t job = 0; // the traced job's root process: the guardian joins its cgroups (guardian_cgroup.h); 0: stays
};

class Probe {
public:
    using Sink = std::function<void(const void* data, size_t len)>;

    // Opens and loads the programs for this interpreter's layout; counters (at most LOTUS_MAX_PERF, all
    // available: see choose_counters) are read at every probe. Throws CaptureError.
    Probe(const cpython::Interpreter& interp, Sink sink, const std::vector<CounterSpec>& counters = {},
          ProbeFeatures features = {});
    ~Probe();
    Probe(const Probe&) = delete;
    Probe& operator=(const Probe&) = delete;

    // Follow new processes (fork/exec/exit tracepoints). Call before trace_process so no fork is missed.
    void attach_process_tracking();
    // Add a process to the traced set, in role space `tgid` (lotus_abi.h); its future children join by
    // themselves, in its space.
    void trace_process(uint32_t tgid, uint32_t root_tgid);
    bool is_traced(uint32_t tgid) const;
    // Entry and return uprobes on the type-slot functions (or on the evaluator: python_probes()): one uprobe
    // session where the kernel has them (returns hooked only for calls that produced an entry), else a pair.
    // First, the traced processes' threads get their BPF state (adopt_threads).
    // Per traced process where the kernel can hold a new child until its probes are attached (per_process():
    // no other process mapping the interpreter traps), else for every process mapping it (filtered in BPF).
    void attach_python();
    // Opens of shared libraries by traced threads, delivered ahead of the main stream (they are in it too).
    void set_library_sink(Sink sink) { lib_sink_ = std::move(sink); }
    // Probes on the evaluator's RESUME handlers and its RETURN_VALUE handler (file offsets): inlined calls.
    void attach_inline_calls(const std::vector<uint64_t>& resume_offsets, uint64_t return_offset);
    // Samples every traced thread's user stack at freq Hz: an event on each traced thread, inherited by those it
    // starts (ThreadSampling), in per-process mode; else one per CPU, filtered in BPF.
    void attach_sampling(const CounterSpec& event, uint64_t freq);
    // "threads" or "cpus" (what attach_sampling opened its events on), "none" before it.
    const char* sampling_scope() const { return native_ ? native_->sampling_scope() : "none"; }
    // Threads left unsampled (ThreadSampling::unknown).
    size_t threads_unsampled() const;
    // Probes on native functions of one file: each function's entry and its own return instructions (file
    // offsets; never a return probe, which would replace the call's return address: C++ exceptions and
    // unwinders could not walk through it). Its events carry its id. Says per function whether the kernel took
    // its probes (errno set by the last refusal). In per-process mode, each traced process gets its own link on
    // the file (held children too), so other processes using the library never trap; a library the kernel
    // refuses that way for a process already traced is probed for every process, as without per-process probes
    // (one recorded before attach_python and refused then is an attach error, as for the Python probes).
    std::vector<bool> attach_native(const std::string& path, const std::vector<NativePoints>& fns);
    // Kernel links those probes took: 1 per library with uprobe_multi links (per traced process in per-process
    // mode), else 1 per point (a function's entry and each return instruction).
    size_t native_links() const { return native_ ? native_->links() : 0; }
    // Delivers pending records to the sink, waiting at most timeout_ms for some (or for a wake_on fd). Returns
    // the number delivered, or throws on error.
    int poll(int timeout_ms);
    // poll() also returns when fd becomes readable (a pidfd: the target exited); the caller keeps fd open.
    void wake_on(int fd);
    // Processes still to map their libc: each poll() looks at them again, so the loop should wake soon.
    bool retry_pending() const { return libc_links_ && libc_links_->pending(); }
    // A vfork-like child (not held at its fork) that execs this file is held at its exec: the traced process's
    // executable, where the interpreter is a libpython (the interpreter's own file is there already).
    void hold_exec_of(const std::string& path);
    // A code object's role in a role space, set once: BPF keeps per-CPU copies of classified roles. Only onto
    // the entry of the object described (its fingerprint), not another's that took the address since.
    void set_role(uint32_t space, uint64_t code, uint64_t fingerprint, uint32_t flags,
                  const std::vector<uint8_t>& capture_slots);
    // What a type is (LOTUS_TYPE_* flags) in a role space, likewise only onto the described type's entry.
    void set_type(uint32_t space, uint64_t type, uint64_t fingerprint, uint32_t flags);
    CaptureStats stats() const;
    const HoldStats& holds() const { return holds_->stats(); }
    // Where the guardian went, per cgroup hierarchy (empty: no guardian, or no job named to it).
    const std::vector<GuardianCgroup>& guardian_cgroups() const { return holds_->guardian_cgroups(); }
    // Network bytes sent and received by a traced process so far (ProbeFeatures::network, where the kernel has
    // the tracepoints: counts_network()); its exit record carries the last figures.
    bool counts_network() const { return net_; }
    lotus_net_bytes net_bytes(uint32_t tgid) const;
    // How Python calls are probed: "uprobe session" or "uprobe + uretprobe" (kernels before 6.13)...
    const char* evaluator_probe() const { return session_type_ >= 0 ? "uprobe session" : "uprobe + uretprobe"; }
    // ...and where: "type slots" or "evaluator".
    const char* python_probes() const { return slots_ ? "type slots" : "evaluator"; }
    // Whether the Python probes are attached to the traced processes only (else system-wide).
    bool per_process() const { return hold_; }
    // Continues the children held now (their probes attached), then polls until each child continued in the
    // last 2 s has called getppid or exited, for at most `wait_ms`. Before a stop signal goes to the job: a
    // DataLoader worker takes its parent's pid from its first getppid (torch's watchdog), and one that starts
    // after its parent died never sees it die. Returns how many were still starting.
    size_t let_children_start(int wait_ms);
    // Where the watched syscalls are seen: libc's wrappers in the traced processes (reads at os.read where it is
    // found), "watched syscalls" (each on its own syscalls: event) or "every syscall" (the raw sys_enter/sys_exit
    // pair, where tracefs cannot be read).
    const char* syscall_programs() const
    {
        return os_read_  ? "traced processes' libc calls and os.read"
               : libc_   ? "traced processes' libc calls"
               : syscall_events_ ? "watched syscalls"
                                 : "every syscall";
    }
    // Whether the object calls' probe (slot_tp_call) of each traced process is a link of its own, which can be
    // taken away and put back while the process runs (--trainer-calls): type slots, uprobe sessions (a return
    // knows the depth its entry had, so calls cut short by the detach unwind) and per-process probes.
    bool object_calls_apart() const { return calls_apart_; }
    // The process's object-calls link, for the caller to close (closing waits for grace periods: ~100 ms here,
    // not on the loop's thread); empty if it has none. Its calls already entered may lose their returns.
    common::UniqueFd detach_object_calls(uint32_t tgid);
    // A new object-calls link for a process that has its other links and none of these; false if refused (errno).
    bool attach_object_calls(uint32_t tgid);
    bool has_object_calls(uint32_t tgid) const { return python_ && python_->has_object_calls(tgid); }
    // How long a new child may be held: as asked, else 500 ms, or 2 s where each of its probes is a perf event
    // placed in turn (each waits for an RCU grace period: ~100 ms a child on these machines, more when busy).
    unsigned hold_deadline_ms() const { return holds_->deadline_ms(); }
    // What the kernel offers (detected once) and the plan chosen from it and the run's wishes.
    const KernelFeatures& kernel() const { return kernel_; }
    const ProbePlan& plan() const { return plan_; }
    // What the kernel cannot give this run (kernel_lacks), one sentence each.
    std::vector<std::string> kernel_lacks() const { return capture::kernel_lacks(kernel_, plan_, plan_inputs_); }
    // Detach and unload now (also done by the destructor).
    void close();

private:
    void set_constants(const cpython::Interpreter& interp, const std::vector<CounterSpec>& counters,
                       const ProbeFeatures& features, int ncpu);
    ProbePlan make_plan(const KernelFeatures& kernel, const cpython::Interpreter& interp,
                        const ProbeFeatures& features);
    void apply_plan(const ProbePlan& plan, const KernelFeatures& kernel, const cpython::Interpreter& interp,
                    const ProbeFeatures& features);
    void open_rings();
    void hand_counters(const std::vector<CounterSpec>& counters, int ncpu);
    static int on_record(void* ctx, void* data, size_t len);
    static int on_library(void* ctx, void* data, size_t len);
    // Per-thread state in BPF for every thread of the processes traced so far (later ones get theirs as they are
    // made): the syscall programs know a traced thread from its task alone.
    void adopt_threads();
    // Per-process mode: a traced process's own links, from each unit (Python, native, opcode handlers, libc),
    // kept together in process_links_ (Holds' Attach); forked_from: the traced process it was just forked from
    // (held since, so its memory is still that process's), else 0. A refusal is noted in attach_error_.
    void attach_to(uint32_t tgid, uint32_t forked_from = 0);
    // The uprobe at PyOS_AfterFork_Child where a new child holds itself (hold_self_; every process of the
    // interpreter); empty, errno set, if refused.
    common::UniqueFd child_start_link();

    // Owners of what libbpf hands out.
    struct SkeletonFree {
        void operator()(lotus_bpf* s) const;
    };
    struct RingFree {
        void operator()(ring_buffer* r) const;
    };

    cpython::Interpreter interp_;
    Sink sink_;
    Sink lib_sink_;
    uint32_t since_lib_check_ = 0;
    KernelFeatures kernel_; // detected once, at construction
    ProbePlan plan_;
    PlanInputs plan_inputs_; // what plan_ was made from
    int session_type_ = -1; // the kernel's BPF_TRACE_UPROBE_SESSION, -1 without sessions
    bool slots_ = false;    // the type-slot functions are probed, not the evaluator
    bool hold_ = false;     // per-process Python probes, new children held until theirs are attached
    bool hold_self_ = false;  // ...a new child holding itself (ProbePlan::hold_self)
    std::optional<uint64_t> after_fork_offset_; // PyOS_AfterFork_Child in the interpreter's file, where found
    bool calls_apart_ = false; // object_calls_apart()
    bool syscall_events_ = false; // the syscall programs on the syscalls: events (else raw sys_enter/sys_exit)
    std::vector<uint32_t> syscall_ids_; // those events' ids (kSyscallEvents' order)
    // The syscalls through libc's wrappers in the traced processes (per-process links; no syscall event).
    bool libc_ = false;
    bool os_read_ = false; // reads at the interpreter's os.read (LOTUS_PY_OS_READ), not at libc's read()
    std::string attach_error_;
    bool net_ = false; // the network tracepoints are loaded
    bool thread_sampling_ = false; // sampling events on the traced threads (ProbePlan::thread_sampling)
    // What is attached, by owner. close() detaches in this order: the hold tracepoints (no new holds), holds_
    // stopped (nothing left stopped), every uprobe link in one batch (process_links_, python_'s and native_'s
    // uprobe_multi and session links), the sampling events, the perf-event links (native_'s, then python_'s),
    // the counters, the rings, the skeleton (its tracepoint links and the programs), the guardian last.
    std::unique_ptr<lotus_bpf, SkeletonFree> skel_;
    std::unique_ptr<Holds> holds_; // new children held (per-process mode: its guardian ended last by close())
    std::unique_ptr<ring_buffer, RingFree> rb_, lib_rb_;
    common::UniqueFd epoll_; // poll() sleeps on it: the rings' own epoll, and wake_on's fds
    std::vector<common::UniqueFd> perf_fds_; // counters
    std::unique_ptr<UprobeLinks> uprobes_;   // how the units' uprobe links are made; the files they pin
    ProcessLinks process_links_;             // per-process mode: each traced process's own links, of every unit
    std::unique_ptr<PythonLinks> python_;    // the Python probes and the opcode handlers'
    std::unique_ptr<NativeLinks> native_;    // the native functions' probes and the sampling events
    std::optional<LibcLinks> libc_links_;    // libc mode: each traced process's links on its libc's wrappers
};

} // namespace lotus::capture
