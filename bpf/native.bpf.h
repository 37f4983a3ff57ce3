/* SPDX-License-Identifier: GPL-2.0 */
/* Native function entries and returns (--native, --native-map). */
#ifndef __LOTUS_NATIVE_BPF_H
#define __LOTUS_NATIVE_BPF_H

/* Native functions (--native): one entry and one return probe per chosen function, its number in the
 * attach cookie. Attached system-wide on the library file like the evaluator's probes. */
static __always_inline int native_event(void *ctx, __u32 type)
{
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32;
    if (!bpf_map_lookup_elem(&lotus_traced, &tgid))
        return 0;
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
