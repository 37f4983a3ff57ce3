/* SPDX-License-Identifier: GPL-2.0 */
/* Native function entries and returns (--native, --native-map). */
#ifndef __LOTUS_NATIVE_BPF_H
#define __LOTUS_NATIVE_BPF_H

/* Native functions (--native): an entry and a return per call of a chosen function, its number in the attach
 * cookie; probed per traced process, or system-wide on the library file where the kernel cannot. */
static __always_inline bool native_traced(void)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    return bpf_map_lookup_elem(&lotus_traced, &tgid) != 0;
}

static __always_inline int native_event(void *ctx, __u32 type)
{
    /* Counted whatever the ring takes: a sample inside the call is named after it (docs/native-map.md, rule 2),
     * and its stack is not copied. */
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0);
    if (ts) {
        if (type == LOTUS_EV_NATIVE_ENTRY && ts->native_open < 255) {
            __u64 sp = PT_REGS_SP((struct pt_regs *)ctx);
            /* An entry above the outermost open call's finds that call returned unseen (its count is stale):
             * this one is the outermost now. */
            if (!ts->native_open || sp > ts->native_sp) {
                ts->native_open = 0;
                ts->native_sp = sp;
            }
            ts->native_open++;
        } else if (type == LOTUS_EV_NATIVE_RETURN && ts->native_open) {
            ts->native_open--;
        }
    }
    struct lotus_native *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, type);
    e->func = (__u32)bpf_get_attach_cookie(ctx);
    e->_pad = 0;
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

#endif /* __LOTUS_NATIVE_BPF_H */
