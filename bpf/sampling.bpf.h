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

const volatile __u32 sample_frames = 1; /* --sample-stack: the leaf, and callers up to this many frames */
const volatile __u32 sample_copy_stack = 0; /* --sample-unwind cfi: callers are found by user space, from a copy */

/* Above this much unread data in the ring a sample keeps its leaf alone, not its stack: a stack copy is 4 KB, and
 * a ring filling up with them must not cost the other records their place. */
#define STACK_COPY_RING_MAX (4 << 20)

/* The leaf (the user ip interrupted here, or the one saved when the thread entered the kernel; none once an
 * exiting thread dropped its memory) and the user registers an unwinding starts from. */
static __always_inline __u64 user_regs(struct bpf_perf_event_data *ctx, bool in_kernel, __u64 *sp, __u64 *bp)
{
    if (!in_kernel) {
        *sp = ctx->regs.sp;
        *bp = ctx->regs.bp;
        return ctx->regs.ip;
    }
    struct task_struct *t = bpf_get_current_task_btf();
    if (!t->mm)
        return 0;
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
    *sp = PT_REGS_SP_CORE(regs);
    *bp = PT_REGS_FP_CORE(regs);
    return PT_REGS_IP_CORE(regs);
}

/* The sample with the stack above sp, read a chunk at a time (a read across the stack's top would fail whole);
 * false where it did not fit, and the caller records the leaf alone. */
static __always_inline bool sample_with_stack(struct bpf_perf_event_data *ctx, bool in_kernel, __u64 leaf, __u64 sp,
                                              __u64 bp)
{
    if (!leaf || !sp)
        return false;
    struct lotus_sample_stack *e = 0;
    if (bpf_ringbuf_query(&lotus_events, BPF_RB_AVAIL_DATA) <= STACK_COPY_RING_MAX)
        e = bpf_ringbuf_reserve(&lotus_events, sizeof(*e), 0);
    if (!e) {
        count(LOTUS_FAIL_STACK_COPY);
        return false;
    }
    count(LOTUS_COUNT_SUBMITTED);
    fill_header(&e->s.h, LOTUS_EV_SAMPLE_STACK);
    e->s.in_kernel = in_kernel;
    e->s.sp = sp;
    e->s.ip[0] = leaf;
    e->s.nr_ips = leaf ? 1 : 0;
    for (__u32 i = 1; i < LOTUS_STACK_DEPTH; i++)
        e->s.ip[i] = 0;
    e->sp = sp;
    e->bp = bp;
    e->pad = 0;
    __u32 len = 0;
    for (__u32 i = 0; i < LOTUS_STACK_COPY_CHUNKS; i++) {
        if (bpf_probe_read_user(&e->stack[i * LOTUS_STACK_COPY_CHUNK], LOTUS_STACK_COPY_CHUNK,
                                (void *)(sp + i * LOTUS_STACK_COPY_CHUNK)))
            break;
        len += LOTUS_STACK_COPY_CHUNK;
    }
    e->stack_len = len;
    bpf_ringbuf_submit(e, submit_flags());
    return true;
}

#endif /* __LOTUS_SAMPLING_BPF_H */
