// SPDX-License-Identifier: GPL-2.0
/* lotus-bpf capture programs. They only produce events (see lotus_abi.h); every rule about what a span is
 * lives in user space. The Python probes are attached per traced process where the kernel can hold a new child
 * (holds.bpf.h), else system-wide; either way the lotus_traced map, extended here on fork, decides which
 * processes produce events. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "lotus_abi.h"
#include "arch/x86_64.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile struct lotus_py_layout layout = {};
const volatile __u32 inline_calls = 0; /* --all-calls on 3.11: see struct thread_frames */
/* The type-slot probes: each slot function's address in the interpreter's file (by LOTUS_SLOT_*), and that of
 * the word in _PyRuntime that holds the running thread's state (the layout's runtime_tstate). */
const volatile __u64 slot_vaddr[LOTUS_SLOTS_PROBED] = {};
const volatile __u64 tstate_vaddr = 0;

/* In a uprobe session: whether this run is the return's. */
extern bool bpf_session_is_return(void) __ksym __weak;
/* ...and its cookie, shared by the entry's run and the return's (Linux 6.13+, with sessions). */
extern __u64 *bpf_session_cookie(void) __ksym __weak;

#include "ring.bpf.h"
#include "pyobj.bpf.h"
#include "threads.bpf.h"
#include "roles.bpf.h"
#include "frames.bpf.h"
#include "inline_calls.bpf.h"
#include "calls.bpf.h"
#include "native.bpf.h"
#include "syscalls.bpf.h"
#include "holds.bpf.h"
#include "net.bpf.h"
#include "sampling.bpf.h"

/* The programs: one per attach point. */

/* A traced thread's state (created on its first probe hit, see traced_thread) accounts from then on. Every
 * context switch on the machine comes here: a task with no BPF task storage at all (any process never traced)
 * is told apart by a load of its pointer, before any helper call (two storage lookups and the clock at every
 * switch slowed a switch-heavy process never traced: docs/performance.md, "The sched_switch tracepoint's
 * dispatch"). */
SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
    if (!prev->bpf_storage && !next->bpf_storage)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, prev, 0, 0);
    if (ts && ts->cpu.in_ns) {
        struct oncpu *c = &ts->cpu;
        c->acc_ns += now - c->in_ns;
        c->in_ns = 0;
        for (__u32 k = 0; k < LOTUS_MAX_PERF && k < nr_perf; k++)
            if (perf_src[k] == LOTUS_SRC_PERF_EVENT)
                c->perf_acc[k] += perf_since(k, &c->perf_in[k]);
    }
    ts = bpf_task_storage_get(&lotus_threads, next, 0, 0);
    if (ts) {
        ts->cpu.in_ns = now;
        perf_mark(&ts->cpu);
    }
    return 0;
}

SEC("uprobe")
int BPF_KPROBE(py_entry, void *tstate, void *frame_arg)
{
    enter(tstate, frame_arg, false);
    return 0;
}

/* A per-process return probe's cookie carries its process (user space's perf-event links, before 6.6): kernels
 * before 6.12 or so run every return probe of a function for any process returning from it, without the entry's
 * process filter, so each traced process's return program saw every other's returns too. */
SEC("uretprobe")
int BPF_KRETPROBE(py_return)
{
    __u32 owner = bpf_get_attach_cookie(ctx) >> 32;
    if (owner && owner != bpf_get_current_pid_tgid() >> 32)
        return 0;
    return leave(ctx);
}

/* The evaluator's entry and return as one uprobe session (user space sets its attach type and attaches it
 * when the kernel has sessions; it is not loaded otherwise). */
SEC("uprobe")
int BPF_KPROBE(py_call, void *tstate, void *frame_arg)
{
    if (bpf_session_is_return())
        return leave(ctx);
    return enter(tstate, frame_arg, true);
}

/* The type-slot functions' entries and returns (the default probes; see slot_enter): one uprobe session, or
 * a pair where the kernel has no sessions. */
SEC("uprobe")
int BPF_KPROBE(py_slot, void *self)
{
    __u64 cookie = bpf_get_attach_cookie(ctx);
    if (cookie == LOTUS_PY_OS_READ)
        return os_read_call(ctx);
    __u64 *entered = bpf_session_cookie();
    if (bpf_session_is_return())
        return entered && *entered ? leave_from(ctx, (__u32)(*entered - 1)) : leave(ctx);
    __u32 depth = 0;
    int verdict = slot_enter(ctx, (__u64)self, cookie, true, &depth);
    if (!verdict && entered)
        *entered = (__u64)depth + 1;
    return verdict;
}

SEC("uprobe")
int BPF_KPROBE(py_slot_entry, void *self)
{
    __u32 depth;
    slot_enter(ctx, (__u64)self, bpf_get_attach_cookie(ctx), false, &depth);
    return 0;
}

/* --all-calls (3.11): the RESUME / RESUME_QUICK handlers, run first by every frame; inlined calls only (frames
 * entered from C have is_entry set and are the uprobe above's). cframe->current_frame is the new frame here. */
SEC("uprobe")
int BPF_KPROBE(py_resume)
{
    struct inlined in = {};
    struct frame_head h, ch;
    __u64 frame = inlined_frame(&in, &h); /* its head: the current frame is the new one here */
    struct thread_frames *tf = in.tf;
    struct thread_state *ts = in.ts;
    if (!frame || !tf || !ts)
        return 0;
    __u64 caller = h.previous;
    read_head(caller, &ch);
    __u32 depth = caller ? depth_above(tf, ts->depth, caller) : 0;
    if (!depth)
        depth = ts->depth; /* a caller entered before tracing began: this frame is the innermost */
    if (depth >= 64)
        return 0;
    ts->depth = depth + 1;
    ts->emitted &= ~(~0ull << depth);
    ts->lost &= ~(~0ull << depth);
    set_frame(tf, depth, frame);
    tf->c_mask &= ~(~0ull << depth);
    emit_entry(in.space, in.tgid, ts, depth, frame, &h, caller, &ch);
    return 0;
}

SEC("uprobe")
int BPF_KPROBE(py_retval)
{
    struct inlined in = {};
    struct frame_head h;
    __u64 frame = inlined_frame(&in, &h);
    struct thread_frames *tf = in.tf;
    struct thread_state *ts = in.ts;
    if (!frame || !tf || !ts)
        return 0; /* not inlined: a frame entered from C returns through the uretprobe */
    __u32 d = depth_above(tf, ts->depth, frame);
    if (!d)
        return 0;
    ts->depth = d - 1;
    tf->c_mask &= ~(~0ull << (d - 1));
    return emit_return(ts, d - 1, 1); /* an inlined frame's return value is not at hand: 1, "not NULL" */
}

/* A probed native function's entry or one of its return instructions (the cookie's LOTUS_NATIVE_RETURN_POINT). */
SEC("uprobe")
int BPF_KPROBE(native_call)
{
    if (!native_traced())
        return 0;
    __u64 cookie = bpf_get_attach_cookie(ctx);
    return native_event(ctx, cookie & LOTUS_NATIVE_RETURN_POINT ? LOTUS_EV_NATIVE_RETURN : LOTUS_EV_NATIVE_ENTRY,
                        (__u32)cookie);
}

/* Sampling map: a sampling event (cycles, or cpu-clock without a PMU) on each traced thread (sampling.bpf.h),
 * or, on kernels without the per-process probes, one per CPU, which interrupts whatever runs; for a traced thread,
 * record its user stack. User space attributes it to the op open on that thread then. */
const volatile __u32 thread_sampling = 0; /* the events are the traced threads' own (else one per CPU) */

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32;
    if (!tgid || !bpf_map_lookup_elem(&lotus_traced, &tgid)) {
        /* A thread's own event still fires while its process finishes exiting (its memory and files are freed
         * after sched_process_exit has taken it out of lotus_traced): that is the traced thread, not another. */
        bool own_exit = thread_sampling && (bpf_get_current_task_btf()->flags & LOTUS_PF_EXITING);
        if (!own_exit)
            count(LOTUS_COUNT_SAMPLED_ELSEWHERE);
        return 0;
    }
    /* Kernel text lives in the upper half of the address space (a full 8-byte context read: the verifier
     * refuses narrower ones of regs). */
    __u64 ip = ctx->regs.ip;
    bool in_kernel = ip >= 0xffff800000000000ull;
    if (sample_copy_stack && sample_frames > 1) {
        __u64 sp = 0, bp = 0;
        __u64 leaf = user_regs(ctx, in_kernel, &sp, &bp);
        /* Inside a probed native call, that call names a sample its leaf does not: no callers are wanted. */
        struct thread_state *ts = bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0);
        if (ts && ts->native_open && sp > ts->native_sp)
            ts->native_open = 0; /* above the outermost call's frame: it returned unseen */
        if (!(ts && ts->native_open) && sample_with_stack(ctx, in_kernel, leaf, sp, bp))
            return 0;
    }
    struct lotus_sample *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_SAMPLE);
    e->in_kernel = in_kernel;
    __u64 sp = 0, bp = 0;
    __u64 leaf = user_regs(ctx, in_kernel, &sp, &bp);
    e->sp = sp; /* (user space's test of which probed native calls are still open) */
    if (sample_frames <= 1 || sample_copy_stack) {
        /* The leaf alone: what bpf_get_stack returns for one frame, without its callchain machinery. */
        e->ip[0] = leaf;
        e->nr_ips = leaf ? 1 : 0;
        for (__u32 i = 1; i < LOTUS_STACK_DEPTH; i++)
            e->ip[i] = 0;
        bpf_ringbuf_submit(e, submit_flags());
        return 0;
    }
    /* Each caller is a read of user memory by the frame-pointer walk (what 8 frames cost: docs/performance.md,
     * "What costs what"), so callers are opt-in (perf record's default is the leaf too). */
    __u32 bytes = sample_frames * sizeof(e->ip[0]);
    if (bytes < sizeof(e->ip[0]) || bytes > sizeof(e->ip))
        bytes = sizeof(e->ip[0]);
    long n = bpf_get_stack(ctx, e->ip, bytes, BPF_F_USER_STACK);
    e->nr_ips = n > 0 ? (__u64)n / 8 : 0;
    for (__u32 i = 1; i < LOTUS_STACK_DEPTH; i++) /* no stale ring-buffer bytes past the walk */
        if (i >= e->nr_ips)
            e->ip[i] = 0;
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

/* One program per syscall watched, each on its own `syscalls:` event, so that no other syscall on the machine
 * runs any of lotus-bpf (a program on raw sys_enter and sys_exit ran for every syscall of every process,
 * processes never traced included: docs/performance.md, "The syscall-tracing path"). Their ids come
 * from tracefs; where it cannot be read (CAP_BPF and CAP_PERFMON without root), the raw pair below instead. */
SEC("tracepoint/syscalls/sys_enter_write")
int on_write(struct trace_event_raw_sys_enter *ctx)
{
    sys_write(ctx->args[0], ctx->args[1], ctx->args[2]);
    return 0;
}

SEC("tracepoint/syscalls/sys_enter_getppid")
int on_getppid(struct trace_event_raw_sys_enter *ctx)
{
    sys_getppid();
    return 0;
}

SEC("tracepoint/syscalls/sys_enter_openat")
int on_openat(struct trace_event_raw_sys_enter *ctx)
{
    sys_openat((const char *)ctx->args[1]);
    return 0;
}

SEC("tracepoint/syscalls/sys_exit_openat")
int on_openat_done(struct trace_event_raw_sys_exit *ctx)
{
    sys_openat_done(ctx->ret);
    return 0;
}

SEC("tracepoint/syscalls/sys_exit_read")
int on_read_done(struct trace_event_raw_sys_exit *ctx)
{
    long ret = ctx->ret;
    if (ret < MSG_MIN)
        return 0;
    /* The read's arguments are in the registers saved at its entry. */
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
    sys_read_done(BPF_CORE_READ(regs, LOTUS_SYSCALL_ARG1_REG), BPF_CORE_READ(regs, LOTUS_SYSCALL_ARG2_REG), ret);
    return 0;
}

/* The raw pair: every syscall of every process, the number first. */
SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long nr)
{
    if (nr == LOTUS_NR_WRITE)
        sys_write(regs->LOTUS_SYSCALL_ARG1_REG, regs->LOTUS_SYSCALL_ARG2_REG, regs->LOTUS_SYSCALL_ARG3_REG);
    else if (nr == LOTUS_NR_GETPPID)
        sys_getppid();
    else if (nr == LOTUS_NR_OPENAT)
        sys_openat((const char *)regs->LOTUS_SYSCALL_ARG2_REG);
    return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
    if (regs->LOTUS_SYSCALL_NR_REG == LOTUS_NR_READ)
        sys_read_done(regs->LOTUS_SYSCALL_ARG1_REG, regs->LOTUS_SYSCALL_ARG2_REG, ret);
    else if (regs->LOTUS_SYSCALL_NR_REG == LOTUS_NR_OPENAT)
        sys_openat_done(ret);
    return 0;
}

/* Or libc's wrappers of those syscalls, probed in the traced processes alone (one per-process link, like the
 * Python probes): no syscall event is then in use, so no task's syscalls take the kernel's tracing path. What
 * goes around the wrappers (the dynamic loader's own opens and reads) is not needed there. */

/* Every wrapper in one uprobe session (the cookie says which): only a read long enough to hold a pickle asks
 * for its return. One link per process rather than one per kind: placing and removing a per-process probe
 * walks every mapping of the file on the machine, and every process maps libc. */
SEC("uprobe")
int BPF_KPROBE(libc_call, long a0, long a1, long a2)
{
    if (bpf_session_is_return()) { /* a dlopen's, an open's or a read's (only those ask for theirs) */
        __u64 cookie = bpf_get_attach_cookie(ctx);
        if (cookie == LOTUS_LIBC_OPEN || cookie == LOTUS_LIBC_OPENAT) {
            sys_openat_done(PT_REGS_RC(ctx));
            return 0;
        }
        if (cookie == LOTUS_LIBC_DLOPEN) {
            struct lotus_event_header e = {};
            fill_header(&e, LOTUS_EV_LOADED);
            bpf_ringbuf_output(&lotus_lib_opens, &e, sizeof(e), BPF_RB_FORCE_WAKEUP);
            return 0;
        }
        /* a read's: its fd and buffer were kept at its entry (registers are gone) */
        struct thread_state *ts = bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0);
        if (!ts || !ts->read_buf)
            return 0;
        __u64 buf = ts->read_buf;
        ts->read_buf = 0;
        sys_read_done(ts->read_fd, buf, PT_REGS_RC(ctx));
        return 0;
    }
    switch (bpf_get_attach_cookie(ctx)) {
    case LOTUS_LIBC_READ: {
        /* Only a pipe's bytes can be a message (emit_msg): a file's read (an image's, most reads of a sample)
         * asks for no return, whose trap costs more than the look at its fd here. */
        struct thread_state *ts = a2 >= MSG_MIN && a1 && is_pipe_mode(file_mode(task_file(a0)))
                                      ? bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0)
                                      : 0;
        if (!ts)
            return 1;
        ts->read_buf = a1;
        ts->read_fd = a0;
        return 0;
    }
    case LOTUS_LIBC_DLOPEN:
        return 0; /* its return */
    case LOTUS_LIBC_WRITE:
        sys_write(a0, a1, a2);
        break;
    case LOTUS_LIBC_GETPPID:
        sys_getppid();
        break;
    case LOTUS_LIBC_OPEN: /* its return: the file's size */
        return sys_openat((const char *)a0) ? 0 : 1;
    case LOTUS_LIBC_OPENAT:
        return sys_openat((const char *)a1) ? 0 : 1;
    }
    return 1; /* no return probe */
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
    __u32 ptgid = BPF_CORE_READ(parent, tgid);
    __u32 ctgid = BPF_CORE_READ(child, tgid);
    struct lotus_traced_proc *p = bpf_map_lookup_elem(&lotus_traced, &ptgid);
    if (!p)
        return 0;
    if (ptgid == ctgid) { /* a new thread, covered by its process */
        adopt_thread(child, p->space);
        return 0;
    }
    struct lotus_traced_proc c = *p; /* same memory image: the parent's role space */
    bpf_map_update_elem(&lotus_traced, &ctgid, &c, BPF_ANY);
    adopt_thread(child, c.space);
    struct lotus_proc_event *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_FORK);
    e->h.tgid = ctgid;
    e->h.tid = BPF_CORE_READ(child, pid);
    e->parent_tgid = ptgid;
    e->space = c.space;
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

/* The threads of the traced processes alive when tracing began: user space runs it once, at attach. */
SEC("iter/task")
int adopt_threads(struct bpf_iter__task *ctx)
{
    struct task_struct *t = ctx->task;
    if (!t)
        return 0;
    __u32 tgid = t->tgid;
    struct lotus_traced_proc *p = bpf_map_lookup_elem(&lotus_traced, &tgid);
    if (p)
        adopt_thread(t, p->space);
    return 0;
}

/* Per-process probes: hold the new child until user space has attached its probes (holds.bpf.h). */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork_hold, struct task_struct *parent, struct task_struct *child)
{
    hold_child(parent, child);
    return 0;
}

/* Per-process probes: a vfork-like child held at its exec of the traced interpreter (holds.bpf.h). */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec_hold, struct task_struct *task, pid_t old_pid, struct linux_binprm *bprm)
{
    hold_at_exec(task, bprm);
    return 0;
}

/* The same without the hold kfuncs (kernels before 6.13): the child is noted at its fork... */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork_note, struct task_struct *parent, struct task_struct *child)
{
    note_child(parent, child);
    return 0;
}

/* ...and holds itself at its first step in CPython after the fork (a uprobe on PyOS_AfterFork_Child, for every
 * process of the interpreter: one trap per fork)... */
SEC("uprobe")
int BPF_KPROBE(on_child_start)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct lotus_hold *h = bpf_map_lookup_elem(&lotus_held, &tgid);
    if (h && (h->flags & LOTUS_HOLD_PENDING))
        hold_self(h, 0);
    return 0;
}

/* ...or at its exec of the traced interpreter. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec_stop, struct task_struct *task, pid_t old_pid, struct linux_binprm *bprm)
{
    hold_self_at_exec(task, bprm);
    return 0;
}

/* The tracer's and the guardian's task structs, once, as a task iterator is read (holds.bpf.h). */
SEC("iter/task")
int find_keepers(struct bpf_iter__task *ctx)
{
    struct task_struct *t = ctx->task;
    if (!t)
        return 0;
    if (t->pid == tracer_tgid)
        tracer_task = (__u64)t;
    if (t->pid == guardian_tgid)
        guardian_task = (__u64)t;
    return 0;
}

/* Network bytes of traced processes (net.bpf.h); a peek leaves the bytes for the read that takes them. */
SEC("tp_btf/sock_send_length")
int BPF_PROG(on_sock_send, struct sock *sk, int ret, int flags)
{
    count_net_bytes(sk, ret, true);
    return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(on_sock_recv, struct sock *sk, int ret, int flags)
{
    if (!(flags & LOTUS_MSG_PEEK))
        count_net_bytes(sk, ret, false);
    return 0;
}

/* A traced thread renamed after its name was emitted: its new name (the tracepoint fires before the copy). */
SEC("tp_btf/task_rename")
int BPF_PROG(on_rename, struct task_struct *task, const char *comm)
{
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, task, 0, 0);
    if (!ts || !ts->named)
        return 0;
    emit_thread_name(BPF_CORE_READ(task, tgid), BPF_CORE_READ(task, pid), comm);
    return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *task, pid_t old_pid, struct linux_binprm *bprm)
{
    __u32 tgid = BPF_CORE_READ(task, tgid);
    struct lotus_traced_proc *p = bpf_map_lookup_elem(&lotus_traced, &tgid);
    if (!p)
        return 0;
    /* A new image: none of the old space's objects are there. (A lost EXEC record would leave user space
     * unaware of the new space: it then sets no roles there, and code keeps being emitted as unclassified.) */
    p->space = LOTUS_SPACE_EXEC_BASE + __sync_fetch_and_add(&space_seq, 1);
    p->tstate_addr = 0;
    bpf_task_storage_delete(&lotus_threads, task); /* it starts afresh in the new space */
    adopt_thread(task, p->space);
    struct lotus_proc_event *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_EXEC);
    e->parent_tgid = 0;
    e->space = p->space;
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

/* A traced process's last thread exits: its use over its life and its exit, once. */
static __always_inline int process_exited(struct task_struct *task)
{
    __u32 tgid = BPF_CORE_READ(task, tgid);
    forget_keeper(tgid);
    if (!bpf_map_lookup_elem(&lotus_traced, &tgid))
        return 0;
    bpf_map_delete_elem(&lotus_traced, &tgid);
    /* Its use over its life: the signal struct holds the threads already released, this task (the last thread
     * to exit) its own part, and the group leader, when it is not this task, its own too: a zombie leader is
     * released (its figures added to the signal struct) only when its parent reaps the process. */
    struct lotus_usage *u = reserve(sizeof(*u));
    if (u) {
        fill_header(&u->h, LOTUS_EV_USAGE);
        u->h.tgid = tgid;
        struct signal_struct *sig = BPF_CORE_READ(task, signal);
        struct task_struct *leader = BPF_CORE_READ(task, group_leader);
        u->runtime_ns = BPF_CORE_READ(sig, sum_sched_runtime) + BPF_CORE_READ(task, se.sum_exec_runtime);
        u->utime_ns = BPF_CORE_READ(sig, utime) + BPF_CORE_READ(task, utime);
        u->stime_ns = BPF_CORE_READ(sig, stime) + BPF_CORE_READ(task, stime);
        u->nvcsw = BPF_CORE_READ(sig, nvcsw) + BPF_CORE_READ(task, nvcsw);
        u->nivcsw = BPF_CORE_READ(sig, nivcsw) + BPF_CORE_READ(task, nivcsw);
        u->read_bytes = BPF_CORE_READ(sig, ioac.read_bytes) + BPF_CORE_READ(task, ioac.read_bytes);
        u->write_bytes = BPF_CORE_READ(sig, ioac.write_bytes) + BPF_CORE_READ(task, ioac.write_bytes);
        if (leader && leader != task) {
            u->runtime_ns += BPF_CORE_READ(leader, se.sum_exec_runtime);
            u->utime_ns += BPF_CORE_READ(leader, utime);
            u->stime_ns += BPF_CORE_READ(leader, stime);
            u->nvcsw += BPF_CORE_READ(leader, nvcsw);
            u->nivcsw += BPF_CORE_READ(leader, nivcsw);
            u->read_bytes += BPF_CORE_READ(leader, ioac.read_bytes);
            u->write_bytes += BPF_CORE_READ(leader, ioac.write_bytes);
        }
        net_totals(u, tgid);
        bpf_ringbuf_submit(u, submit_flags());
    }
    struct lotus_proc_event *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_EXIT);
    e->h.tgid = tgid;
    e->exit_code = BPF_CORE_READ(task, exit_code);
    e->space = 0;
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

/* Two variants, one loaded (user space reads the tracepoint's arguments in the kernel's BTF): Linux 6.16 gave
 * sched_process_exit a group_dead argument; before it, the thread that took the group's live count to zero has
 * done so before the tracepoint (do_exit), so a zero count says the same, except when two of its threads exit at
 * once (both may see zero; the first to come reports, with the other's time not yet in the signal struct). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *task, bool group_dead)
{
    return group_dead ? process_exited(task) : 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit_counted, struct task_struct *task)
{
    return BPF_CORE_READ(task, signal, live.counter) == 0 ? process_exited(task) : 0;
}
