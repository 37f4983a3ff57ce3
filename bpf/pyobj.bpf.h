/* SPDX-License-Identifier: GPL-2.0 */
/* Reading CPython objects from user memory: pointers, a frame's code and locals, str. Offsets come from the
 * rodata layout (one row per CPython version, or the interpreter's _Py_DebugOffsets). */
#ifndef __LOTUS_PYOBJ_BPF_H
#define __LOTUS_PYOBJ_BPF_H

static __always_inline __u64 read_ptr(__u64 addr)
{
    __u64 v = 0;
    if (addr)
        bpf_probe_read_user(&v, sizeof(v), (void *)addr);
    return v;
}

static __always_inline __u64 frame_code(__u64 frame)
{
    return read_ptr(frame + layout.frame_code) & ~layout.stackref_tag_mask;
}

/* localsplus[slot] of a frame: the object, without the tag bits of a _PyStackRef (3.14+). */
static __always_inline __u64 frame_local(__u64 frame, __u64 slot)
{
    return read_ptr(frame + layout.frame_localsplus + slot * 8) & ~layout.stackref_tag_mask;
}

/* Reads a Python str into buf. Returns the kind byte of lotus_code_info. */
static __noinline __u8 read_unicode(__u64 obj, char *buf, __u32 size)
{
    __u32 state = 0;
    if (!obj || bpf_probe_read_user(&state, sizeof(state), (void *)(obj + layout.unicode_state)))
        return 0xff;
    if (state & (1u << layout.unicode_ascii_bit)) {
        if (bpf_probe_read_user_str(buf, size, (void *)(obj + layout.unicode_ascii_data)) < 0)
            return 0xff;
        return 0;
    }
    __u8 kind = (state >> layout.unicode_kind_shift) & 7;
    __s64 len = 0;
    bpf_probe_read_user(&len, sizeof(len), (void *)(obj + layout.unicode_length));
    __u64 bytes = (__u64)len * kind;
    if (bytes >= size)
        bytes = size - 1;
    bytes &= 255;
    if (bytes && bpf_probe_read_user(buf, bytes, (void *)(obj + layout.unicode_compact_data)))
        return 0xff;
    return kind;
}

#endif /* __LOTUS_PYOBJ_BPF_H */
