/* SPDX-License-Identifier: GPL-2.0 */
/* The ring buffers records go through, their loss counters, and the helpers that reserve, fill and submit
 * records. */
#ifndef __LOTUS_RING_BPF_H
#define __LOTUS_RING_BPF_H

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 16 << 20);
} lotus_events SEC(".maps");

/* Opens of shared libraries, copied here too: user space reads this ring before the busy main one, so that
 * a library a worker dlopens gets its --native probes before its functions run. */
struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 64 << 10);
} lotus_lib_opens SEC(".maps");

/* Records lost and submitted (enum lotus_counter_slot). */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, LOTUS_COUNT_SLOTS);
    __type(key, __u32);
    __type(value, __u64);
} lotus_counters SEC(".maps");

static __always_inline void count(enum lotus_counter_slot slot)
{
    __u32 idx = slot;
    __u64 *c = bpf_map_lookup_elem(&lotus_counters, &idx);
    if (c)
        __sync_fetch_and_add(c, 1);
}

/* Waking the consumer on every record costs the traced thread an irq_work (docs/performance.md, "Capture"):
 * wake it only once a batch has accumulated; it also polls on a short timeout. */
#define WAKEUP_BYTES (256 << 10)
static __always_inline __u64 submit_flags(void)
{
    return bpf_ringbuf_query(&lotus_events, BPF_RB_AVAIL_DATA) >= WAKEUP_BYTES ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/* The pointer is tested once, on each path its own: a test the compiler turns into a select (count's slot from
 * `e ? ... : ...`) and a second test by the caller made Linux 6.1's verifier follow a NULL branch that still held
 * the reservation ("Unreleased reference"). */
static __always_inline void *reserve(__u64 size)
{
    void *e = bpf_ringbuf_reserve(&lotus_events, size, 0);
    if (!e) {
        count(LOTUS_COUNT_LOST);
        return NULL;
    }
    count(LOTUS_COUNT_SUBMITTED);
    return e;
}

/* A CODE or TYPE record: one that does not fit is not counted as lost, for BPF describes the object again at its
 * next sighting (until then the entries naming it are user space's unknown code); counted, every retry while
 * the ring buffer is full counted once more (a pipeline's cell-wrapped self cost one a call: how many in a 1 s
 * stall of bench/flood.py is in docs/performance.md, "Capture"). */
static __always_inline void *reserve_description(__u64 size)
{
    void *e = bpf_ringbuf_reserve(&lotus_events, size, 0);
    if (e)
        count(LOTUS_COUNT_SUBMITTED);
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

#endif /* __LOTUS_RING_BPF_H */
