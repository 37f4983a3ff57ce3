#include "spans.h"

#include <cstring>
#include <fmt/format.h>

namespace lotus::model {

int64_t int_arg(const Span& s, const char* name, int64_t none)
{
    for (const auto& [k, v] : s.args)
        if (k == name)
            if (auto* i = std::get_if<int64_t>(&v))
                return *i;
    return none;
}

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

// The summary's part rows' names: an op of the same name is told apart.
constexpr std::string_view kPartNames[] = {"loader", "collate", "sample", "sample (whole pipeline)", "wait", "batch",
                                           "sample (between ops)", "batch (outside samples)", "outside any span"};

bool op_row_is_name(std::string_view name)
{
    for (std::string_view part : kPartNames)
        if (name == part)
            return false;
    return true;
}

std::string op_row_name(std::string name)
{
    return op_row_is_name(name) ? name : name + " (op)";
}

static std::string own_label(const ProcessInfo& p)
{
    // Where a report has several nodes, a rank known only by spawn's index is local to its node, and the roles
    // every node has (its main process, its children) say which node's they are.
    const std::string on = p.node.empty() ? "" : " on " + p.node;
    if (p.global_rank() >= 0) // (a worker inherits its trainer's environment: RANK is not its rank)
        return "rank " + std::to_string(p.global_rank());
    if (p.known_rank() >= 0)
        return "local rank " + std::to_string(p.known_rank()) + on;
    if (p.root)
        return "main" + on;
    if (p.consumer)
        return "trainer" + on;
    if (p.worker || p.worker_id >= 0)
        return p.worker_id >= 0 ? "worker " + std::to_string(p.worker_id) : "worker ?";
    if (!p.helper.empty())
        return p.helper + on;
    return "child" + on;
}

int exit_signal(const ProcessInfo& p) { return p.exit_status > 0 ? p.exit_status & 0x7f : 0; }

int exit_code(const ProcessInfo& p)
{
    return p.exit_status >= 0 && !exit_signal(p) ? (p.exit_status >> 8) & 0xff : -1;
}

std::string how_it_ended(const ProcessInfo& p)
{
    if (int sig = exit_signal(p)) {
        const char* name = sigabbrev_np(sig);
        return fmt::format("killed by {}{}", name ? fmt::format("SIG{}", name) : fmt::format("signal {}", sig),
                           p.exit_status & 0x80 ? " (core dumped)" : "");
    }
    int code = exit_code(p);
    return code > 0 ? fmt::format("exited with status {}", code) : "";
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

std::string pid_list(const ProcessInfo& p)
{
    std::string out = std::to_string(p.pid);
    for (uint32_t pid : p.folded_pids)
        out += "," + std::to_string(pid);
    if (p.folded > p.folded_pids.size())
        out += fmt::format(",+{}", p.folded - p.folded_pids.size());
    return out;
}

} // namespace lotus::model
