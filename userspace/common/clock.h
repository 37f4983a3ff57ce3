// The clocks the tracer reads: CLOCK_MONOTONIC is also what BPF's bpf_ktime_get_ns() returns, so user-space
// times and the records' times compare directly.
#pragma once

#include <time.h>

#include <cstdint>

namespace lotus::common {

inline uint64_t clock_ns(clockid_t clock)
{
    timespec ts{};
    clock_gettime(clock, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t monotonic_ns()
{
    return clock_ns(CLOCK_MONOTONIC);
}

} // namespace lotus::common
