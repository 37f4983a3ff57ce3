#include "self_usage.h"

#include <sys/resource.h>

#include <cstdio>

#include "common/clock.h"

namespace lotus::cli {

// The tracer's own CPU time so far (user + system, all its threads), for the trace's metadata and the benchmark.
long cpu_ms()
{
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L;
}

UsageMark usage_now()
{
    UsageMark m{common::monotonic_ns(), -1};
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        m.cpu_us = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1'000'000LL + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
    return m;
}

std::optional<exporter::RunInfo::AttachCost> usage_between(const UsageMark& from, const UsageMark& to)
{
    if (from.cpu_us < 0 || to.cpu_us < from.cpu_us || to.wall_ns < from.wall_ns)
        return std::nullopt;
    return exporter::RunInfo::AttachCost{static_cast<double>(to.wall_ns - from.wall_ns) / 1e6,
                                         static_cast<double>(to.cpu_us - from.cpu_us) / 1e3};
}

long peak_rss_kb()
{
    FILE* f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

} // namespace lotus::cli
