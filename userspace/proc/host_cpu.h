// The host's CPU time on a set of CPUs, as /proc/stat says it now (read-only): what every process and the kernel
// did there, this tracer included. With the traced job's own CPU time it says how much others took.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace lotus::proc {

struct HostCpu {
    uint64_t busy_ns = 0;  // user, nice, system, irq, softirq and steal, summed over the CPUs read
    uint64_t total_ns = 0; // busy plus idle and iowait
    uint64_t nice_ns = 0;  // of busy: nice (processes at a lower priority)
    uint32_t cpus = 0;     // CPUs read
};

// Parses /proc/stat's text: the "cpuN" lines of the CPUs in `which` (all when empty), at ticks_per_s.
std::optional<HostCpu> parse_host_cpu(const char* text, const std::vector<unsigned>& which, long ticks_per_s);
// Reads /proc/stat for the CPUs `pid` may run on (its affinity); none when it is gone or the file unreadable.
std::optional<HostCpu> read_host_cpu(int pid);

} // namespace lotus::proc
