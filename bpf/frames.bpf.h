/* SPDX-License-Identifier: GPL-2.0 */
/* Walking the interpreter's frames: frame heads read at once, small int locals, self (through 3.10's cells),
 * the caller frame at a probed entry. */
#ifndef __LOTUS_FRAMES_BPF_H
#define __LOTUS_FRAMES_BPF_H

/* The value of a Python int object if it fits 60 bits, else LOTUS_NO_VALUE. Its type, size and digits are
 * read at once; the type's flags only the first time the thread meets that type (int and bool: static types,
 * never freed, so remembering them is safe; a heap subclass of int is checked every time). */
#define INT_HEAD_MAX 32
#define Py_TPFLAGS_HEAPTYPE (1ul << 9)
#define Py_TPFLAGS_LONG_SUBCLASS (1ul << 24)

static __noinline __s64 int_value(struct thread_state *ts, __u64 obj)
{
    __s32 n = layout.long_digits + 8 - layout.object_type;
    __u8 buf[INT_HEAD_MAX];
    if (!obj || n <= 0 || n > INT_HEAD_MAX || bpf_probe_read_user(buf, n, (void *)(obj + layout.object_type)))
        return LOTUS_NO_VALUE;
    __u64 type = *(__u64 *)buf;
    if (!type)
        return LOTUS_NO_VALUE;
    if (type != ts->int_types[0] && type != ts->int_types[1]) {
        __u64 flags = 0;
        if (bpf_probe_read_user(&flags, sizeof(flags), (void *)(type + layout.type_flags)) ||
            !(flags & Py_TPFLAGS_LONG_SUBCLASS))
            return LOTUS_NO_VALUE;
        if (!(flags & Py_TPFLAGS_HEAPTYPE))
            ts->int_types[ts->int_types[0] ? 1 : 0] = type;
    }
    /* Offsets into buf, computed apart (the verifier refuses subtracting from a stack pointer). */
    __u64 size_at = layout.long_size - layout.object_type, digits_at = layout.long_digits - layout.object_type;
    asm volatile("" : "+r"(size_at), "+r"(digits_at));
    __s64 size = *(__s64 *)(buf + size_at);
    __u32 *digits = (__u32 *)(buf + digits_at);
    __s64 ndigits, sign = 1;
    if (layout.long_tagged) {
        ndigits = (__u64)size >> 3;
        if ((size & 3) == 1)
            return 0;
        if ((size & 3) == 2)
            sign = -1;
    } else {
        ndigits = size < 0 ? -size : size;
        sign = size < 0 ? -1 : 1;
    }
    if (ndigits == 0)
        return 0;
    if (ndigits > 2)
        return LOTUS_NO_VALUE;
    __s64 v = digits[0] & 0x3fffffff;
    if (ndigits == 2)
        v |= (__s64)(digits[1] & 0x3fffffff) << 30;
    return sign * v;
}

/* localsplus[slot] of a frame if it is a Python int that fits 60 bits, else LOTUS_NO_VALUE. */
static __always_inline __s64 read_small_int(struct thread_state *ts, __u64 frame, __u32 slot)
{
    return int_value(ts, frame_local(frame, slot & 63));
}

/* What the walks read of a frame: its code, the frame below, whether it is a C-stack shim and its first two
 * locals (self, and a __getitem__'s index). On 3.11+ they lie in its first 88-96 bytes, so one read gets them
 * all (each read is most of what a call the rules skip costs: docs/performance.md, "What a BPF run costs
 * here"). */
#define FRAME_HEAD_MAX 96
struct frame_head {
    __u64 code;
    __u64 previous;
    __u64 shim;
    __u64 local[2];
    __u64 has_locals; /* local[] was read (else read them with frame_local) */
};

/* Bytes of a frame's head without its locals, and with them (0 where they lie beyond FRAME_HEAD_MAX: 3.10).
 * The layout is read-only data, so the verifier knows both, and the offsets in parse_head, as constants. */
static __always_inline __s32 head_len(void)
{
    __s32 n = layout.frame_code + 8;
    if (layout.frame_previous + 8 > n)
        n = layout.frame_previous + 8;
    if (layout.frame_owner + 1 > n)
        n = layout.frame_owner + 1;
    return n > 0 && n <= FRAME_HEAD_MAX ? n : 0;
}

static __always_inline __s32 head_len_with_locals(void)
{
    __s32 n = layout.frame_localsplus + 16;
    return n >= head_len() && n <= FRAME_HEAD_MAX ? n : 0;
}

static __always_inline void parse_head(const __u8 *buf, bool with_locals, struct frame_head *h)
{
    h->code = *(__u64 *)(buf + layout.frame_code) & ~layout.stackref_tag_mask;
    h->previous = *(__u64 *)(buf + layout.frame_previous);
    h->shim = 0;
    if (layout.owner_cstack >= 0 && layout.frame_owner >= 0)
        h->shim = buf[layout.frame_owner] == (__u8)layout.owner_cstack;
    h->has_locals = with_locals;
    h->local[0] = h->local[1] = 0;
    if (with_locals) {
        h->local[0] = *(__u64 *)(buf + layout.frame_localsplus) & ~layout.stackref_tag_mask;
        h->local[1] = *(__u64 *)(buf + layout.frame_localsplus + 8) & ~layout.stackref_tag_mask;
    }
}

static __noinline bool read_head(__u64 frame, struct frame_head *h)
{
    __s32 n = head_len(), nl = head_len_with_locals();
    __u8 buf[FRAME_HEAD_MAX];
    /* The locals may lie past a small frame's end: where that read fails, the head alone is read. */
    if (frame && nl && !bpf_probe_read_user(buf, nl, (void *)frame)) {
        parse_head(buf, true, h);
        return true;
    }
    if (frame && n && !bpf_probe_read_user(buf, n, (void *)frame)) {
        parse_head(buf, false, h);
        return true;
    }
    __builtin_memset(h, 0, sizeof(*h));
    return false;
}

/* The caller's frame and the new one in one read, where the new frame lies just above its caller's on the
 * thread's frame stack, as it nearly always does (within 256 bytes for 85 % of the calls in the example, 512
 * for 92 %): per-CPU room for it. */
#define SPAN_MAX 512
struct span {
    __u8 b[SPAN_MAX + FRAME_HEAD_MAX];
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct span);
} lotus_span_scratch SEC(".maps");

/* Heads of frame `caller` and of `frame`, which lies above it; false where that is not one read. */
static __noinline bool read_span(__u64 caller, __u64 frame, struct frame_head *ch, struct frame_head *fh)
{
    __s32 nl = head_len_with_locals();
    __u64 gap = frame - caller;
    __u32 zero = 0;
    struct span *sp = bpf_map_lookup_elem(&lotus_span_scratch, &zero);
    if (!sp || !caller || !nl || frame <= caller || gap > SPAN_MAX)
        return false;
    if (bpf_probe_read_user(sp->b, gap + nl, (void *)caller))
        return false;
    parse_head(sp->b, true, ch);
    asm volatile("%0 &= 1023" : "+r"(gap)); /* bound it where the verifier sees it: gap <= SPAN_MAX above */
    if (gap > SPAN_MAX)
        return false;
    parse_head(sp->b + gap, true, fh);
    return true;
}

static __always_inline __u64 head_local(const struct frame_head *h, __u64 frame, __u32 slot)
{
    return h->has_locals ? h->local[slot & 1] : frame_local(frame, slot);
}

/* 3.10 moves an argument that a nested scope captures (self used in a lambda, a comprehension or a generator
 * expression) into a cell before the frame runs: localsplus[0] is then NULL, and the cell, at
 * localsplus[co_nlocals + i] for the i with co_cell2arg[i] == 0, holds self. */
#define CELL_ARGS_MAX 8
static __noinline __u64 cell_arg0(__u64 frame, __u64 code)
{
    if (layout.code_cell2arg < 0 || layout.code_nlocals < 0 || !frame || !code)
        return 0;
    __u64 cell2arg = read_ptr(code + layout.code_cell2arg);
    __u64 cellvars = read_ptr(code + layout.code_cellvars);
    if (!cell2arg || !cellvars)
        return 0;
    __s32 nlocals = 0;
    __s64 ncells = 0, map[CELL_ARGS_MAX] = {};
    bpf_probe_read_user(&nlocals, sizeof(nlocals), (void *)(code + layout.code_nlocals));
    bpf_probe_read_user(&ncells, sizeof(ncells), (void *)(cellvars + layout.tuple_size));
    if (nlocals < 0 || nlocals > 4096 || ncells <= 0)
        return 0;
    __u64 n = ncells > CELL_ARGS_MAX ? CELL_ARGS_MAX : ncells;
    if (bpf_probe_read_user(map, n * 8, (void *)cell2arg))
        return 0;
    for (__u32 i = 0; i < CELL_ARGS_MAX; i++) {
        if (i < n && map[i] == 0) {
            __u64 cell = frame_local(frame, (__u64)nlocals + i);
            return cell ? read_ptr(cell + layout.cell_ref) : 0;
        }
    }
    return 0;
}

/* A frame's self (localsplus[0]), through 3.10's cell when a nested scope captured it. */
static __always_inline __u64 frame_self(const struct frame_head *h, __u64 frame)
{
    __u64 self = head_local(h, frame, 0);
    if (!self && layout.code_cell2arg >= 0)
        self = cell_arg0(frame, h->code);
    return self;
}

/* The frame that called into the evaluator: the thread's current frame at entry (the new frame's own
 * `previous` is only linked inside the function), past a C-stack shim; its head in *h. `frame`: the new frame,
 * whose head goes to *fh (read with the caller's where they are adjacent); 0 to leave *fh alone. */
static __always_inline __u64 caller_frame(__u64 tstate, struct frame_head *h, __u64 frame, struct frame_head *fh)
{
    __u64 f;
    if (layout.tstate_cframe >= 0)
        f = read_ptr(read_ptr(tstate + layout.tstate_cframe) + layout.cframe_current_frame);
    else
        f = read_ptr(tstate + layout.tstate_current_frame);
    bool both = frame && read_span(f, frame, h, fh);
    if (!both && frame)
        read_head(frame, fh);
    if (!both && !read_head(f, h))
        return 0;
    if (h->shim) {
        f = h->previous;
        /* a shim below it: the bottom of the stack (3.15+'s base frame sentinel), no Python caller */
        if (!read_head(f, h) || h->shim)
            return 0;
    }
    return f;
}

#endif /* __LOTUS_FRAMES_BPF_H */
