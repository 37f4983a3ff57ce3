#include "proc/host_cpu.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/read_file.h"

namespace lotus::proc {

std::optional<HostCpu> parse_host_cpu(const char* text, const std::vector<unsigned>& which, long ticks_per_s)
{
    if (ticks_per_s <= 0)
        return std::nullopt;
    HostCpu h;
    const uint64_t ns_per_tick = 1000000000ull / static_cast<uint64_t>(ticks_per_s);
    for (const char* line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : nullptr) {
        if (strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9')
            continue;
        char* end = nullptr;
        unsigned long n = strtoul(line + 3, &end, 10);
        if (!which.empty() && std::find(which.begin(), which.end(), n) == which.end())
            continue;
        // user nice system idle iowait irq softirq steal (guest and guest_nice are within user and nice)
        uint64_t f[8] = {};
        const char* p = end;
        for (auto& v : f) {
            v = strtoull(p, &end, 10);
            if (end == p)
                return std::nullopt; // a line cut short: not this format
            p = end;
        }
        h.busy_ns += (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) * ns_per_tick;
        h.total_ns += (f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7]) * ns_per_tick;
        h.nice_ns += f[1] * ns_per_tick;
        h.cpus++;
    }
    if (!h.cpus)
        return std::nullopt;
    return h;
}

std::optional<HostCpu> read_host_cpu(int pid)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    std::vector<unsigned> which;
    if (sched_getaffinity(pid, sizeof(set), &set) != 0)
        return std::nullopt; // (gone: no CPUs of its to read)
    for (unsigned i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set))
            which.push_back(i);
    auto text = common::read_file("/proc/stat");
    if (!text)
        return std::nullopt;
    return parse_host_cpu(text->c_str(), which, sysconf(_SC_CLK_TCK));
}

} // namespace lotus::proc
