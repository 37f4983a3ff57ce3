#include "metrics/agent_metrics.h"

#include "metrics/pipeline_metrics.h"

namespace lotus::metrics {

const char* skip_reason_label(SkipReason r)
{
    switch (r) {
    case SkipReason::user:
        return "user";
    case SkipReason::cgroup:
        return "cgroup";
    case SkipReason::max_jobs:
        return "max_jobs";
    case SkipReason::fds:
        return "fds";
    }
    return "?";
}

AgentMetrics::AgentMetrics(prometheus::Registry& registry, const std::string& node)
{
    auto& skipped = prometheus::BuildCounter()
                        .Name("lotus_agent_jobs_skipped_total")
                        .Help("PyTorch jobs the agent found and left untraced, by reason: user (not one of --users), "
                              "cgroup (under no --cgroup), max_jobs (--max-jobs traced already), fds (file "
                              "descriptors short)")
                        .Register(registry);
    std::string n = label_value(node);
    for (size_t i = 0; i < kSkipReasons; i++)
        skipped_[i] = &skipped.Add({{"node", n}, {"reason", skip_reason_label(static_cast<SkipReason>(i))}});
    jobs_ = &prometheus::BuildGauge()
                 .Name("lotus_agent_jobs")
                 .Help("Jobs the agent traces now (at most --max-jobs)")
                 .Register(registry)
                 .Add({{"node", n}});
}

void AgentMetrics::skipped(SkipReason r) { skipped_[static_cast<size_t>(r)]->Increment(); }

void AgentMetrics::traced_now(size_t jobs) { jobs_->Set(static_cast<double>(jobs)); }

} // namespace lotus::metrics
