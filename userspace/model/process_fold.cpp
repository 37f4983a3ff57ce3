#include "process_fold.h"

#include <algorithm>
#include <climits>
#include <tuple>

namespace lotus::model {

namespace {

// A role: workers by (owner, DataLoader, worker id); helper children (no role of their own) by their parent.
using Role = std::tuple<uint32_t, int, int>;

bool foldable(const ProcessInfo& p, uint64_t now_ns)
{
    if (!p.exited || p.exit_status != 0 || p.root || p.consumer || p.known_rank() >= 0 ||
        p.exit_ns + kFoldAfterNs > now_ns)
        return false;
    bool worker = p.worker || p.worker_id >= 0;
    return worker ? p.worker_id >= 0 && p.owner != 0 : p.parent != 0;
}

Role role_of(const ProcessInfo& p)
{
    if (p.worker || p.worker_id >= 0)
        return {p.owner, p.loader, p.worker_id};
    return {p.parent, INT_MIN, INT_MIN};
}

} // namespace

std::vector<std::pair<uint32_t, uint32_t>> folds_due(const std::map<uint32_t, ProcessInfo>& processes,
                                                     uint64_t now_ns, const std::set<uint32_t>& keep)
{
    std::map<Role, std::vector<const ProcessInfo*>> roles;
    for (const auto& [pid, p] : processes)
        if (foldable(p, now_ns) && !keep.count(pid))
            roles[role_of(p)].push_back(&p);
    std::vector<std::pair<uint32_t, uint32_t>> out;
    for (auto& [role, ps] : roles) {
        if (ps.size() <= kKeptPerRole)
            continue;
        // in the order they exited: the first ones keep their own rows
        std::sort(ps.begin(), ps.end(), [](const ProcessInfo* a, const ProcessInfo* b) {
            return std::tie(a->exit_ns, a->pid) < std::tie(b->exit_ns, b->pid);
        });
        uint32_t into = ps[kKeptPerRole - 1]->pid;
        for (size_t i = kKeptPerRole; i < ps.size(); i++)
            out.emplace_back(ps[i]->pid, into);
    }
    return out;
}

void absorb(ProcessInfo& into, const ProcessInfo& from)
{
    into.folded += from.processes();
    into.folded_seen_ns += from.seen_ns();
    if (into.folded_pids.size() < ProcessInfo::kShownFolded)
        into.folded_pids.push_back(from.pid);
    for (uint32_t pid : from.folded_pids)
        if (into.folded_pids.size() < ProcessInfo::kShownFolded)
            into.folded_pids.push_back(pid);
    into.samples += from.samples;
    into.batches += from.batches;
    into.busy_ns += from.busy_ns;
    if (from.first_span_ns && (!into.first_span_ns || from.first_span_ns < into.first_span_ns))
        into.first_span_ns = from.first_span_ns;
}

} // namespace lotus::model
