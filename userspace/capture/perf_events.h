// Perf events lotus-bpf opens itself: the counters read at op boundaries (--counters) and the sampling event
// of the native map. Names are perf's; what the machine lacks is reported, never faked.
#pragma once
#include "common/unique_fd.h"
#include <cstdint>
#include <string>
#include <vector>

namespace lotus::capture {

struct CounterSpec {
    std::string name; // perf's name: "cycles", "task-clock"...
    uint32_t type = 0; // PERF_TYPE_* (a perf event's)
    uint64_t config = 0;
    bool hardware = false;
    uint32_t source = 0; // lotus_counter_source: a perf event (type, config), or the thread's own accounting
};

// Known counter names, for --counters. Throws std::invalid_argument naming the unknown one.
std::vector<CounterSpec> parse_counters(const std::string& list);
const char* default_counters();  // cycles,instructions,cache-misses,branch-misses
// What stands in where no PMU counts the requested counters, from each thread's own accounting (no perf event):
// task-clock (its on-CPU ns), faults (minor + major), context-switches (voluntary + involuntary).
std::vector<CounterSpec> thread_counters();

// Whether this machine can count it (opens it on CPU 0 for a moment).
bool counter_available(const CounterSpec& c);

struct CounterChoice {
    std::vector<CounterSpec> counters; // at most LOTUS_MAX_PERF, all available
    std::string note; // non-empty: what was replaced and why (said once on stderr)
};
// The requested counters this machine has; thread_counters() when none of them is there.
CounterChoice choose_counters(const std::vector<CounterSpec>& wanted);

// One sampling event on thread `tid`, inherited by the threads and processes it starts from then on (each copy
// runs the program attached to it). Empty, with errno set, where the kernel refused.
common::UniqueFd open_inherited(const CounterSpec& c, int tid, uint64_t sample_freq);
// One event per possible CPU (pid -1). Returns the fds indexed by CPU (-1: CPU offline), or throws CaptureError. Sampling events use freq Hz.
std::vector<common::UniqueFd> open_per_cpu(const CounterSpec& c, uint64_t sample_freq = 0);
// cycles where a PMU counts them, else cpu-clock.
CounterSpec sampling_event();

} // namespace lotus::capture
