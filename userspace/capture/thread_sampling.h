// The native map's sampling where each traced thread carries its own event: a process outside the traced tree
// is never interrupted (one event per CPU interrupts whatever runs there, and slowed an unrelated process's
// getpid loop beside it: docs/performance.md, "Sampling interrupts"). Each event is inherited by the
// threads and processes its thread starts, so a DataLoader worker forked later is sampled from its first
// instruction without the tracer's help; the tracer opens events only on the threads alive when it attaches.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/unique_fd.h"
#include "perf_events.h"

struct bpf_program;

namespace lotus::capture {

class ThreadSampling {
public:
    // Opens `event` at freq Hz on every thread of the traced processes (BPF's lotus_traced) that has none of
    // lotus-bpf's yet, as the `unsampled` iterator lists them, again until it lists none: a thread started
    // meanwhile by a thread that had none has none either. `sampler` runs at each sample; its id must be in
    // BPF's sampler_prog_id. Throws CaptureError.
    ThreadSampling(bpf_program* sampler, bpf_program* unsampled, const CounterSpec& event, uint64_t freq);
    size_t events() const { return links_.size(); }
    // Threads left out because their perf context held more events than BPF walks (then a duplicate event
    // could not be ruled out): said on stderr.
    size_t unknown() const { return unknown_; }

private:
    std::vector<common::UniqueFd> links_; // BPF perf-event links: each holds its event (and its inherited copies)
    size_t unknown_ = 0;
};

} // namespace lotus::capture
