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

std::string ProcessInfo::label() const
{
    if (root)
        return "main";
    if (worker_id >= 0)
        return "worker " + std::to_string(worker_id);
    return "child";
}

} // namespace lotus::model
