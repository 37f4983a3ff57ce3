// SPDX-License-Identifier: GPL-2.0
/* lotus-bpf capture programs. They only produce events (see lotus_abi.h); every rule about what a span is
 * lives in user space. Probes are attached system-wide (pid -1) so forked DataLoader workers are seen; the
 * lotus_traced map, extended here on fork, decides which processes produce events. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "lotus_abi.h"

char LICENSE[] SEC("license") = "GPL";

const volatile struct lotus_py_layout layout = {};
const volatile __u32 inline_calls = 0; /* --all-calls on 3.11: see struct thread_frames */

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 16 << 20);
} events SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct lotus_traced_proc);
} lotus_traced SEC(".maps");

/* Opens of shared libraries, copied here too: user space reads this ring before the busy main one, so that
 * a library a worker dlopens gets its --native probes before its functions run. */
struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 64 << 10);
} lib_opens SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 262144);
    __type(key, struct lotus_role_key);
    __type(value, struct lotus_role);
} lotus_roles SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, struct lotus_role_key);
    __type(value, struct lotus_type_role);
} lotus_types SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct lotus_py_entry);
} entry_scratch SEC(".maps");

/* Index 0: events lost because the ring buffer was full. Index 1: events submitted. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} lotus_counters SEC(".maps");

static __always_inline void count(__u32 idx)
{
    __u64 *c = bpf_map_lookup_elem(&lotus_counters, &idx);
    if (c)
        __sync_fetch_and_add(c, 1);
}

/* Waking the consumer on every record costs the traced thread an irq_work (several us on a busy CPU):
 * wake it only once a batch has accumulated; it also polls on a short timeout. */
#define WAKEUP_BYTES (256 << 10)
static __always_inline __u64 submit_flags(void)
{
    return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline void uncount_submitted(void)
{
    __u32 idx = 1;
    __u64 *c = bpf_map_lookup_elem(&lotus_counters, &idx);
    if (c)
        __sync_fetch_and_sub(c, 1); /* per-CPU values may wrap; their sum, which user space reads, does not */
}

static __always_inline void *reserve(__u64 size)
{
    void *e = bpf_ringbuf_reserve(&events, size, 0);
    count(e ? 1 : 0);
    return e;
}

static __always_inline void fill_header(struct lotus_event_header *h, __u32 type)
{
    __u64 id = bpf_get_current_pid_tgid();
    h->type = type;
    h->tgid = id >> 32;
    h->tid = (__u32)id;
    h->cpu = bpf_get_smp_processor_id();
    h->ts_ns = bpf_ktime_get_ns();
}

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

/* Classified roles looked up recently on this CPU: a small direct-mapped copy of lotus_roles. Nearly every
 * call into the evaluator asks for two roles; in the large LRU hash each lookup missed the caches (most of
 * what a skipped call cost). User space classifies a code object once (a new object at a reused address has
 * another fingerprint) and a role space is never reused (exec starts a new one), so a classified role never
 * changes. `check` catches an entry torn by a program that preempted another one filling the same slot. */
#define ROLE_CACHE_SLOTS 1024
struct role_slot {
    __u64 code;
    __u64 fingerprint;
    __u32 space;
    __u32 flags;
    __s32 capture_slots; /* as capture_slots_of returns them */
    __u64 check;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, ROLE_CACHE_SLOTS);
    __type(key, __u32);
    __type(value, struct role_slot);
} role_cache SEC(".maps");

/* Role spaces begun by exec: LOTUS_SPACE_EXEC_BASE + n. */
volatile __u32 space_seq = 0;

static __always_inline __u64 role_slot_check(const struct role_slot *c)
{
    return (c->code ^ (c->fingerprint * 0x9e3779b97f4a7c15ull) ^ c->space ^
            ((__u64)(__u32)c->capture_slots << 32 | c->flags)) * 0xff51afd7ed558ccdull;
}

static __always_inline struct role_slot *role_slot_of(__u32 space, __u64 code)
{
    __u32 idx = (__u32)((code >> 4) ^ (code >> 14) ^ space) & (ROLE_CACHE_SLOTS - 1);
    return bpf_map_lookup_elem(&role_cache, &idx);
}

/* The slot holds the role of this code object (fingerprint fp) for process tgid of role space `space`. */
static __always_inline bool role_slot_holds(const struct role_slot *c, __u32 space, __u32 tgid, __u64 code, __u64 fp)
{
    return c->code == code && c->fingerprint == fp && (c->space == space || c->space == (tgid | LOTUS_SPACE_OWN)) &&
           c->check == role_slot_check(c);
}

/* co_qualname ^ co_filename << 1: one read when the two are near each other (always so far). */
static __always_inline __u64 code_fingerprint(__u64 code)
{
    __u64 lo = layout.code_name < layout.code_filename ? layout.code_name : layout.code_filename;
    __u64 hi = layout.code_name < layout.code_filename ? layout.code_filename : layout.code_name;
    if (hi - lo > 16)
        return read_ptr(code + layout.code_name) ^ (read_ptr(code + layout.code_filename) << 1);
    __u64 w[3] = {};
    if (code)
        bpf_probe_read_user(w, sizeof(w), (void *)(code + lo));
    __u64 at_hi = hi - lo == 8 ? w[1] : w[2];
    return layout.code_name == lo ? w[0] ^ (at_hi << 1) : at_hi ^ (w[0] << 1);
}

/* The role entry of a code object (fingerprint fp) for process tgid: its space's (*key), or, when that is
 * another object at the address which another process described, the process's own (key->space becomes
 * tgid | LOTUS_SPACE_OWN). Either may be missing or hold another fingerprint: the caller checks. */
static __always_inline struct lotus_role *find_role(struct lotus_role_key *key, __u32 tgid, __u64 fp)
{
    struct lotus_role *r = bpf_map_lookup_elem(&lotus_roles, key);
    if (!r || r->fingerprint == fp || r->describer == tgid)
        return r;
    key->space = tgid | LOTUS_SPACE_OWN;
    return bpf_map_lookup_elem(&lotus_roles, key);
}

static __always_inline __s32 packed_slots(const struct lotus_role *r)
{
    return r->flags & LOTUS_ROLE_CAPTURE ? r->capture_slot[0] | (r->capture_slot[1] << 8) : -1;
}

/* Set in what role_of and type_flags return when the description they went by is the process's own (its bit
 * in lotus_py_entry.own); never in a stored role. */
#define FROM_OWN (1u << 31)

/* Role flags of a code object for process tgid of role space `space`, with FROM_OWN when they are the process's
 * own description's. On first sight: remember it and describe it to user space. Global (not static) so the
 * verifier checks it once, not at every call site. */
__noinline __u32 role_of(__u32 space, __u32 tgid, __u64 code)
{
    if (!code)
        return 0;
    __u64 fp = code_fingerprint(code);
    struct role_slot *c = role_slot_of(space, code);
    if (c && role_slot_holds(c, space, tgid, code, fp))
        return c->flags | (c->space != space ? FROM_OWN : 0);
    struct lotus_role_key key = {.space = space, .ptr = code};
    struct lotus_role *r = find_role(&key, tgid, fp);
    __u32 own = key.space != space ? FROM_OWN : 0;
    if (r && r->fingerprint == fp) {
        __u32 flags = r->flags;
        if (c && (flags & LOTUS_ROLE_CLASSIFIED)) {
            c->code = code;
            c->fingerprint = fp;
            c->space = key.space;
            c->flags = flags;
            c->capture_slots = packed_slots(r);
            c->check = role_slot_check(c);
        }
        return flags | own;
    }
    /* New to the space (or to this process, or this process's object at the address changed). */
    struct lotus_role fresh = {.fingerprint = fp, .describer = tgid};
    bpf_map_update_elem(&lotus_roles, &key, &fresh, BPF_ANY);
    struct lotus_code_info *e = reserve(sizeof(*e));
    if (!e) {
        /* Forget it again so that a later sighting retries the description. */
        bpf_map_delete_elem(&lotus_roles, &key);
        return 0;
    }
    fill_header(&e->h, LOTUS_EV_CODE);
    e->code = code;
    e->firstlineno = 0;
    bpf_probe_read_user(&e->firstlineno, sizeof(e->firstlineno), (void *)(code + layout.code_firstlineno));
    e->own_space = key.space != space;
    e->_pad = 0;
    e->name[0] = 0;
    e->file[0] = 0;
    e->name_kind = read_unicode(read_ptr(code + layout.code_name), e->name, sizeof(e->name));
    e->file_kind = read_unicode(read_ptr(code + layout.code_filename), e->file, sizeof(e->file));
    /* Rare, and user space must classify it soon (roles decide what later calls emit): wake it now. */
    bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
    return own;
}

/* The locals a code object's role asks for, packed (slot0 | slot1 << 8, and 1 << 16 when the role is the
 * process's own description's), or -1 for none. */
#define SLOTS_OWN (1 << 16)
__noinline __s32 capture_slots_of(__u32 space, __u32 tgid, __u64 code)
{
    __u64 fp = code_fingerprint(code);
    struct role_slot *c = role_slot_of(space, code);
    if (c && role_slot_holds(c, space, tgid, code, fp))
        return c->capture_slots < 0 ? -1 : c->capture_slots | (c->space != space ? SLOTS_OWN : 0);
    struct lotus_role_key key = {.space = space, .ptr = code};
    struct lotus_role *r = find_role(&key, tgid, fp);
    __s32 slots = r && r->fingerprint == fp ? packed_slots(r) : -1;
    return slots < 0 ? -1 : slots | (key.space != space ? SLOTS_OWN : 0);
}

/* The type's entry for process tgid of role space `space` (fingerprint fp: its tp_name pointer): its space's,
 * or, where the space's describes another type at that address, the process's own (key->space becomes
 * tgid | LOTUS_SPACE_OWN). NULL when neither describes this type. */
static __always_inline struct lotus_type_role *find_type(struct lotus_role_key *key, __u32 tgid, __u64 fp)
{
    struct lotus_type_role *r = bpf_map_lookup_elem(&lotus_types, key);
    if (!r || r->fingerprint == fp || r->describer == tgid)
        return r && r->fingerprint == fp ? r : 0; /* (the caller describes it under key) */
    key->space = tgid | LOTUS_SPACE_OWN;
    r = bpf_map_lookup_elem(&lotus_types, key);
    return r && r->fingerprint == fp ? r : 0;
}

/* What user space said of a type (LOTUS_TYPE_*), describing it first if this process's space (or the process)
 * has not: its tp_name, and those of its first LOTUS_BASES ancestors (tp_base), for a subclass of Compose is a
 * pipeline. 0 while it is not classified. */
__noinline __u32 type_flags(__u32 space, __u32 tgid, __u64 type)
{
    if (!type)
        return 0;
    __u64 name = read_ptr(type + layout.type_name);
    if (!name)
        return 0;
    struct lotus_role_key key = {.space = space, .ptr = type};
    struct lotus_type_role *r = find_type(&key, tgid, name);
    __u32 own = key.space != space ? FROM_OWN : 0;
    if (r)
        return r->flags | own;
    /* New to the space, or to this process: key says which. */
    struct lotus_type_info *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_TYPE);
    e->type = type;
    e->own_space = key.space != space;
    __builtin_memset(e->_pad, 0, sizeof(e->_pad));
    if (bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)name) <= 1) {
        bpf_ringbuf_discard(e, 0);
        uncount_submitted(); /* the count is of records delivered */
        return 0;
    }
    __u64 base = type;
    for (int i = 0; i < LOTUS_BASES; i++) {
        e->bases[i][0] = 0;
        base = base ? read_ptr(base + layout.type_base) : 0;
        __u64 bname = base ? read_ptr(base + layout.type_name) : 0;
        if (bname && bpf_probe_read_user_str(e->bases[i], LOTUS_BASE_LEN, (void *)bname) < 0)
            e->bases[i][0] = 0;
    }
    struct lotus_type_role fresh = {.flags = LOTUS_TYPE_DESCRIBED, .describer = tgid, .fingerprint = name};
    bpf_map_update_elem(&lotus_types, &key, &fresh, BPF_ANY);
    bpf_ringbuf_submit(e, submit_flags());
    return own;
}

/* Whether obj (a frame's self) may be of a pipeline class: yes when its type is one, or not classified yet
 * (user space decides then). A cell (self captured by a nested scope, 3.11+ once the frame ran) is followed.
 * *type: obj's type. */
static __noinline bool may_be_pipeline(__u32 space, __u32 tgid, __u64 obj, __u64 *type)
{
    __u64 t = obj ? read_ptr(obj + layout.object_type) : 0;
    __u32 f = type_flags(space, tgid, t);
    if ((f & LOTUS_TYPE_CELL) && layout.cell_ref >= 0) {
        obj = read_ptr(obj + layout.cell_ref);
        t = obj ? read_ptr(obj + layout.object_type) : 0;
        f = type_flags(space, tgid, t);
    }
    *type = t; /* (with bit 0 set when its description is the process's own: types are 8-byte aligned) */
    if (t && (f & FROM_OWN))
        *type |= 1;
    return t && (!(f & LOTUS_TYPE_CLASSIFIED) || (f & LOTUS_TYPE_PIPELINE));
}

/* Perf-event counters (--counters): per-CPU events, entry k * nr_cpus + cpu of lotus_perf. A thread's
 * share is what they count while it is on a CPU: read at its every switch in and out, like perf stat's
 * --bpf-counters, so preemption and migration do not pollute it. */
const volatile __u32 nr_perf = 0;
const volatile __u32 nr_cpus = 1;

struct {
    __uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
    __uint(key_size, sizeof(__u32));
    __uint(value_size, sizeof(__u32));
    __uint(max_entries, 1); /* set by user space: LOTUS_MAX_PERF * nr_cpus */
} lotus_perf SEC(".maps");

/* On-CPU time and perf counters per traced thread: accumulated at each switch out, plus the running slice. */
struct oncpu {
    __u64 acc_ns;
    __u64 in_ns; /* when it was last switched in; 0 while off CPU */
    __u64 perf_acc[LOTUS_MAX_PERF];
    struct bpf_perf_event_value perf_in[LOTUS_MAX_PERF]; /* readings at switch in */
};

/* Per traced thread, in task-local storage: found from the task in a few loads (a hash lookup by tid missed
 * the caches at every call) and freed with the task. Exists only for threads of traced processes, so its
 * presence is the "traced" test of the hot paths; exec deletes it (a new image, a new role space). */
struct thread_state {
    __u32 space; /* its process's role space */
    __u32 depth; /* evaluation depth, and which of the 64 innermost entries were emitted, so that exactly the
                  * emitted entries get a return event (the kernel keeps at most 64 pending uretprobes) */
    __u64 emitted;
    __u64 lost; /* entries lost to a full ring buffer: their returns count as lost too, so that the lost count
                 * is every record the trace misses */
    __u64 returned; /* emitted entries whose return carries the object returned (an address in every return
                     * would cost ~10 bytes a sample in the record file) */
    __u64 capture_frame; /* the frame whose locals the last walk reported, its code and its role's slots */
    __u64 capture_code;
    __s32 capture_slots;
    __u32 _pad;
    __u64 int_types[2]; /* static types with Py_TPFLAGS_LONG_SUBCLASS met (int, bool): see int_value */
    struct oncpu cpu;
};

struct {
    __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, int);
    __type(value, struct thread_state);
} lotus_threads SEC(".maps");

/* The counter's count since the reading `in`, scaled up when the event was multiplexed. */
static __always_inline __u64 perf_since(__u32 k, const struct bpf_perf_event_value *in)
{
    struct bpf_perf_event_value now = {};
    __u64 idx = (__u64)k * nr_cpus + bpf_get_smp_processor_id();
    if (bpf_perf_event_read_value(&lotus_perf, idx, &now, sizeof(now)) || now.counter < in->counter)
        return 0;
    __u64 d = now.counter - in->counter;
    __u64 run = now.running - in->running, en = now.enabled - in->enabled;
    return run && en > run ? d * en / run : d;
}

static __always_inline void perf_mark(struct oncpu *c)
{
    for (__u32 k = 0; k < LOTUS_MAX_PERF && k < nr_perf; k++) {
        __u64 idx = (__u64)k * nr_cpus + bpf_get_smp_processor_id();
        if (bpf_perf_event_read_value(&lotus_perf, idx, &c->perf_in[k], sizeof(c->perf_in[k])))
            __builtin_memset(&c->perf_in[k], 0, sizeof(c->perf_in[k]));
    }
}

/* A traced thread's state (created on its first probe hit, see traced_thread) accounts from then on. */
SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
    __u64 now = bpf_ktime_get_ns();
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, prev, 0, 0);
    if (ts && ts->cpu.in_ns) {
        struct oncpu *c = &ts->cpu;
        c->acc_ns += now - c->in_ns;
        c->in_ns = 0;
        for (__u32 k = 0; k < LOTUS_MAX_PERF && k < nr_perf; k++)
            c->perf_acc[k] += perf_since(k, &c->perf_in[k]);
    }
    ts = bpf_task_storage_get(&lotus_threads, next, 0, 0);
    if (ts) {
        ts->cpu.in_ns = now;
        perf_mark(&ts->cpu);
    }
    return 0;
}

/* The current thread's state if its process is traced, else 0. First sight since tracing began: it is
 * running now, so its on-CPU accounting starts now. */
static __always_inline struct thread_state *traced_thread(void)
{
    struct task_struct *t = bpf_get_current_task_btf();
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, t, 0, 0);
    if (ts)
        return ts;
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct lotus_traced_proc *proc = bpf_map_lookup_elem(&lotus_traced, &tgid);
    if (!proc)
        return 0;
    ts = bpf_task_storage_get(&lotus_threads, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!ts)
        return 0;
    ts->space = proc->space;
    ts->cpu.in_ns = bpf_ktime_get_ns();
    perf_mark(&ts->cpu);
    return ts;
}

/* Counters of the current (running) thread. now: the record's own timestamp, so that for a thread that ran
 * all along cpu_ns - ts is exactly what it was at its previous record (the record file codes the change of
 * that difference, 0 when it ran throughout). */
static __always_inline void read_counters(struct lotus_counters *out, struct thread_state *ts, __u64 now)
{
    struct oncpu *c = &ts->cpu;
    out->cpu_ns = c->acc_ns + (c->in_ns && now > c->in_ns ? now - c->in_ns : 0);
    for (__u32 k = 0; k < LOTUS_MAX_PERF; k++)
        out->perf[k] = 0;
    for (__u32 k = 0; k < LOTUS_MAX_PERF && k < nr_perf; k++)
        out->perf[k] = c->perf_acc[k] + (c->in_ns ? perf_since(k, &c->perf_in[k]) : 0);
    struct task_struct *t = bpf_get_current_task_btf();
    out->min_flt = t->min_flt;
    out->maj_flt = t->maj_flt;
    out->nvcsw = t->nvcsw;
    out->nivcsw = t->nivcsw;
}

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
 * all (each read costs ~80 ns here: most of what a call the rules skip costs). */
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
} span_scratch SEC(".maps");

/* Heads of frame `caller` and of `frame`, which lies above it; false where that is not one read. */
static __noinline bool read_span(__u64 caller, __u64 frame, struct frame_head *ch, struct frame_head *fh)
{
    __s32 nl = head_len_with_locals();
    __u64 gap = frame - caller;
    __u32 zero = 0;
    struct span *sp = bpf_map_lookup_elem(&span_scratch, &zero);
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
        if (!read_head(f, h))
            return 0;
    }
    return f;
}

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
} frames_zero SEC(".maps");

static __always_inline struct thread_frames *frames_of(__u32 tid)
{
    struct thread_frames *tf = bpf_map_lookup_elem(&lotus_frames, &tid);
    if (tf)
        return tf;
    __u32 zero = 0;
    struct thread_frames *z = bpf_map_lookup_elem(&frames_zero, &zero);
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
    __u32 cflags = caller ? role_of(space, tgid, caller_code) : 0;

    __u64 self_obj = frame_self(fhp, frame);
    __u64 self_type = 0, caller_type = 0;
    bool self_pipeline = (flags & LOTUS_ROLE_SELF_PIPELINE) && may_be_pipeline(space, tgid, self_obj, &self_type);
    /* A call made from a comprehension or generator expression is judged by the frame the scope belongs to. */
    struct frame_head outer;
    const struct frame_head *jh = ch;
    __u64 judge = caller;
    __u32 jflags = cflags;
    if ((cflags & LOTUS_ROLE_SCOPE) && read_head(ch->previous, &outer)) {
        jh = &outer;
        judge = ch->previous;
        jflags = role_of(space, tgid, outer.code);
    }
    bool caller_pipeline = (jflags & LOTUS_ROLE_PIPELINE) ||
                           ((jflags & LOTUS_ROLE_SELF_PIPELINE) &&
                            may_be_pipeline(space, tgid, frame_self(jh, judge), &caller_type));
    bool wanted = !(flags & LOTUS_ROLE_SKIP) || self_pipeline || caller_pipeline ||
                  !(cflags & LOTUS_ROLE_CLASSIFIED) || (cflags & LOTUS_ROLE_EMIT_CALLEES);
    if (!wanted)
        return 0;

    /* Built in a per-CPU scratch slot and copied out, so no ring-buffer reference is held while walking. */
    __u32 zero = 0;
    struct lotus_py_entry *e = bpf_map_lookup_elem(&entry_scratch, &zero);
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
     * index); the others, ops above all, only 2 callers without arguments: fewer reads per call. */
    bool deep = !(flags & LOTUS_ROLE_CLASSIFIED) || (flags & (LOTUS_ROLE_PIPELINE | LOTUS_ROLE_WALK)) ||
                self_pipeline || !(cflags & LOTUS_ROLE_CLASSIFIED) || (cflags & LOTUS_ROLE_EMIT_CALLEES);
    __u32 chain_max = deep ? LOTUS_CHAIN_LEN : 2;
    __u64 f = caller;
    struct frame_head h = *ch;
    for (int i = 0; i < LOTUS_CHAIN_LEN && i < chain_max; i++) {
        if (i > 0 && read_head(f, &h) && h.shim) {
            f = h.previous;
            read_head(f, &h);
        }
        if (!f)
            break;
        __u64 c = h.code;
        __u32 role = i == 0 ? cflags : role_of(space, tgid, c);
        e->chain_code[i] = c;
        if (role & FROM_OWN)
            e->own |= LOTUS_OWN_CHAIN(i);
        /* Only a __getitem__'s first argument is wanted (or one that may turn out to be a __getitem__'s). */
        bool arg1 = deep && (!(role & LOTUS_ROLE_CLASSIFIED) || (role & LOTUS_ROLE_ARG1));
        e->chain_arg1[i] = arg1 ? int_value(ts, head_local(&h, f, 1)) : LOTUS_NO_VALUE;
        e->chain_len = i + 1;
        f = h.previous;
    }
    /* Pipelines, callees of EMIT_CALLEES code and code not classified yet, or called by code not classified
     * yet, look further up for locals such as a DataLoader worker's id and batch index. (A spawned worker's
     * first Queue.put is seen first as the caller of an already classified Condition.__enter__: without the
     * walk there, that batch's hand-over had no index and the batch was lost.) */
    /* The frame found last time (a worker's _worker_loop, there for the worker's life) is read directly while
     * it still runs the same code: a walk costs ~10 us of reads and lookups. */
    __u64 cf = ts->capture_frame;
    __s32 cslots = -1;
    if (deep && cf && frame_code(cf) == ts->capture_code)
        cslots = ts->capture_slots; /* the frame holds its code object: still the one classified */
    if (cslots >= 0) {
        capture_locals(ts, e, ts->capture_code, cf, cslots);
    } else if (deep) {
        ts->capture_frame = 0;
        f = caller;
        for (int i = 0; i < LOTUS_WALK_MAX && f; i++) {
            read_head(f, &h);
            __u64 c = h.code;
            if (i >= LOTUS_CHAIN_LEN)
                role_of(space, tgid, c);
            __s32 slots = capture_slots_of(space, tgid, c);
            if (slots >= 0 && capture_locals(ts, e, c, f, slots) && !ts->capture_frame) {
                ts->capture_frame = f;
                ts->capture_code = c;
                ts->capture_slots = slots;
            }
            f = h.previous;
        }
    }
    if (bpf_ringbuf_output(&events, e, sizeof(*e), submit_flags()) == 0) {
        count(1);
        ts->emitted |= bit;
        if (!(flags & LOTUS_ROLE_CLASSIFIED) || (flags & LOTUS_ROLE_RETURNED))
            ts->returned |= bit;
        else
            ts->returned &= ~bit;
    } else {
        count(0);
        ts->lost |= bit;
    }
    return 1;
}

/* Entry into the evaluator. `session`: attached as a uprobe session (Linux 6.13+), where the return is seen
 * only if this returns 0; then depths count only the calls whose return is wanted (those emitted or lost;
 * all of them for --all-calls), and a skipped call costs no return probe: about half of its cost. Otherwise
 * (a plain uprobe and uretprobe pair) every call returns through py_return and is counted. Returns the
 * session's verdict: 0 to see the return, 1 not to. */
static __always_inline int enter(void *tstate, void *frame_arg, bool session)
{
    struct thread_state *ts = traced_thread();
    if (!ts)
        return 1;
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32, tid = (__u32)id;
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
    if (depth >= 64)
        return 1; /* the kernel installs no return probe this deep: this call never returns for us */
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

SEC("uprobe")
int BPF_KPROBE(py_entry, void *tstate, void *frame_arg)
{
    enter(tstate, frame_arg, false);
    return 0;
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
        count(0);
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

SEC("uretprobe")
int BPF_KRETPROBE(py_return)
{
    return leave(ctx);
}

/* The evaluator's entry and return as one uprobe session (user space sets its attach type and attaches it
 * when the kernel has sessions; it is not loaded otherwise). */
extern bool bpf_session_is_return(void) __ksym __weak;

SEC("uprobe")
int BPF_KPROBE(py_call, void *tstate, void *frame_arg)
{
    if (bpf_session_is_return())
        return leave(ctx);
    return enter(tstate, frame_arg, true);
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

/* --all-calls (3.11): the RESUME / RESUME_QUICK handlers, run first by every frame; inlined calls only (frames
 * entered from C have is_entry set and are the uprobe above's). cframe->current_frame is the new frame here. */
SEC("uprobe")
int BPF_KPROBE(py_resume)
{
    struct inlined in = {};
    struct frame_head h, ch;
    __u64 frame = inlined_frame(&in, &h); /* its head: the current frame is the new one here */
    struct thread_frames *tf = in.tf;
    struct thread_state *ts = in.ts;
    if (!frame || !tf || !ts)
        return 0;
    __u64 caller = h.previous;
    read_head(caller, &ch);
    __u32 depth = caller ? depth_above(tf, ts->depth, caller) : 0;
    if (!depth)
        depth = ts->depth; /* a caller entered before tracing began: this frame is the innermost */
    if (depth >= 64)
        return 0;
    ts->depth = depth + 1;
    ts->emitted &= ~(~0ull << depth);
    ts->lost &= ~(~0ull << depth);
    set_frame(tf, depth, frame);
    tf->c_mask &= ~(~0ull << depth);
    emit_entry(in.space, in.tgid, ts, depth, frame, &h, caller, &ch);
    return 0;
}

SEC("uprobe")
int BPF_KPROBE(py_retval)
{
    struct inlined in = {};
    struct frame_head h;
    __u64 frame = inlined_frame(&in, &h);
    struct thread_frames *tf = in.tf;
    struct thread_state *ts = in.ts;
    if (!frame || !tf || !ts)
        return 0; /* not inlined: a frame entered from C returns through the uretprobe */
    __u32 d = depth_above(tf, ts->depth, frame);
    if (!d)
        return 0;
    ts->depth = d - 1;
    tf->c_mask &= ~(~0ull << (d - 1));
    return emit_return(ts, d - 1, 1); /* an inlined frame's return value is not at hand: 1, "not NULL" */
}

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

SEC("uprobe")
int BPF_KPROBE(native_entry) { return native_event(ctx, LOTUS_EV_NATIVE_ENTRY); }

SEC("uretprobe")
int BPF_KRETPROBE(native_return) { return native_event(ctx, LOTUS_EV_NATIVE_RETURN); }

/* Sampling map: a per-CPU sampling event (cycles, or cpu-clock without a PMU) interrupts whatever runs; for
 * a traced thread, record its user stack. User space attributes it to the op open on that thread then. */
SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
    __u64 id = bpf_get_current_pid_tgid();
    __u32 tgid = id >> 32;
    if (!tgid || !bpf_map_lookup_elem(&lotus_traced, &tgid))
        return 0;
    struct lotus_sample *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_SAMPLE);
    /* Kernel text lives in the upper half of the address space (a full 8-byte context read: the verifier
     * refuses narrower ones of regs). */
    __u64 ip = ctx->regs.ip;
    e->in_kernel = ip >= 0xffff800000000000ull;
    long n = bpf_get_stack(ctx, e->ip, sizeof(e->ip), BPF_F_USER_STACK);
    e->nr_ips = n > 0 ? (__u64)n / 8 : 0;
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

/* multiprocessing sends an object as a 4-byte big-endian length and its pickle (in one write when it is small);
 * ForkingPickler's protocol 4 and 5 pickles begin with PROTO and a FRAME opcode: \x80 4|5 \x95. Where the pickle
 * starts in a traced thread's buffer (0, or, when `header` may precede it, 4), or -1. */
static __always_inline int traced_pickle(__u64 buf, bool header)
{
    /* Traced threads only, found from the task (cheaper than a lookup for every read and write on the machine). */
    if (!bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0))
        return -1;
    __u8 b[8] = {};
    if (bpf_probe_read_user(b, sizeof(b), (void *)buf))
        return -1;
    if (b[0] == 0x80 && (b[1] == 4 || b[1] == 5) && b[2] == 0x95)
        return 0;
    if (header && b[4] == 0x80 && (b[5] == 4 || b[5] == 5) && b[6] == 0x95)
        return 4;
    return -1;
}

/* The pickle at buf + at (n bytes on the user side), if fd is a pipe: a DataLoader's queues are pipes on Linux
 * (multiprocessing's Pipe(duplex=False)); sockets carry other conversations (torch's file-descriptor sharing
 * answers two pickles per shared tensor), which would only cost records. */
#define LOTUS_S_IFMT 0170000
#define LOTUS_S_IFIFO 0010000
static __always_inline void emit_msg(int fd, __u64 buf, long n, int at, __u8 dir)
{
    struct task_struct *t = bpf_get_current_task_btf();
    struct file **fds = BPF_CORE_READ(t, files, fdt, fd);
    struct file *f = 0;
    if (fds && fd >= 0 && fd < 65536)
        bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
    if (!f)
        return;
    __u16 mode = BPF_CORE_READ(f, f_inode, i_mode);
    if ((mode & LOTUS_S_IFMT) != LOTUS_S_IFIFO)
        return;
    struct lotus_msg *e = reserve(sizeof(*e));
    if (!e)
        return;
    fill_header(&e->h, LOTUS_EV_MSG);
    e->fd = fd;
    e->len = n;
    e->dir = dir;
    e->_pad = 0;
    e->file = BPF_CORE_READ(f, f_inode, i_ino);
    e->mode = mode;
    long avail = n - at;
    __u32 k = avail > LOTUS_MSG_BYTES ? LOTUS_MSG_BYTES : (avail > 0 ? avail : 0);
    e->nbytes = k;
    if (k && bpf_probe_read_user(e->data, k, (void *)(buf + at)))
        e->nbytes = 0;
    bpf_ringbuf_submit(e, submit_flags());
}

/* A read or write of at least this many bytes may carry a message: 11 bytes of PROTO + FRAME, then an opcode. */
#define MSG_MIN 12

SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long nr)
{
    if (nr == 1 /* write */) {
        long n = regs->dx;
        int at = n >= MSG_MIN ? traced_pickle(regs->si, true) : -1;
        if (at >= 0 && n > at + MSG_MIN - 1)
            emit_msg(regs->di, regs->si, n, at, LOTUS_MSG_OUT);
        return 0;
    }
    if (nr == 110 /* getppid */) {
        __u64 id = bpf_get_current_pid_tgid();
        if (id >> 32 != (__u32)id || !bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0))
            return 0;
        struct lotus_event_header *e = reserve(sizeof(*e));
        if (e) {
            fill_header(e, LOTUS_EV_GETPPID);
            bpf_ringbuf_submit(e, submit_flags());
        }
        return 0;
    }
    if (nr != 257 /* openat */)
        return 0;
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (!bpf_map_lookup_elem(&lotus_traced, &tgid))
        return 0;
    struct lotus_open *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_OPEN);
    const char *path = (const char *)regs->si;
    long n = bpf_probe_read_user_str(e->path, sizeof(e->path), path);
    if (n < 0)
        e->path[0] = 0;
    for (int i = 0; i + 3 < LOTUS_PATH_LEN && i + 3 < n; i++) {
        if (e->path[i] == '.' && e->path[i + 1] == 's' && e->path[i + 2] == 'o') {
            bpf_ringbuf_output(&lib_opens, e, sizeof(*e), BPF_RB_FORCE_WAKEUP);
            break;
        }
    }
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
    /* Every syscall exit of every process comes here (and each probed return's uretprobe syscall): the number
     * first, a direct load from the trusted regs, before anything else. A read's buffer holds its bytes now;
     * the syscall's arguments are still in regs. */
    long nr = regs->orig_ax;
    if (nr != 0 /* read */ || ret < MSG_MIN)
        return 0;
    /* multiprocessing reads the length header and the pickle apart: the pickle is at the buffer's start */
    if (traced_pickle(regs->si, false) == 0)
        emit_msg(regs->di, regs->si, ret, 0, LOTUS_MSG_IN);
    return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
    __u32 ptgid = BPF_CORE_READ(parent, tgid);
    __u32 ctgid = BPF_CORE_READ(child, tgid);
    if (ptgid == ctgid) /* a new thread, already covered by its process */
        return 0;
    struct lotus_traced_proc *p = bpf_map_lookup_elem(&lotus_traced, &ptgid);
    if (!p)
        return 0;
    struct lotus_traced_proc c = *p; /* same memory image: the parent's role space */
    bpf_map_update_elem(&lotus_traced, &ctgid, &c, BPF_ANY);
    struct lotus_proc_event *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_FORK);
    e->h.tgid = ctgid;
    e->h.tid = BPF_CORE_READ(child, pid);
    e->parent_tgid = ptgid;
    e->space = c.space;
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *task, pid_t old_pid, struct linux_binprm *bprm)
{
    __u32 tgid = BPF_CORE_READ(task, tgid);
    struct lotus_traced_proc *p = bpf_map_lookup_elem(&lotus_traced, &tgid);
    if (!p)
        return 0;
    /* A new image: none of the old space's objects are there. (A lost EXEC record would leave user space
     * unaware of the new space: it then sets no roles there, and code keeps being emitted as unclassified.) */
    p->space = LOTUS_SPACE_EXEC_BASE + __sync_fetch_and_add(&space_seq, 1);
    bpf_task_storage_delete(&lotus_threads, task); /* its next call starts afresh in the new space */
    struct lotus_proc_event *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_EXEC);
    e->parent_tgid = 0;
    e->space = p->space;
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *task, bool group_dead)
{
    __u32 tgid = BPF_CORE_READ(task, tgid);
    if (!group_dead || !bpf_map_lookup_elem(&lotus_traced, &tgid))
        return 0;
    bpf_map_delete_elem(&lotus_traced, &tgid);
    struct lotus_proc_event *e = reserve(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_EXIT);
    e->h.tgid = tgid;
    e->parent_tgid = BPF_CORE_READ(task, exit_code);
    e->space = 0;
    bpf_ringbuf_submit(e, submit_flags());
    return 0;
}
