#include "spans.h"

namespace lotus::model {

const char* category(SpanKind k)
{
    switch (k) {
    case SpanKind::Sample: return "sample";
    case SpanKind::Op: return "op";
    case SpanKind::Batch: return "batch";
    case SpanKind::Loader: return "loader";
    case SpanKind::Collate: return "collate";
    case SpanKind::Wait: return "wait";
    case SpanKind::Native: return "native";
    case SpanKind::Consumed: return "consumed";
    case SpanKind::Py: return "py";
    }
    return "?";
}

static std::string own_label(const ProcessInfo& p)
{
    if (p.known_rank() >= 0) // (a worker inherits its trainer's environment: RANK is not its rank)
        return "rank " + std::to_string(p.known_rank());
    if (p.root)
        return "main";
    if (p.consumer)
        return "trainer";
    if (p.worker || p.worker_id >= 0)
        return p.worker_id >= 0 ? "worker " + std::to_string(p.worker_id) : "worker ?";
    return "child";
}

std::string process_label(const std::map<uint32_t, ProcessInfo>& processes, uint32_t pid)
{
    auto it = processes.find(pid);
    if (it == processes.end())
        return "?";
    std::string label = own_label(it->second);
    if (!(it->second.worker || it->second.worker_id >= 0) || !it->second.owner)
        return label;
    size_t consumers = 0;
    for (const auto& [q, p] : processes)
        consumers += p.consumer;
    auto owner = processes.find(it->second.owner);
    if (consumers > 1 && owner != processes.end())
        return own_label(owner->second) + " " + label;
    return label;
}

} // namespace lotus::model
