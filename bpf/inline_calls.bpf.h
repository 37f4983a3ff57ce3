/* SPDX-License-Identifier: GPL-2.0 */
/* CPython 3.11's inlined Python-to-Python calls (--all-calls): the frames a thread has entered, by depth, and
 * the frame an opcode handler runs for. */
#ifndef __LOTUS_INLINE_CALLS_BPF_H
#define __LOTUS_INLINE_CALLS_BPF_H

/* --all-calls on 3.11 (inline_calls = 1): Python-to-Python calls run inside one evaluator call, so probes on
 * the RESUME and RETURN_VALUE handlers see them; depths then follow frames, not C calls. frames[d] is the
 * frame at depth d; c_mask marks the depths entered from C, whose return the uretprobe reports. An inlined
 * frame unwound by an exception never reaches RETURN_VALUE: the next event finds its caller's depth again. */

struct thread_frames {
    __u64 frame[64];
    __u64 c_mask;
    __u64 tstate;
};

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct thread_frames);
} lotus_frames SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct thread_frames);
} lotus_frames_zero SEC(".maps");

static __always_inline struct thread_frames *frames_of(__u32 tid)
{
    struct thread_frames *tf = bpf_map_lookup_elem(&lotus_frames, &tid);
    if (tf)
        return tf;
    __u32 zero = 0;
    struct thread_frames *z = bpf_map_lookup_elem(&lotus_frames_zero, &zero);
    if (!z)
        return 0;
    bpf_map_update_elem(&lotus_frames, &tid, z, BPF_NOEXIST);
    return bpf_map_lookup_elem(&lotus_frames, &tid);
}

/* The depth just above frame `f` (0 when it is not among the frames we track). */
static __always_inline __u32 depth_above(struct thread_frames *tf, __u32 depth, __u64 f)
{
    /* Nearly always the innermost frame (a call) or the one below it (a return at the same level). */
    if (depth > 0 && depth <= 64 && tf->frame[(depth - 1) & 63] == f)
        return depth;
    if (depth > 1 && depth <= 64 && tf->frame[(depth - 2) & 63] == f)
        return depth - 1;
    for (int i = 63; i >= 0; i--) {
        if ((__u32)i < depth && tf->frame[i & 63] == f)
            return i + 1;
    }
    return 0;
}

/* frame[d] = f, with the index masked where the verifier sees it (the compiler drops a plain "& 63" it can
 * prove redundant, and the verifier then loses the bound). */
static __always_inline void set_frame(struct thread_frames *tf, __u32 d, __u64 f)
{
    __u64 idx = d;
    asm volatile("%0 &= 63" : "+r"(idx));
    tf->frame[idx] = f;
}

/* The frame an opcode handler runs for, when it is an inlined one of a traced thread whose state we know
 * (frames entered from C have is_entry set: the evaluator's own probes cover them); else 0. */
struct inlined {
    __u32 tgid, tid, space;
    struct thread_frames *tf;
    struct thread_state *ts;
};

static __always_inline __u64 inlined_frame(struct inlined *in, struct frame_head *h)
{
    __u64 id = bpf_get_current_pid_tgid();
    in->tgid = id >> 32;
    in->tid = (__u32)id;
    in->ts = bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0);
    if (!in->ts)
        return 0;
    in->space = in->ts->space;
    in->tf = bpf_map_lookup_elem(&lotus_frames, &in->tid);
    if (!in->tf || !in->ts || !in->tf->tstate)
        return 0;
    struct frame_head unused;
    __u64 frame = caller_frame(in->tf->tstate, h, 0, &unused);
    __u8 is_entry = 1;
    if (!frame || bpf_probe_read_user(&is_entry, 1, (void *)(frame + layout.frame_is_entry)) || is_entry)
        return 0;
    return frame;
}

#endif /* __LOTUS_INLINE_CALLS_BPF_H */
