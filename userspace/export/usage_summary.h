// The resource-use part of the summary (Auptimizer's "Final Usage Stats", per process role and for the job):
// CPU, memory, storage I/O and context switches while traced, as a table and as JSON; and the per-interval
// readings as CSV (--resources-csv).
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/spans.h"
#include "model/usage.h"

namespace lotus::exporter {

struct UsageRow {
    std::string role;        // "main", "worker 0" (every process that played it), ..., "job" (all together)
    size_t processes = 0;
    double wall_s = 0;       // traced time, summed over its processes (the job: first to last reading)
    double user_s = 0, system_s = 0;
    double cpu_avg_pct = 0;  // (user + system) over wall
    double cpu_peak_pct = 0; // over ≥ 1 s intervals: the highest of its processes (the job: of their sum)
    double rss_avg_mb = 0, rss_peak_mb = 0; // peak: VmHWM (the job: the highest sum over processes in one reading)
    double pss_peak_mb = -1; // -1: not read
    double read_mb = 0, write_mb = 0;
    double net_sent_mb = 0, net_recv_mb = 0; // internet sockets' payload; valid when net_known
    bool net_known = true;                   // counted for each of its processes
    uint64_t voluntary_cs = 0, involuntary_cs = 0;
    bool exact = true;       // every process's end was seen (exact totals), none still running at the end
    // CPU throttling of its processes' cgroup while they lived (the job: its cgroups' over the run), from cpu.stat;
    // valid when throttle_known (read for each of its processes).
    bool throttle_known = false;
    uint64_t periods = 0, throttled_periods = 0;
    double throttled_s = 0;
};

// One row per role, in the summary's process order, then the job; empty when nothing was read.
std::vector<UsageRow> usage_rows(const model::UsageTracker& usage,
                                 const std::map<uint32_t, model::ProcessInfo>& processes);
void print_usage(FILE* out, const std::vector<UsageRow>& rows, unsigned interval_ms);
// The summary JSON's "resources" object, and its text.
nlohmann::ordered_json usage_json_value(const std::vector<UsageRow>& rows, unsigned interval_ms);
std::string usage_json(const std::vector<UsageRow>& rows, unsigned interval_ms);

// The readings, one CSV row per process and interval, with the process's label.
class UsageCsv {
public:
    void add(const model::UsagePoint& p);
    // A process folded into its role's row (Engine::FoldSink) is named now: text() will not find it.
    void name(uint32_t pid, std::string label);
    std::string text(const std::map<uint32_t, model::ProcessInfo>& processes, uint64_t t0_ns) const;
    bool truncated() const { return dropped_ > 0; }

private:
    static constexpr size_t kMaxPoints = 2'000'000; // ~200 MB of memory at most
    std::vector<model::UsagePoint> points_;
    std::map<uint32_t, std::string> folded_names_;
    uint64_t dropped_ = 0;
};

} // namespace lotus::exporter
