// A process's resource use as /proc says it now (read-only): CPU time (all threads), memory, storage I/O and
// context switches; what `docker stats` shows per container, here per process.
#pragma once
#include <cstdint>
#include <optional>

namespace lotus::target {

struct ProcUsage {
    uint64_t user_ns = 0, system_ns = 0; // /proc/PID/stat utime, stime (clock ticks, so 10 ms steps)
    uint64_t rss_kb = 0, hwm_kb = 0;     // VmRSS, VmHWM (the peak RSS over its life)
    std::optional<uint64_t> pss_kb;      // smaps_rollup's Pss (shared pages split between their users), when asked
    uint64_t read_bytes = 0, write_bytes = 0; // /proc/PID/io: storage I/O it caused
    uint64_t nvcsw = 0, nivcsw = 0;      // context switches, summed over its threads
    uint32_t threads = 0;
};

// nullopt when the process is gone (or became a zombie, whose memory is gone).
std::optional<ProcUsage> read_proc_usage(int pid, bool with_pss);

} // namespace lotus::target
