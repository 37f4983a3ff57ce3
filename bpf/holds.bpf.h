/* SPDX-License-Identifier: GPL-2.0 */
/* Per-process Python probes: they are attached to each traced process (a uprobe_multi link with its pid), so
 * that no other process running the same interpreter ever traps. A traced process's new child gets its own
 * link from user space, after the fork: until then it is held, stopped by a SIGSTOP that is pending before it
 * first runs; user space continues it (SIGCONT) once its probes are in place, and on every exit path. No hold
 * depends on the tracer's progress: a guardian process continues every held child after a deadline, or at once
 * when the tracer is gone, and no child is held while the tracer or the guardian is stopped or exiting. */
#ifndef __LOTUS_HOLDS_BPF_H
#define __LOTUS_HOLDS_BPF_H

#define LOTUS_SIGSTOP 19 /* x86-64 and arm64 */

/* Linux 6.13+: a signal to another task (here the child, which has not run yet). Weak: on older kernels the
 * program using it is not loaded (user space checks the kernel's BTF) and the probes stay system-wide. */
extern int bpf_send_signal_task(struct task_struct *task, int sig, enum pid_type type, __u64 value) __ksym __weak;

/* Children stopped here and not yet continued by user space. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct lotus_hold);
} lotus_held SEC(".maps");

#define LOTUS_SIGCONT 18 /* x86-64 and arm64 */

/* Children held so far. User space reads it from the mapped .bss, no syscall: it walks lotus_held only when this
 * moved since its last walk began (each hold counts after its entry is in the map). */
__u64 held_total = 0;
/* Children of traced processes not held, by reason (LOTUS_UNHELD_*). */
__u64 unheld[LOTUS_UNHELD_REASONS] = {};
/* Who bounds a hold: the tracer attaches the child's probes and continues it; the guardian continues it after
 * its deadline, or once the tracer is gone. Set by user space before the hold program is attached. */
__u32 tracer_tgid = 0;
__u32 guardian_tgid = 0;
/* Inodes of the traced interpreter's files (its executable, a libpython): an exec of one is a Python process. */
#define LOTUS_EXEC_INODES 4
__u64 exec_inodes[LOTUS_EXEC_INODES] = {};
/* vfork-like children held at their exec of the traced interpreter. */
__u64 exec_held = 0;
/* Tests only (LOTUS_TEST_HOLD_WHILE_STOPPED): hold while the tracer is stopped, which makes a hold certain. */
const volatile bool hold_while_tracer_stopped = false;

extern struct task_struct *bpf_task_from_pid(s32 pid) __ksym __weak;
extern void bpf_task_release(struct task_struct *p) __ksym __weak;

#define LOTUS_PF_EXITING 0x4          /* task->flags */
#define LOTUS_SIGNAL_STOP_STOPPED 0x1 /* signal->flags: its group stop is complete */
#define LOTUS_SIGNAL_GROUP_EXIT 0x4   /* signal->flags: a fatal signal was delivered (set before it exits) */
#define LOTUS_TASK_STOPPED 0x4        /* task->__state: stopped by a signal... */
#define LOTUS_TASK_TRACED 0x8         /* ...or by a debugger */

/* Whether process `tgid` is alive and running: not exiting (SIGKILL, OOM kill, a crash), not stopped. Its
 * leader is looked at: the one that runs lotus-bpf's loop. */
static __always_inline bool running(__u32 tgid, bool stopped_ok)
{
    if (!tgid)
        return false;
    struct task_struct *t = bpf_task_from_pid((s32)tgid);
    if (!t)
        return false;
    __u32 signal_flags = BPF_CORE_READ(t, signal, flags);
    bool ok = !(t->flags & LOTUS_PF_EXITING) && !(signal_flags & LOTUS_SIGNAL_GROUP_EXIT) &&
              (stopped_ok || (!(t->__state & (LOTUS_TASK_STOPPED | LOTUS_TASK_TRACED)) &&
                              !(signal_flags & LOTUS_SIGNAL_STOP_STOPPED)));
    bpf_task_release(t);
    return ok;
}

/* Kernels without the hold kfuncs (before 6.13) hold a child from its own context (bpf_send_signal, 5.3), and
 * know the tracer and the guardian by their task structs: found once by find_keepers, forgotten at their exit
 * (on_exit), read without a reference. */
__u64 tracer_task = 0;
__u64 guardian_task = 0;

static __always_inline bool task_running(__u64 addr, bool stopped_ok)
{
    struct task_struct *t = (void *)addr;
    if (!t)
        return false;
    __u32 flags = BPF_CORE_READ(t, flags);
    __u32 signal_flags = BPF_CORE_READ(t, signal, flags);
    __u32 state = BPF_CORE_READ(t, __state);
    return !(flags & LOTUS_PF_EXITING) && !(signal_flags & LOTUS_SIGNAL_GROUP_EXIT) &&
           (stopped_ok || (!(state & (LOTUS_TASK_STOPPED | LOTUS_TASK_TRACED)) &&
                           !(signal_flags & LOTUS_SIGNAL_STOP_STOPPED)));
}

/* At a process's end (its last thread's exit: the leader's task struct, kept, is freed only after it). */
static __always_inline void forget_keeper(__u32 tgid)
{
    if (tgid && tgid == tracer_tgid)
        tracer_task = 0;
    if (tgid && tgid == guardian_tgid)
        guardian_task = 0;
}

static __always_inline void count_unheld(__u32 reason)
{
    if (reason < LOTUS_UNHELD_REASONS)
        __sync_fetch_and_add(&unheld[reason], 1);
}

/* Runs beside on_fork; keyed on the parent, so their order does not matter. A child is held only while both the
 * tracer (to attach its probes) and the guardian (to bound the hold) are running, and only if it does not share
 * its parent's memory: a vfork or posix_spawn child execs at once, and its parent waits for that exec. A child
 * not held still gets an entry, without LOTUS_HOLD_STOPPED: user space attaches its probes as soon as it can. */
static __always_inline void hold_child(struct task_struct *parent, struct task_struct *child)
{
    __u32 ptgid = BPF_CORE_READ(parent, tgid);
    __u32 ctgid = BPF_CORE_READ(child, tgid);
    if (ptgid == ctgid || !bpf_map_lookup_elem(&lotus_traced, &ptgid))
        return;
    struct lotus_hold hold = {.since_ns = bpf_ktime_get_ns(), .parent_tgid = ptgid};
    __s32 reason = -1;
    if (BPF_CORE_READ(child, mm) == BPF_CORE_READ(parent, mm)) {
        reason = LOTUS_UNHELD_SHARED_MM;
        hold.flags = LOTUS_HOLD_SHARED_MM;
    }
    else if (!running(tracer_tgid, hold_while_tracer_stopped))
        reason = LOTUS_UNHELD_TRACER;
    else if (!running(guardian_tgid, false))
        reason = LOTUS_UNHELD_GUARDIAN;
    /* The stop is pending before the child is in the map: a release user space makes (SIGCONT, which discards a
     * pending stop) always comes after it. */
    else if (bpf_send_signal_task(child, LOTUS_SIGSTOP, PIDTYPE_TGID, 0))
        reason = LOTUS_UNHELD_SIGNAL; /* its first calls may be missed, never stopped for good */
    else
        hold.flags = LOTUS_HOLD_STOPPED;
    if (bpf_map_update_elem(&lotus_held, &ctgid, &hold, BPF_ANY)) {
        if (hold.flags & LOTUS_HOLD_STOPPED)
            bpf_send_signal_task(child, LOTUS_SIGCONT, PIDTYPE_TGID, 0);
        reason = LOTUS_UNHELD_MAP;
    }
    if (reason >= 0)
        count_unheld((__u32)reason);
    __sync_fetch_and_add(&held_total, 1);
    /* Wake user space now (the side ring is read before the main one); it reads lotus_held, not this record. */
    struct lotus_event_header e = {};
    fill_header(&e, LOTUS_EV_HOLD);
    e.tgid = ctgid;
    bpf_ringbuf_output(&lotus_lib_opens, &e, sizeof(e), BPF_RB_FORCE_WAKEUP);
}

/* Without the kfuncs: the child is noted at its fork (PENDING) and holds itself at its first step in CPython
 * (hold_self). A vfork-like child gets its entry as with them. */
static __always_inline void note_child(struct task_struct *parent, struct task_struct *child)
{
    __u32 ptgid = BPF_CORE_READ(parent, tgid);
    __u32 ctgid = BPF_CORE_READ(child, tgid);
    if (ptgid == ctgid || !bpf_map_lookup_elem(&lotus_traced, &ptgid))
        return;
    struct lotus_hold hold = {.since_ns = bpf_ktime_get_ns(), .parent_tgid = ptgid, .flags = LOTUS_HOLD_PENDING};
    bool shared = BPF_CORE_READ(child, mm) == BPF_CORE_READ(parent, mm);
    if (shared)
        hold.flags = LOTUS_HOLD_SHARED_MM;
    if (bpf_map_update_elem(&lotus_held, &ctgid, &hold, BPF_ANY))
        count_unheld(LOTUS_UNHELD_MAP);
    else if (shared)
        count_unheld(LOTUS_UNHELD_SHARED_MM);
}

/* The current process stops itself (a SIGSTOP to its own group, before it returns to user space) where the
 * tracer and the guardian run; its entry says whether it did. */
static __always_inline void hold_self(struct lotus_hold *h, __u32 flags)
{
    if (!task_running(tracer_task, hold_while_tracer_stopped))
        count_unheld(LOTUS_UNHELD_TRACER);
    else if (!task_running(guardian_task, false))
        count_unheld(LOTUS_UNHELD_GUARDIAN);
    else if (bpf_send_signal(LOTUS_SIGSTOP))
        count_unheld(LOTUS_UNHELD_SIGNAL);
    else
        flags |= LOTUS_HOLD_STOPPED;
    h->since_ns = bpf_ktime_get_ns();
    h->flags = flags;
    __sync_fetch_and_add(&held_total, 1);
    struct lotus_event_header e = {};
    fill_header(&e, LOTUS_EV_HOLD);
    bpf_ringbuf_output(&lotus_lib_opens, &e, sizeof(e), BPF_RB_FORCE_WAKEUP);
}

static __always_inline bool runs_interpreter(struct linux_binprm *bprm)
{
    __u64 ino = BPF_CORE_READ(bprm, file, f_inode, i_ino);
    for (int i = 0; i < LOTUS_EXEC_INODES; i++)
        if (exec_inodes[i] && exec_inodes[i] == ino)
            return true;
    return false;
}

/* A child not held at its fork because it shared its parent's memory is held at its exec instead, if what it execs
 * is the traced interpreter (a spawned DataLoader worker, a torchrun rank): its parent was released by the exec
 * already, and the spawn of any other program is never held. The stop is pending before it runs its first
 * instruction of the new program. */
static __always_inline void hold_at_exec(struct task_struct *task, struct linux_binprm *bprm)
{
    __u32 tgid = BPF_CORE_READ(task, tgid);
    struct lotus_hold *h = bpf_map_lookup_elem(&lotus_held, &tgid);
    if (!h || !(h->flags & LOTUS_HOLD_SHARED_MM))
        return;
    if (!runs_interpreter(bprm)) {
        bpf_map_delete_elem(&lotus_held, &tgid);
        return;
    }
    __u32 flags = LOTUS_HOLD_AT_EXEC; /* not held: user space attaches its probes when it can */
    if (!running(tracer_tgid, hold_while_tracer_stopped))
        count_unheld(LOTUS_UNHELD_TRACER);
    else if (!running(guardian_tgid, false))
        count_unheld(LOTUS_UNHELD_GUARDIAN);
    else if (bpf_send_signal_task(task, LOTUS_SIGSTOP, PIDTYPE_TGID, 0))
        count_unheld(LOTUS_UNHELD_SIGNAL);
    else
        flags |= LOTUS_HOLD_STOPPED;
    h->since_ns = bpf_ktime_get_ns();
    h->flags = flags;
    __sync_fetch_and_add(&exec_held, 1);
    __sync_fetch_and_add(&held_total, 1);
    struct lotus_event_header e = {};
    fill_header(&e, LOTUS_EV_HOLD);
    e.tgid = tgid;
    bpf_ringbuf_output(&lotus_lib_opens, &e, sizeof(e), BPF_RB_FORCE_WAKEUP);
}

/* Without the kfuncs: a child noted at its fork (PENDING) or a vfork-like one that execs the traced interpreter
 * holds itself there; one that execs another program is forgotten. */
static __always_inline void hold_self_at_exec(struct task_struct *task, struct linux_binprm *bprm)
{
    __u32 tgid = BPF_CORE_READ(task, tgid);
    struct lotus_hold *h = bpf_map_lookup_elem(&lotus_held, &tgid);
    if (!h || !(h->flags & (LOTUS_HOLD_SHARED_MM | LOTUS_HOLD_PENDING)))
        return;
    if (!runs_interpreter(bprm)) {
        bpf_map_delete_elem(&lotus_held, &tgid);
        return;
    }
    if (h->flags & LOTUS_HOLD_SHARED_MM)
        __sync_fetch_and_add(&exec_held, 1);
    hold_self(h, LOTUS_HOLD_AT_EXEC);
}

#endif /* __LOTUS_HOLDS_BPF_H */
