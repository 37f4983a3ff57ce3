/* SPDX-License-Identifier: GPL-2.0 */
/* Native function entries and returns (--native, --native-map). */
#ifndef __LOTUS_NATIVE_BPF_H
#define __LOTUS_NATIVE_BPF_H

/* Native functions (--native): a plain uprobe on a chosen function's entry and on each of its own return
 * instructions, its number in the attach cookie; probed per traced process, or system-wide on the library file
 * where the kernel cannot. Never a return probe: that replaces the call's return address, which C++ exceptions
 * and unwinders then cannot walk through (docs/native-map.md, "Entries and returns"). */
static __always_inline bool native_traced(void)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    return bpf_map_lookup_elem(&lotus_traced, &tgid) != 0;
}

static __always_inline int native_event(void *ctx, __u32 type, __u32 func)
{
    __u64 sp = PT_REGS_SP((struct pt_regs *)ctx);
    /* Counted whatever the ring takes: a sample inside the call is named after it (docs/native-map.md, rule 2),
     * and its stack is not copied. */
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0);
    if (ts) {
        if (type == LOTUS_EV_NATIVE_ENTRY && ts->native_open < 255) {
            /* An entry above the outermost open call's finds that call returned unseen (its count is stale):
             * this one is the outermost now. */
            if (!ts->native_open || sp > ts->native_sp) {
                ts->native_open = 0;
                ts->native_sp = sp;
            }
            ts->native_open++;
        } else if (type == LOTUS_EV_NATIVE_RETURN && ts->native_open) {
            /* The outermost call returning (or one above it: the count was stale) closes them all; an inner
             * call left by an exception is still counted until then. */
            if (sp >= ts->native_sp)
                ts->native_open = 0;
            else
                ts->native_open--;
        }
    }
    struct lotus_native *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, type);
    e->func = func;
    e->_pad = 0;
    e->sp = sp;
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

#endif /* __LOTUS_NATIVE_BPF_H */
