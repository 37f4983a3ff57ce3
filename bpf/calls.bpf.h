/* SPDX-License-Identifier: GPL-2.0 */
/* Entries and returns of Python calls: what an entry record holds (captured locals, self, caller), when one
 * is emitted, and the matching return. */
#ifndef __LOTUS_CALLS_BPF_H
#define __LOTUS_CALLS_BPF_H

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct lotus_py_entry);
} lotus_entry_scratch SEC(".maps");

/* Frame heads read during an entry's walks, per CPU, off the BPF stack: with them on it, the deepest call chain
 * (a slot entry's program, role_of, read_unicode) took 544 bytes where a kernel gives these programs no private
 * stack, and the verifier refused it (512 at most). */
struct head_scratch {
    struct frame_head outer; /* emit_entry: the frame a comprehension's scope belongs to */
    struct frame_head chain; /* emit_entry: the callers described */
    struct frame_head walk;  /* walk_captures */
};
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct head_scratch);
} lotus_head_scratch SEC(".maps");

static __always_inline struct head_scratch *head_scratch(void)
{
    __u32 zero = 0;
    return bpf_map_lookup_elem(&lotus_head_scratch, &zero);
}

/* Reports the locals `slots` (packed as capture_slots_of returns them) of frame f running code c. Returns
 * how many it added. */
static __always_inline __u32 capture_locals(struct thread_state *ts, struct lotus_py_entry *e, __u64 c, __u64 f,
                                            __s32 slots)
{
    __u32 added = 0;
    for (int k = 0; k < LOTUS_SLOTS_PER_ROLE; k++) {
        __u32 slot = (slots >> (8 * k)) & 0xff;
        __u32 n = e->capture_count;
        if (slot == LOTUS_NO_SLOT || n >= LOTUS_MAX_CAPTURES)
            continue;
        __u64 at = n;
        asm volatile("%0 &= 3" : "+r"(at)); /* bounded where the verifier sees it */
        e->capture_code[at] = c;
        e->capture_slot[at] = slot;
        if (slots & SLOTS_OWN)
            e->own |= LOTUS_OWN_CAPTURE(at);
        e->capture_value[at] = read_small_int(ts, f, slot);
        e->capture_count = n + 1;
        added++;
    }
    return added;
}

/* Walks up to LOTUS_WALK_MAX frames from f for the locals their roles capture, into e, and remembers the first
 * frame that had some (later walks read it directly while it runs the same code). Frames from the
 * `describe_from`-th up are described to user space if new (those below were already). */
static __always_inline void walk_captures(struct thread_state *ts, struct lotus_py_entry *e, __u32 space,
                                          __u32 tgid, __u64 f, int describe_from)
{
    struct head_scratch *hs = head_scratch();
    if (!hs)
        return;
    struct frame_head *h = &hs->walk;
    for (int i = 0; i < LOTUS_WALK_MAX && f; i++) {
        if (!read_head(f, h))
            break;
        if (h->shim) { /* a C call's entry frame: its code is None (3.13+) or the interpreter's trampoline */
            f = h->previous;
            continue;
        }
        __u64 c = h->code;
        if (i >= describe_from)
            role_of(space, tgid, c);
        __s32 slots = capture_slots_of(space, tgid, c);
        if (slots >= 0 && capture_locals(ts, e, c, f, slots) && !ts->capture_frame) {
            ts->capture_frame = f;
            ts->capture_code = c;
            ts->capture_slots = slots;
        }
        f = h->previous;
    }
}

/* Describes the frame just entered at `depth` (called by `caller`, whose head is *ch) if the rules want it;
 * marks it emitted (or lost). Returns 1 when the call's return matters: its entry was emitted or lost.
 * Emitted: code that is not SKIP; a call of an object of a pipeline class (SELF_PIPELINE code: __call__,
 * forward, nn.Module's wrappers), whatever its code; a call made from such a pipeline frame or from PIPELINE
 * or EMIT_CALLEES code (ops); and anything new to user space (not classified yet). */
static __always_inline int emit_entry(__u32 space, __u32 tgid, struct thread_state *ts, __u32 depth,
                                      __u64 frame, const struct frame_head *fhp, __u64 caller,
                                      const struct frame_head *ch)
{
    __u64 bit = 1ull << (depth & 63);
    __u64 code = fhp->code; /* the new frame's `previous` is not linked yet */
    __u32 flags = role_of(space, tgid, code);
    __u64 caller_code = caller ? ch->code : 0;
    /* A slot entry without a Python frame below it (an object called from a thread running no Python, or a
     * thread state that could not be read) has no caller to describe or judge it by. */
    __u32 cflags = caller ? role_of(space, tgid, caller_code)
                          : code < LOTUS_SLOTS ? LOTUS_ROLE_CLASSIFIED | LOTUS_ROLE_SKIP : 0;

    __u64 self_obj = frame_self(fhp, frame);
    __u64 self_type = 0, caller_type = 0;
    bool self_pipeline = (flags & LOTUS_ROLE_SELF_PIPELINE) && may_be_pipeline(ts, space, tgid, self_obj, &self_type);
    /* A call made from a comprehension or generator expression is judged by the frame the scope belongs to. */
    struct head_scratch *hs = head_scratch();
    if (!hs)
        return 0;
    struct frame_head *outer = &hs->outer;
    const struct frame_head *jh = ch;
    __u64 judge = caller;
    __u32 jflags = cflags;
    if ((cflags & LOTUS_ROLE_SCOPE) && read_head(ch->previous, outer)) {
        jh = outer;
        judge = ch->previous;
        jflags = role_of(space, tgid, outer->code);
    }
    bool caller_pipeline = (jflags & LOTUS_ROLE_PIPELINE) ||
                           ((jflags & LOTUS_ROLE_SELF_PIPELINE) &&
                            may_be_pipeline(ts, space, tgid, frame_self(jh, judge), &caller_type));
    bool wanted = !(flags & LOTUS_ROLE_SKIP) || self_pipeline || caller_pipeline ||
                  !(cflags & LOTUS_ROLE_CLASSIFIED) || (cflags & LOTUS_ROLE_EMIT_CALLEES);
    if (!wanted)
        return 0;

    /* Built in a per-CPU scratch slot and copied out, so no ring-buffer reference is held while walking. */
    __u32 zero = 0;
    struct lotus_py_entry *e = bpf_map_lookup_elem(&lotus_entry_scratch, &zero);
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_PY_ENTRY);
    read_counters(&e->counters, ts, e->h.ts_ns);
    e->frame = frame;
    e->code = code;
    e->depth = depth;
    if (!self_type && self_obj)
        self_type = read_ptr(self_obj + layout.object_type);
    e->self_obj = self_obj;
    e->arg1_obj = !(flags & LOTUS_ROLE_CLASSIFIED) || (flags & LOTUS_ROLE_OBJ1) ? head_local(fhp, frame, 1) : 0;
    e->own = flags & FROM_OWN ? LOTUS_OWN_CODE : 0;
    if (self_type & 1) { /* may_be_pipeline's mark: described as the process's own */
        self_type &= ~1ull;
        e->own |= LOTUS_OWN_SELF_TYPE;
    } else if (!(flags & LOTUS_ROLE_SELF_PIPELINE) && (type_flags(space, tgid, self_type) & FROM_OWN)) {
        e->own |= LOTUS_OWN_SELF_TYPE; /* (described now if new: before the entry, so user space can name it) */
    }
    e->self_type = self_type;
    e->chain_len = 0;
    e->capture_count = 0;

    /* Pipeline calls, WALK code (a DataLoader's next()), callees of EMIT_CALLEES code (a __getitem__'s
     * transforms) and code not classified yet describe 4 callers with their first argument (a sample's dataset
     * index); the others, ops above all, only their caller, whose head is read already: the engine looks further
     * up the chain only for deep entries (a pipeline call's __getitem__, a __getitem__'s fetcher), and each
     * caller more cost two user-memory reads (its head, its code's fingerprint; what a read costs:
     * docs/performance.md, "What a BPF run costs here"). */
    bool deep = !(flags & LOTUS_ROLE_CLASSIFIED) || (flags & (LOTUS_ROLE_PIPELINE | LOTUS_ROLE_WALK)) ||
                self_pipeline || !(cflags & LOTUS_ROLE_CLASSIFIED) || (cflags & LOTUS_ROLE_EMIT_CALLEES);
    __u32 chain_max = deep ? LOTUS_CHAIN_LEN : 1;
    __u64 f = caller;
    struct frame_head *h = &hs->chain;
    *h = *ch;
    for (int i = 0; i < LOTUS_CHAIN_LEN && i < chain_max; i++) {
        if (i > 0 && read_head(f, h) && h->shim) {
            f = h->previous;
            /* A shim below a shim is the bottom of the thread's stack: 3.15+ keep a sentinel frame there (the
             * thread state's base_frame, owned like a shim, code None) under the outermost evaluator's entry. */
            if (read_head(f, h) && h->shim)
                break;
        }
        if (!f)
            break;
        __u64 c = h->code;
        __u32 role = i == 0 ? cflags : role_of(space, tgid, c);
        e->chain_code[i] = c;
        if (role & FROM_OWN)
            e->own |= LOTUS_OWN_CHAIN(i);
        /* Only a __getitem__'s first argument is wanted (or one that may turn out to be a __getitem__'s). */
        bool arg1 = deep && (!(role & LOTUS_ROLE_CLASSIFIED) || (role & LOTUS_ROLE_ARG1));
        e->chain_arg1[i] = arg1 ? int_value(ts, head_local(h, f, 1)) : LOTUS_NO_VALUE;
        e->chain_len = i + 1;
        f = h->previous;
    }
    /* Pipelines, callees of EMIT_CALLEES code and code not classified yet, or called by code not classified
     * yet, look further up for locals such as a DataLoader worker's id and batch index. (A spawned worker's
     * first Queue.put is seen first as the caller of an already classified Condition.__enter__: without the
     * walk there, that batch's hand-over had no index and the batch was lost.) */
    /* The frame found last time (a worker's _worker_loop, there for the worker's life) is read directly while
     * it still runs the same code: a walk is many reads and lookups (docs/performance.md, "What a BPF run
     * costs here"). */
    __u64 cf = ts->capture_frame;
    __s32 cslots = -1;
    if (deep && cf && frame_code(cf) == ts->capture_code)
        cslots = ts->capture_slots; /* the frame holds its code object: still the one classified */
    if (cslots >= 0) {
        capture_locals(ts, e, ts->capture_code, cf, cslots);
    } else if (deep) {
        ts->capture_frame = 0;
        walk_captures(ts, e, space, tgid, caller, LOTUS_CHAIN_LEN);
    }
    if (bpf_ringbuf_output(&lotus_events, e, sizeof(*e), submit_flags()) == 0) {
        count(LOTUS_COUNT_SUBMITTED);
        ts->emitted |= bit;
        if (!(flags & LOTUS_ROLE_CLASSIFIED) || (flags & LOTUS_ROLE_RETURNED))
            ts->returned |= bit;
        else
            ts->returned &= ~bit;
    } else {
        count(LOTUS_COUNT_LOST);
        ts->lost |= bit;
    }
    return 1;
}

/* Entry into the evaluator. `session`: attached as a uprobe session (Linux 6.13+), where the return is seen
 * only if this returns 0; then depths count only the calls whose return is wanted (those emitted or lost;
 * all of them for --all-calls), and a skipped call costs no return probe (a return's price: docs/performance.md,
 * "A trap's price on these VMs"). Otherwise (a plain uprobe and uretprobe pair) every call returns through
 * py_return and is counted. Returns the session's verdict: 0 to see the return, 1 not to. */
static __always_inline int enter(void *tstate, void *frame_arg, bool session)
{
    struct thread_state *ts = traced_thread();
    if (!ts)
        return 1;
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32, tid = (__u32)id;
    name_once(ts, tgid, tid);
    __u32 space = ts->space;
    /* --all-calls reads the new frame's head after the depth bookkeeping below: read before, its outcomes
     * multiplied the verifier's paths through that (past its limit of 1 M instructions). */
    struct frame_head ch, fh;
    __u64 caller = caller_frame((__u64)tstate, &ch, inline_calls ? 0 : (__u64)frame_arg, &fh);
    __u32 depth = ts->depth;
    struct thread_frames *tf = 0;
    if (inline_calls) {
        tf = frames_of(tid);
        if (!tf)
            return 0;
        tf->tstate = (__u64)tstate;
        /* Resynchronise on the caller: inlined frames above it that an exception unwound are gone. */
        __u32 d = caller ? depth_above(tf, depth, caller) : 0;
        if (d)
            depth = d;
    }
    if (depth >= 64) {
        count(LOTUS_FAIL_DEPTH);
        return 1; /* the kernel installs no return probe this deep: this call never returns for us */
    }
    ts->emitted &= ~(~0ull << depth);
    ts->lost &= ~(~0ull << depth);
    if (tf) {
        set_frame(tf, depth, (__u64)frame_arg);
        tf->c_mask = (tf->c_mask & ~(~0ull << depth)) | (1ull << depth);
    }
    if (inline_calls)
        read_head((__u64)frame_arg, &fh);
    if (!emit_entry(space, tgid, ts, depth, (__u64)frame_arg, &fh, caller, &ch) && session && !inline_calls)
        return 1;
    ts->depth = depth + 1;
    return 0;
}

/* Entry into one of CPython's type-slot functions (the default probes; cookie = which, LOTUS_SLOT_*): an
 * instance called, iter() or next() of one. The callee's frame does not exist yet: the entry
 * describes `self` and the running frame (its caller), found through the thread state of the GIL's holder,
 * which is this thread. `session` and the verdict as for enter(): with a plain uprobe and uretprobe pair every
 * call is counted in the depth, since every one returns through py_return. */
static __always_inline int slot_enter(struct pt_regs *ctx, __u64 self, __u64 cookie, bool session, __u32 *entered)
{
    struct thread_state *ts = traced_thread();
    if (!ts)
        return 1;
    __u32 depth = ts->depth;
    if (depth >= 64) {
        count(LOTUS_FAIL_DEPTH);
        return 1; /* the kernel installs no return probe this deep: this call never returns for us */
    }
    ts->emitted &= ~(~0ull << depth);
    ts->lost &= ~(~0ull << depth);
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32, tid = (__u32)id;
    name_once(ts, tgid, tid);
    __u32 space = ts->space;
    __u64 kind = cookie & 7;
    if (!ts->tstate_noted && kind > 0 && kind < LOTUS_SLOTS_PROBED) {
        /* The probed function's address here, less its address in the file, is where the interpreter was loaded:
         * where the process keeps its thread state, for walks made outside any probed call (walk_at_getppid). */
        ts->tstate_noted = 1;
        struct lotus_traced_proc *p = bpf_map_lookup_elem(&lotus_traced, &tgid);
        if (p)
            p->tstate_addr = tstate_vaddr + (PT_REGS_IP(ctx) - slot_vaddr[kind]);
    }
    bool wanted = kind > 0 && kind < LOTUS_SLOTS_PROBED && self;
    if (wanted && kind != LOTUS_SLOT_CALL) {
        /* iter() and next() are wanted of a DataLoader and its iterators only (and of a type not classified
         * yet, which user space is about to judge). */
        __u32 tf = memo_type_flags(ts, space, tgid, self, read_ptr(self + layout.object_type));
        wanted = !(tf & LOTUS_TYPE_CLASSIFIED) || (tf & LOTUS_TYPE_LOADER);
    }
    if (wanted && kind < LOTUS_SLOTS_PROBED) { /* (implied by wanted: the verifier wants slot_vaddr's bound here) */
        /* The probed function's address here, less its address in the file: where the interpreter was loaded. */
        __u64 tstate = read_ptr(tstate_vaddr + (PT_REGS_IP(ctx) - slot_vaddr[kind]));
        struct frame_head ch = {}, fh = {};
        __u64 caller = tstate ? caller_frame(tstate, &ch, 0, 0) : 0;
        fh.code = kind;
        fh.previous = caller;
        fh.has_locals = 1;
        fh.local[0] = self;
        wanted = emit_entry(space, tgid, ts, depth, 0, &fh, caller, &ch);
    }
    if (!wanted && session)
        return 1;
    ts->depth = depth + 1;
    *entered = depth;
    return 0;
}

/* A DataLoader worker whose dataset calls no object makes no entry that walks its stack for the locals roles
 * capture (its id in _worker_loop): its main thread's getppid (once per task) walks from the thread state
 * instead, until a walk found them (a first walk may describe _worker_loop, which user space then classifies). */
static __always_inline void walk_at_getppid(struct thread_state *ts, __u32 tgid)
{
    if (ts->capture_frame)
        return;
    struct lotus_traced_proc *p = bpf_map_lookup_elem(&lotus_traced, &tgid);
    __u64 tstate = p && p->tstate_addr ? read_ptr(p->tstate_addr) : 0;
    struct frame_head h = {};
    __u64 f = tstate ? caller_frame(tstate, &h, 0, 0) : 0;
    __u32 zero = 0;
    struct lotus_py_entry *e = bpf_map_lookup_elem(&lotus_entry_scratch, &zero);
    if (!f || !e)
        return;
    e->capture_count = 0;
    e->own = 0;
    walk_captures(ts, e, ts->space, tgid, f, 0);
    if (!e->capture_count)
        return;
    fill_header(&e->h, LOTUS_EV_CAPTURE);
    count(bpf_ringbuf_output(&lotus_events, e, sizeof(*e), submit_flags()) == 0 ? LOTUS_COUNT_SUBMITTED
                                                                                 : LOTUS_COUNT_LOST);
}

/* Highest set bit of a nonzero mask. */
static __always_inline __u32 top_bit(__u64 m)
{
    __u32 n = 0;
    if (m >> 32) { n += 32; m >>= 32; }
    if (m >> 16) { n += 16; m >>= 16; }
    if (m >> 8) { n += 8; m >>= 8; }
    if (m >> 4) { n += 4; m >>= 4; }
    if (m >> 2) { n += 2; m >>= 2; }
    if (m >> 1) { n += 1; }
    return n;
}

static __always_inline int emit_return(struct thread_state *ts, __u32 depth, __u64 rc)
{
    if (depth >= 64)
        return 0;
    if (ts->lost & (1ull << depth)) {
        ts->lost &= ~(1ull << depth);
        count(LOTUS_COUNT_LOST);
        return 0;
    }
    if (!(ts->emitted & (1ull << depth)))
        return 0;
    ts->emitted &= ~(1ull << depth);
    struct lotus_py_return *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_PY_RETURN);
    e->depth = depth;
    e->ret_null = rc == 0;
    e->ret_obj = ts->returned & (1ull << depth) ? rc : 0;
    read_counters(&e->counters, ts, e->h.ts_ns);
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

/* The return of a call entered at `depth` (a uprobe session's cookie keeps it from the entry): calls entered above
 * it whose returns never came (their probe's link closed while they ran: --trainer-calls) are unwound with it, so
 * that the thread's depths stay true. */
static __always_inline int leave_from(struct pt_regs *ctx, __u32 depth)
{
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0);
    /* not above the thread's depth: entered before its state was (re)made (across fork) */
    if (!ts || ts->depth <= depth || depth >= 64)
        return 0;
    ts->depth = depth;
    return emit_return(ts, depth, PT_REGS_RC(ctx));
}

static __always_inline int leave(struct pt_regs *ctx)
{
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0);
    /* depth 0: a frame entered before tracing began (or inherited across fork) returns */
    if (!ts || ts->depth == 0)
        return 0;
    __u32 depth = ts->depth - 1;
    if (inline_calls) {
        /* The innermost frame entered from C returns, whatever inlined frames were left above it. */
        __u32 tid = (__u32)bpf_get_current_pid_tgid();
        struct thread_frames *tf = bpf_map_lookup_elem(&lotus_frames, &tid);
        if (!tf || !tf->c_mask)
            return 0;
        depth = top_bit(tf->c_mask);
        tf->c_mask &= ~(1ull << depth);
    }
    ts->depth = depth;
    return emit_return(ts, depth, PT_REGS_RC(ctx));
}

#endif /* __LOTUS_CALLS_BPF_H */
