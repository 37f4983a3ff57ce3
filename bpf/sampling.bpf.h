/* SPDX-License-Identifier: GPL-2.0 */
/* --native-map's sampling events, where they are opened per traced thread: which traced threads have none yet. */
#ifndef __LOTUS_SAMPLING_BPF_H
#define __LOTUS_SAMPLING_BPF_H

/* on_sample's program id, set by user space once loaded: an event runs it whether user space opened it on that
 * thread or the thread inherited it (a perf event opened with inherit is copied into each thread and process
 * the thread starts, with its program). */
__u32 sampler_prog_id = 0;

#define LOTUS_PF_USER_WORKER 0x00004000 /* io_uring and vhost workers: they never run user code (PF_EXITING: holds.bpf.h) */
#define LOTUS_EVENTS_WALKED 256

/* Before Linux 6.2 a task had one perf context per kind (hardware, software), an array; since, one pointer. Two
 * flavours, told apart by the array's existence (a CO-RE field relocation against a field of another type fails:
 * the pointer's is read only where the array is not). */
struct task_struct___perf_ctx_array {
    struct perf_event_context *perf_event_ctxp[2];
} __attribute__((preserve_access_index));
struct task_struct___perf_ctx_one {
    struct perf_event_context *perf_event_ctxp;
} __attribute__((preserve_access_index));

/* Whether one of the events of one perf context runs on_sample: LOTUS_SAMPLER_*. The context is read without its
 * lock (it is freed after an RCU grace period, and an iterator runs under RCU): a list changing meanwhile, which
 * only an event opened or closed on this very task does, may read as not walked to its end. */
static __always_inline __u32 context_sampler_state(struct perf_event_context *pctx)
{
    if (!pctx)
        return LOTUS_SAMPLER_NONE;
    struct list_head *head = &pctx->event_list;
    struct list_head *pos = BPF_CORE_READ(pctx, event_list.next);
    for (__u32 i = 0; i < LOTUS_EVENTS_WALKED; i++) {
        if (!pos || pos == head)
            return LOTUS_SAMPLER_NONE;
        /* container_of with the offset relocated (CO-RE): struct perf_event differs between kernels */
        struct perf_event *ev = (void *)pos - bpf_core_field_offset(struct perf_event, event_entry);
        if (BPF_CORE_READ(ev, prog, aux, id) == sampler_prog_id)
            return LOTUS_SAMPLER_HAS;
        pos = BPF_CORE_READ(pos, next);
    }
    return LOTUS_SAMPLER_UNKNOWN;
}

/* The task's: its one context, or (before 6.2) the hardware one's answer unless it is NONE, then the software
 * one's (the sampler is a software event where the machine has no PMU). */
static __always_inline __u32 sampler_state(struct task_struct *t)
{
    struct task_struct___perf_ctx_array *old = (void *)t;
    if (!bpf_core_field_exists(old->perf_event_ctxp))
        return context_sampler_state(BPF_CORE_READ((struct task_struct___perf_ctx_one *)t, perf_event_ctxp));
    __u32 hw = context_sampler_state(BPF_CORE_READ(old, perf_event_ctxp[0]));
    return hw != LOTUS_SAMPLER_NONE ? hw : context_sampler_state(BPF_CORE_READ(old, perf_event_ctxp[1]));
}

/* Each thread of a traced process that has no sampling event of ours (or whose events could not all be looked
 * at), as a struct lotus_unsampled: user space opens one on each, and asks again until none is left, as threads
 * started by a thread that had none yet have none either. */
SEC("iter/task")
int unsampled_threads(struct bpf_iter__task *ctx)
{
    struct task_struct *t = ctx->task;
    if (!t)
        return 0;
    __u32 tgid = t->tgid;
    if (!bpf_map_lookup_elem(&lotus_traced, &tgid) || (t->flags & (LOTUS_PF_EXITING | LOTUS_PF_USER_WORKER)))
        return 0;
    struct lotus_unsampled u = {t->pid, sampler_state(t)};
    if (u.state != LOTUS_SAMPLER_HAS)
        bpf_seq_write(ctx->meta->seq, &u, sizeof(u));
    return 0;
}

#endif /* __LOTUS_SAMPLING_BPF_H */
