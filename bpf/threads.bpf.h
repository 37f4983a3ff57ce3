/* SPDX-License-Identifier: GPL-2.0 */
/* The traced set (processes) and per-thread state in task storage: on-CPU time, perf counters per thread. */
#ifndef __LOTUS_THREADS_BPF_H
#define __LOTUS_THREADS_BPF_H

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct lotus_traced_proc);
} lotus_traced SEC(".maps");

/* Perf-event counters (--counters): per-CPU events, entry k * nr_cpus + cpu of lotus_perf. A thread's
 * share is what they count while it is on a CPU: read at its every switch in and out, like perf stat's
 * --bpf-counters, so preemption and migration do not pollute it. */
const volatile __u32 nr_perf = 0;
const volatile __u32 nr_cpus = 1;
const volatile __u32 perf_src[LOTUS_MAX_PERF] = {}; /* lotus_counter_source; only perf events are read here */

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

/* An object this thread called (or judged a call by) and what its type's classified description said:
 * direct-mapped by the object's address. */
#define TYPE_MEMO 16
struct type_memo {
    __u64 obj;
    __u64 type;
    __u32 flags; /* type_flags' result, FROM_OWN included; only classified ones are kept */
    __u32 _pad;
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
                     * would cost record-file bytes every sample: docs/performance.md, "Records and record
                     * bytes per sample") */
    __u64 capture_frame; /* the frame whose locals the last walk reported, its code and its role's slots */
    __u64 capture_code;
    __s32 capture_slots;
    __u8 named;        /* 1 once its name was emitted (LOTUS_EV_THREAD) */
    __u8 tstate_noted; /* 1 once it noted its process's tstate_addr */
    __u8 adopted;      /* made before its first probed call (adopt_thread): that call starts its accounting */
    __u8 native_open;  /* probed native calls open (saturating): a sample then keeps its leaf alone (on_sample) */
    __u64 int_types[2]; /* static types with Py_TPFLAGS_LONG_SUBCLASS met (int, bool): see int_value */
    __u64 read_buf; /* a read in progress that may carry a pickle: libc's read() (libc_call), its buffer and fd;
                     * os.read (os_read_call), 1 and its fd (its bytes are in the object it returns) */
    __s32 read_fd;
    __u32 open_pending; /* 1 after an OPEN record, until its open's return (LOTUS_EV_OPEN_DONE) */
    __u64 native_sp; /* the user stack pointer at the outermost open native call's entry: a sample above it finds
                      * that call returned (its return never ran: a longjmp, links closed) and native_open stale */
    struct type_memo types[TYPE_MEMO]; /* see memo_type_flags */
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
        if (perf_src[k] != LOTUS_SRC_PERF_EVENT)
            continue;
        __u64 idx = (__u64)k * nr_cpus + bpf_get_smp_processor_id();
        if (bpf_perf_event_read_value(&lotus_perf, idx, &c->perf_in[k], sizeof(c->perf_in[k])))
            __builtin_memset(&c->perf_in[k], 0, sizeof(c->perf_in[k]));
    }
}

/* The current thread's state if its process is traced, else 0. First sight since tracing began: it is
 * running now, so its on-CPU accounting starts now. */
static __always_inline struct thread_state *traced_thread(void)
{
    struct task_struct *t = bpf_get_current_task_btf();
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, t, 0, 0);
    if (ts) {
        if (ts->adopted) { /* running now, on this CPU: its accounting starts from here */
            ts->adopted = 0;
            ts->cpu.in_ns = bpf_ktime_get_ns();
            perf_mark(&ts->cpu);
        }
        return ts;
    }
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct lotus_traced_proc *proc = bpf_map_lookup_elem(&lotus_traced, &tgid);
    if (!proc)
        return 0;
    ts = bpf_task_storage_get(&lotus_threads, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!ts) {
        count(LOTUS_FAIL_THREAD_STATE);
        return 0;
    }
    ts->space = proc->space;
    ts->cpu.in_ns = bpf_ktime_get_ns();
    perf_mark(&ts->cpu);
    return ts;
}

/* A thread's state made before its first probed call, so that the syscall programs know every thread of the
 * traced processes from its task alone (a queue's feeder thread only pickles: no probe ever meets it): a new
 * thread or process of a traced process, an exec'd one, the threads alive when tracing began (adopt_threads).
 * Its on-CPU accounting starts at that first call (traced_thread): only there is it surely running here. */
static __always_inline void adopt_thread(struct task_struct *t, __u32 space)
{
    if (bpf_task_storage_get(&lotus_threads, t, 0, 0))
        return;
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
    if (!ts)
        return; /* (made again at its first probed call, counted there if that fails too) */
    ts->space = space;
    ts->adopted = 1;
}

/* A traced thread's name: the current one's at first sight (comm given 0), or the new name of a rename. */
static __always_inline void emit_thread_name(__u32 tgid, __u32 tid, const char *comm)
{
    struct lotus_thread_name *e = reserve(sizeof(*e));
    if (!e)
        return;
    fill_header(&e->h, LOTUS_EV_THREAD);
    e->h.tgid = tgid;
    e->h.tid = tid;
    if (comm) {
        if (bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), comm) < 0)
            e->comm[0] = 0;
    } else {
        bpf_get_current_comm(e->comm, sizeof(e->comm));
    }
    bpf_ringbuf_submit(e, submit_flags());
}

/* The current thread's name, at the first call of it that a probe sees. */
static __always_inline void name_once(struct thread_state *ts, __u32 tgid, __u32 tid)
{
    if (!ts->named) {
        ts->named = 1;
        emit_thread_name(tgid, tid, 0);
    }
}

/* Counters of the current (running) thread. now: the record's own timestamp, so that for a thread that ran
 * all along cpu_ns - ts is exactly what it was at its previous record (the record file codes the change of
 * that difference, 0 when it ran throughout). */
static __always_inline void read_counters(struct lotus_counters *out, struct thread_state *ts, __u64 now)
{
    struct oncpu *c = &ts->cpu;
    out->cpu_ns = c->acc_ns + (c->in_ns && now > c->in_ns ? now - c->in_ns : 0);
    struct task_struct *t = bpf_get_current_task_btf();
    out->min_flt = t->min_flt;
    out->maj_flt = t->maj_flt;
    out->nvcsw = t->nvcsw;
    out->nivcsw = t->nivcsw;
    for (__u32 k = 0; k < LOTUS_MAX_PERF; k++)
        out->perf[k] = 0;
    for (__u32 k = 0; k < LOTUS_MAX_PERF && k < nr_perf; k++) {
        __u32 src = perf_src[k];
        if (src == LOTUS_SRC_ON_CPU_NS)
            out->perf[k] = out->cpu_ns;
        else if (src == LOTUS_SRC_FAULTS)
            out->perf[k] = out->min_flt + out->maj_flt;
        else if (src == LOTUS_SRC_SWITCHES)
            out->perf[k] = out->nvcsw + out->nivcsw;
        else
            out->perf[k] = c->perf_acc[k] + (c->in_ns ? perf_since(k, &c->perf_in[k]) : 0);
    }
}

#endif /* __LOTUS_THREADS_BPF_H */
