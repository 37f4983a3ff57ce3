#include "perf_events.h"

#include "capture_error.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/libbpf.h>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <sstream>
#include <stdexcept>

#include "lotus_abi.h"

namespace lotus::capture {

namespace {

const CounterSpec kKnown[] = {
    {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, true},
    {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, true},
    {"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, true},
    {"cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES, true},
    {"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, true},
    {"branches", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS, true},
    {"task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, false},
    {"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, false},
    {"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, false},
    {"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, false},
    {"cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, false},
    {"minor-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN, false},
    {"major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ, false},
};

int perf_open(const CounterSpec& c, int cpu, uint64_t freq, int tid = -1)
{
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = c.type;
    attr.config = c.config;
    attr.read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
    if (freq) {
        attr.freq = 1;
        attr.sample_freq = freq;
    }
    attr.inherit = tid >= 0;
    return static_cast<int>(syscall(SYS_perf_event_open, &attr, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC));
}

} // namespace

const char* default_counters() { return "cycles,instructions,cache-misses,branch-misses"; }

std::vector<CounterSpec> thread_counters()
{
    // No perf event: type and config stay unused.
    return {{"task-clock", 0, 0, false, LOTUS_SRC_ON_CPU_NS},
            {"faults", 0, 0, false, LOTUS_SRC_FAULTS},
            {"context-switches", 0, 0, false, LOTUS_SRC_SWITCHES}};
}

std::vector<CounterSpec> parse_counters(const std::string& list)
{
    std::vector<CounterSpec> out;
    std::stringstream ss(list);
    std::string name;
    while (std::getline(ss, name, ',')) {
        if (name.empty())
            continue;
        bool found = false;
        for (const auto& k : kKnown)
            if (k.name == name) {
                out.push_back(k);
                found = true;
            }
        if (!found) {
            std::string names;
            for (const auto& k : kKnown)
                names += (names.empty() ? "" : ", ") + k.name;
            throw std::invalid_argument(fmt::format("unknown counter '{}' (known: {})", name, names));
        }
    }
    if (out.empty())
        throw std::invalid_argument("--counters needs at least one counter name");
    if (out.size() > LOTUS_MAX_PERF)
        throw std::invalid_argument(fmt::format("at most {} counters at a time", LOTUS_MAX_PERF));
    return out;
}

bool counter_available(const CounterSpec& c)
{
    return static_cast<bool>(common::UniqueFd(perf_open(c, 0, 0)));
}

CounterChoice choose_counters(const std::vector<CounterSpec>& wanted)
{
    CounterChoice out;
    std::string missing;
    for (const auto& c : wanted) {
        if (counter_available(c))
            out.counters.push_back(c);
        else
            missing += (missing.empty() ? "" : ", ") + c.name;
    }
    if (out.counters.empty()) {
        out.counters = thread_counters();
        out.note = fmt::format("no PMU counts {} here: counting task-clock, faults and context-switches from each "
                               "thread's own accounting instead",
                               missing);
    } else if (!missing.empty()) {
        out.note = fmt::format("this machine cannot count {}: left out", missing);
    }
    return out;
}

common::UniqueFd open_inherited(const CounterSpec& c, int tid, uint64_t sample_freq)
{
    return common::UniqueFd(perf_open(c, -1, sample_freq, tid));
}

std::vector<common::UniqueFd> open_per_cpu(const CounterSpec& c, uint64_t sample_freq)
{
    std::vector<common::UniqueFd> fds;
    int ncpu = libbpf_num_possible_cpus();
    for (int cpu = 0; cpu < ncpu; cpu++) {
        common::UniqueFd fd(perf_open(c, cpu, sample_freq));
        if (!fd && errno != ENODEV) // ENODEV: a possible CPU that is not online (its slot stays empty)
            throw CaptureError(fmt::format("cannot open perf event {} on CPU {}: {}", c.name, cpu, strerror(errno)));
        fds.push_back(std::move(fd));
    }
    return fds;
}

CounterSpec sampling_event()
{
    CounterSpec cycles{"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, true};
    if (counter_available(cycles))
        return cycles;
    return {"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, false};
}

} // namespace lotus::capture
