/* SPDX-License-Identifier: GPL-2.0 */
/* Roles of code objects and types, as user space classified them, per role space; the per-CPU role cache; and
 * whether an object may be of a pipeline class. */
#ifndef __LOTUS_ROLES_BPF_H
#define __LOTUS_ROLES_BPF_H

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

/* User space's classifications (lotus_class_key). */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 131072);
    __type(key, struct lotus_class_key);
    __type(value, struct lotus_role);
} lotus_code_classes SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 65536);
    __type(key, struct lotus_class_key);
    __type(value, struct lotus_type_role);
} lotus_type_classes SEC(".maps");

/* Classified roles looked up recently on this CPU: a small direct-mapped copy of lotus_code_classes. Nearly every
 * call into the evaluator asks for two roles; in the large LRU hash each lookup missed the caches (most of
 * what a skipped call cost). User space classifies a code object once (a new object at a reused address has
 * another fingerprint) and a role space is never reused (exec starts a new one), so a classified role never
 * changes; a copy is still dropped when another object is described (role_epoch). `check` catches an entry torn by a program that preempted another one filling the same slot. */
#define ROLE_CACHE_SLOTS 1024
struct role_slot {
    __u64 code;
    __u64 fingerprint;
    __u32 space;
    __u32 flags;
    __s32 capture_slots; /* as capture_slots_of returns them */
    __u64 epoch; /* role_epoch when it was filled */
    __u64 check;
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, ROLE_CACHE_SLOTS);
    __type(key, __u32);
    __type(value, struct role_slot);
} lotus_role_cache SEC(".maps");

/* Role spaces begun by exec: LOTUS_SPACE_EXEC_BASE + n. */
volatile __u32 space_seq = 0;

/* Moved by every new description of a code object: each CPU's copies made before are stale. A copy is checked
 * against the address and fingerprint, but user space knows an address by its latest description: when another
 * object took the address and was described, and the first object (same fingerprint) came back there, a copy
 * of its role made the calls of the returning object go out as those of the one described last (a --span
 * function's calls counted as another function's: tests/integration/workloads/reused_code.py). Past the start,
 * new code objects are rare. */
volatile __u64 role_epoch = 0;

static __always_inline __u64 role_slot_check(const struct role_slot *c)
{
    return (c->code ^ (c->fingerprint * 0x9e3779b97f4a7c15ull) ^ c->space ^ (c->epoch << 17) ^
            ((__u64)(__u32)c->capture_slots << 32 | c->flags)) * 0xff51afd7ed558ccdull;
}

static __always_inline struct role_slot *role_slot_of(__u32 space, __u64 code)
{
    __u32 idx = (__u32)((code >> 4) ^ (code >> 14) ^ space) & (ROLE_CACHE_SLOTS - 1);
    return bpf_map_lookup_elem(&lotus_role_cache, &idx);
}

/* The slot holds the role of this code object (fingerprint fp) for process tgid of role space `space`. */
static __always_inline bool role_slot_holds(const struct role_slot *c, __u32 space, __u32 tgid, __u64 code, __u64 fp)
{
    return c->code == code && c->fingerprint == fp && (c->space == space || c->space == (tgid | LOTUS_SPACE_OWN)) &&
           c->epoch == role_epoch && c->check == role_slot_check(c);
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

/* User space's classification of the code object described under *key with fingerprint fp; NULL until then. */
static __always_inline struct lotus_role *code_class(const struct lotus_role_key *key, __u64 fp)
{
    struct lotus_class_key k = {.space = key->space, .ptr = key->ptr, .fingerprint = fp};
    return bpf_map_lookup_elem(&lotus_code_classes, &k);
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
    if (code < LOTUS_SLOTS) /* a slot entry's code stands for the slot; 0: none */
        return lotus_slot_role(code);
    __u64 fp = code_fingerprint(code);
    struct role_slot *c = role_slot_of(space, code);
    if (c && role_slot_holds(c, space, tgid, code, fp))
        return c->flags | (c->space != space ? FROM_OWN : 0);
    __u64 epoch = role_epoch; /* (before the lookup: a description made meanwhile makes this copy stale) */
    struct lotus_role_key key = {.space = space, .ptr = code};
    struct lotus_role *r = find_role(&key, tgid, fp);
    __u32 own = key.space != space ? FROM_OWN : 0;
    if (r && r->fingerprint == fp) {
        struct lotus_role *cl = code_class(&key, fp);
        __u32 flags = cl ? cl->flags : LOTUS_ROLE_UNCLASSIFIED;
        if (c && cl && (flags & LOTUS_ROLE_CLASSIFIED)) {
            c->code = code;
            c->fingerprint = fp;
            c->space = key.space;
            c->flags = flags;
            c->capture_slots = packed_slots(cl);
            c->epoch = epoch;
            c->check = role_slot_check(c);
        }
        return flags | own;
    }
    /* New to the space (or to this process, or this process's object at the address changed). */
    struct lotus_role fresh = {.fingerprint = fp, .describer = tgid};
    bpf_map_update_elem(&lotus_roles, &key, &fresh, BPF_ANY);
    __sync_fetch_and_add(&role_epoch, 1);
    struct lotus_code_info *e = reserve_description(sizeof(*e));
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
    e->fingerprint = fp;
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
    struct lotus_role *cl = r && r->fingerprint == fp ? code_class(&key, fp) : 0;
    __s32 slots = cl ? packed_slots(cl) : -1;
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
    /* BPF's reads cannot fault a page in, and a forked process (a DataLoader worker) starts without the page
     * table entries of the binary's file-backed data: a static type's tp_name (and the pointer to it) may not
     * be readable until the process itself touches them. The name pointer is then 0 here: the fingerprint of a
     * description made without it, replaced by the pointer's once it can be read. */
    __u64 name = read_ptr(type + layout.type_name);
    struct lotus_role_key key = {.space = space, .ptr = type};
    struct lotus_type_role *r = find_type(&key, tgid, name);
    __u32 own = key.space != space ? FROM_OWN : 0;
    if (r) {
        struct lotus_class_key ck = {.space = key.space, .ptr = type, .fingerprint = name};
        struct lotus_type_role *cl = bpf_map_lookup_elem(&lotus_type_classes, &ck);
        return (cl ? cl->flags : r->flags) | own;
    }
    /* New to the space, or to this process: key says which. */
    struct lotus_type_info *e = reserve_description(sizeof(*e));
    if (!e)
        return 0;
    fill_header(&e->h, LOTUS_EV_TYPE);
    e->type = type;
    e->own_space = key.space != space;
    __builtin_memset(e->_pad, 0, sizeof(e->_pad));
    /* A name that cannot be read goes out empty, marked for user space to read (capture/descriptions.h).
     * Discarded and retried, it cost a failed read and a reservation at every call (of a Pipeline whose self
     * is in a cell: the `cell` type's name, in a forked python3.11; docs/performance.md, "What a BPF run costs
     * here"). */
    e->unread = 0;
    if (!name || bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)name) <= 1) {
        e->name[0] = 0;
        e->unread = 1;
    }
    __u64 base = type;
    bool known = true; /* the chain's links so far were read */
    for (int i = 0; i < LOTUS_BASES; i++) {
        e->bases[i][0] = 0;
        __u64 next = 0;
        if (known && base && bpf_probe_read_user(&next, sizeof(next), (void *)(base + layout.type_base)))
            known = false;
        base = next;
        __u64 bname = known && base ? read_ptr(base + layout.type_name) : 0;
        if (!known || (base && (!bname || bpf_probe_read_user_str(e->bases[i], LOTUS_BASE_LEN, (void *)bname) <= 1))) {
            e->bases[i][0] = 0;
            e->unread |= 2 << i;
        }
    }
    e->fingerprint = name;
    struct lotus_type_role fresh = {.flags = LOTUS_TYPE_DESCRIBED, .describer = tgid, .fingerprint = name};
    bpf_map_update_elem(&lotus_types, &key, &fresh, BPF_ANY);
    /* Rare, and user space must classify it soon (and read what was left unread while the process lives). */
    bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
    return own;
}

/* type_flags of obj's type t, through this thread's memo of the objects it met: an object called again (an
 * op of a pipeline, every sample) costs the read of its type alone, not that of the type's name and the lookup
 * in the large hash (each a cache miss: docs/performance.md, "What a BPF run costs here"). A classified
 * description never changes, and a type lives as long as its instances: the same address and type pointer are
 * another type only if the object and its type were both freed and both addresses taken again since (the name
 * pointer checked otherwise can be reused too). */
static __always_inline __u32 memo_type_flags(struct thread_state *ts, __u32 space, __u32 tgid, __u64 obj, __u64 t)
{
    struct type_memo *m = &ts->types[((obj >> 4) ^ (obj >> 12)) & (TYPE_MEMO - 1)];
    if (t && m->obj == obj && m->type == t)
        return m->flags;
    __u32 f = type_flags(space, tgid, t);
    if (t && (f & LOTUS_TYPE_CLASSIFIED)) {
        m->obj = obj;
        m->type = t;
        m->flags = f;
    }
    return f;
}

/* Whether obj (a frame's self) may be of a pipeline class: yes when its type is one, or not classified yet
 * (user space decides then). A cell (self captured by a nested scope, 3.11+ once the frame ran) is followed.
 * *type: obj's type. */
static __noinline bool may_be_pipeline(struct thread_state *ts, __u32 space, __u32 tgid, __u64 obj, __u64 *type)
{
    __u64 t = obj ? read_ptr(obj + layout.object_type) : 0;
    __u32 f = memo_type_flags(ts, space, tgid, obj, t);
    if ((f & LOTUS_TYPE_CELL) && layout.cell_ref >= 0) {
        obj = read_ptr(obj + layout.cell_ref);
        t = obj ? read_ptr(obj + layout.object_type) : 0;
        f = memo_type_flags(ts, space, tgid, obj, t);
    }
    *type = t; /* (with bit 0 set when its description is the process's own: types are 8-byte aligned) */
    if (t && (f & FROM_OWN))
        *type |= 1;
    return t && (!(f & LOTUS_TYPE_CLASSIFIED) || (f & LOTUS_TYPE_PIPELINE));
}

#endif /* __LOTUS_ROLES_BPF_H */
