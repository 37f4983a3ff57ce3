#include "self_usage.h"

#include <sys/resource.h>

#include <cstdio>

namespace lotus::cli {

// The tracer's own CPU time so far (user + system, all its threads), for the trace's metadata and the benchmark.
long cpu_ms()
{
    rusage ru{};
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000L + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000L;
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
