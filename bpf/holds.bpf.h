/* SPDX-License-Identifier: GPL-2.0 */
/* Per-process Python probes: they are attached to each traced process (a uprobe_multi link with its pid), so
 * that no other process running the same interpreter ever traps. A traced process's new child gets its own
 * link from user space, after the fork: until then it is held, stopped by a SIGSTOP that is pending before it
 * first runs; user space continues it (SIGCONT) once its probes are in place, and on every exit path. */
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

/* Runs beside on_fork; keyed on the parent, so their order does not matter. */
static __always_inline void hold_child(struct task_struct *parent, struct task_struct *child)
{
    __u32 ptgid = BPF_CORE_READ(parent, tgid);
    __u32 ctgid = BPF_CORE_READ(child, tgid);
    if (ptgid == ctgid || !bpf_map_lookup_elem(&lotus_traced, &ptgid))
        return;
    /* The stop is pending before the child is in the map: a release user space makes (SIGCONT, which discards a
     * pending stop) always comes after it. */
    if (bpf_send_signal_task(child, LOTUS_SIGSTOP, PIDTYPE_TGID, 0))
        return; /* not held: its first calls may be missed, never stopped for good */
    struct lotus_hold hold = {.since_ns = bpf_ktime_get_ns(), .parent_tgid = ptgid};
    if (bpf_map_update_elem(&lotus_held, &ctgid, &hold, BPF_ANY)) {
        bpf_send_signal_task(child, LOTUS_SIGCONT, PIDTYPE_TGID, 0);
        return;
    }
    __sync_fetch_and_add(&held_total, 1);
    /* Wake user space now (the side ring is read before the main one); it reads lotus_held, not this record. */
    struct lotus_event_header e = {};
    fill_header(&e, LOTUS_EV_HOLD);
    e.tgid = ctgid;
    bpf_ringbuf_output(&lotus_lib_opens, &e, sizeof(e), BPF_RB_FORCE_WAKEUP);
}

#endif /* __LOTUS_HOLDS_BPF_H */
