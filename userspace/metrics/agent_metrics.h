// The agent's own series (lotus-bpf agent, docs/agent.md): the jobs it traces now and the jobs it skipped, by
// reason. Pure: a registry in, no HTTP; the agent's endpoint serves them beside its jobs' series.
#pragma once
#include <array>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace lotus::metrics {

// Why the agent left a job alone: its user is not one of --users, its cgroup under no --cgroup, --max-jobs jobs
// were traced already, or file descriptors ran short (before attaching, or while).
enum class SkipReason { user, cgroup, max_jobs, fds };
constexpr size_t kSkipReasons = 4;
const char* skip_reason_label(SkipReason r); // "user", "cgroup", "max_jobs", "fds"

class AgentMetrics {
public:
    // Every reason's series from the start (at 0), labelled with the node as the jobs' series are.
    AgentMetrics(prometheus::Registry& registry, const std::string& node);
    void skipped(SkipReason r);  // lotus_agent_jobs_skipped_total{reason}
    void traced_now(size_t jobs); // lotus_agent_jobs

private:
    std::array<prometheus::Counter*, kSkipReasons> skipped_{};
    prometheus::Gauge* jobs_ = nullptr;
};

} // namespace lotus::metrics
