#include "model/stuck.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

namespace lotus::model {

void StuckWatch::add_step(Proc& p, uint64_t ns)
{
    if (p.steps.size() < kSteps)
        p.steps.push_back(ns);
    else
        p.steps[p.next++ % kSteps] = ns;
}

uint64_t StuckWatch::median(const Proc& p)
{
    if (p.steps.empty())
        return 0;
    auto v = p.steps;
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return v[v.size() / 2];
}

void StuckWatch::span(const Span& s)
{
    if (s.kind == SpanKind::Native)
        return; // a native call inside a sample says nothing of the process's progress that its op does not
    Proc& p = procs_[s.pid];
    p.last_end = std::max(p.last_end, s.end_ns);
    if (s.kind == SpanKind::Batch && s.end_ns > s.start_ns)
        add_step(p, s.end_ns - s.start_ns);
    if (s.kind == SpanKind::Wait) { // a training loop: one batch to the next
        if (p.last_wait_end && s.end_ns > p.last_wait_end)
            add_step(p, s.end_ns - p.last_wait_end);
        p.last_wait_end = std::max(p.last_wait_end, s.end_ns);
    }
}

uint64_t StuckWatch::threshold_ns(uint32_t pid) const
{
    if (fixed_ns_)
        return fixed_ns_;
    auto it = procs_.find(pid);
    uint64_t m = it == procs_.end() ? 0 : median(it->second);
    return std::max(kFloorNs, kFactor * m);
}

std::string StuckWatch::threshold_why(uint32_t pid) const
{
    if (fixed_ns_)
        return "--stuck-after";
    auto it = procs_.find(pid);
    uint64_t m = it == procs_.end() ? 0 : median(it->second);
    if (!m)
        return fmt::format("the floor, {:.0f} s: no step of its own seen yet", kFloorNs / 1e9);
    return fmt::format("{} x its median step {:.3f} s, at least {:.0f} s", kFactor, static_cast<double>(m) / 1e9,
                       kFloorNs / 1e9);
}

std::vector<StuckWatch::Change> StuckWatch::check(uint64_t now, const std::vector<uint32_t>& live,
                                                  const std::function<std::optional<OpenWork>(uint32_t)>& work)
{
    std::vector<Change> out;
    for (auto& [pid, p] : procs_) // (a process that has exited since included: its last spans came after)
        if (p.stuck && p.last_end > p.since) { // it ended a span again
            p.stuck = false;
            out.push_back({pid, false, p.since, p.last_end, threshold_ns(pid), {}});
        }
    for (uint32_t pid : live) {
        Proc& p = procs_[pid];
        if (p.stuck)
            continue;
        auto w = work(pid);
        if (!w)
            continue;
        uint64_t since = std::max(p.last_end, w->since_ns), limit = threshold_ns(pid);
        if (now > since && now - since >= limit) {
            p.stuck = true;
            p.since = since;
            out.push_back({pid, true, since, now, limit, *w});
        }
    }
    return out;
}

size_t StuckWatch::stuck_count() const
{
    size_t n = 0;
    for (const auto& [pid, p] : procs_)
        n += p.stuck;
    return n;
}

void StuckEpisodes::stuck(const RecordStuck& r)
{
    if (r.resumed) { // the process's open episode ends
        for (auto it = episodes_.rbegin(); it != episodes_.rend(); ++it)
            if (it->pid == r.tgid && !it->end_ns) {
                it->end_ns = r.ts_ns;
                break;
            }
        return;
    }
    Episode e;
    e.pid = r.tgid;
    e.since_ns = r.since_ns;
    e.said_ns = r.ts_ns;
    e.threshold_ns = r.threshold_ns;
    e.sample = r.sample;
    e.batch = r.batch;
    e.op.assign(r.op, strnlen(r.op, sizeof(r.op)));
    e.stack.assign(r.stack, strnlen(r.stack, sizeof(r.stack)));
    episodes_.push_back(std::move(e));
}

} // namespace lotus::model
