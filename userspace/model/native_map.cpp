#include "native_map.h"

#include <algorithm>
#include <string_view>

namespace lotus::model {

namespace {

struct ClaimOf {
    int priority; // op-like spans (2) win over the sample or batch around them (1), whatever order they end in
    Claim claim;
    std::string name;
};

// Which spans claim the samples inside them, and under what name.
ClaimOf claim_of(const Span& s)
{
    switch (s.kind) {
    case SpanKind::Op:
    case SpanKind::Py:
        return {2, Claim::Op, op_row_name(s.name)};
    case SpanKind::Loader:
        return {2, Claim::Loader, "loader"};
    case SpanKind::Collate:
        return {2, Claim::Collate, "collate"};
    case SpanKind::Wait:
        return {2, Claim::Wait, "wait"};
    case SpanKind::Sample:
        return {1, Claim::SampleBetweenOps, "sample (between ops)"};
    case SpanKind::Batch:
        return {1, Claim::BatchOutsideSamples, "batch (outside samples)"};
    default:
        return {0, Claim::Op, ""};
    }
}

constexpr const char* kOutside = "outside any span";

} // namespace

uint32_t NativeMap::function_id(const std::string& function, const std::string& library)
{
    auto key = std::make_pair(function, library);
    auto [it, fresh] = fn_ids_.try_emplace(key, static_cast<uint32_t>(fns_.size()));
    if (fresh)
        fns_.push_back(std::move(key));
    return it->second;
}

uint32_t NativeMap::owner_id(const std::string& owner, Claim claim)
{
    auto [it, fresh] = owner_ids_.try_emplace(owner, static_cast<uint32_t>(owners_.size()));
    if (fresh)
        owners_.emplace_back(owner, claim);
    return it->second;
}

void NativeMap::sample(uint32_t tid, uint64_t ts_ns, uint32_t function, bool named, bool in_kernel)
{
    auto& q = pending_[tid];
    Pending p{ts_ns, function, named, in_kernel, 0, 0};
    // Samples of one thread arrive in time order; keep the queue sorted if one does not.
    auto pos = q.end();
    while (pos != q.begin() && std::prev(pos)->ts > ts_ns)
        --pos;
    q.insert(pos, std::move(p));
}

void NativeMap::span(const Span& s)
{
    auto [priority, claim, owner] = claim_of(s);
    if (!priority)
        return;
    auto it = pending_.find(s.tid);
    if (it == pending_.end())
        return;
    auto& q = it->second;
    auto first = std::lower_bound(q.begin(), q.end(), s.start_ns, [](const Pending& p, uint64_t t) { return p.ts < t; });
    int64_t id = -1; // the owner's number, taken only when the span claims a sample (most ops hold none)
    for (auto p = first; p != q.end() && p->ts <= s.end_ns; ++p) {
        if (p->priority < priority) {
            if (id < 0)
                id = owner_id(owner, claim);
            p->priority = static_cast<uint8_t>(priority);
            p->owner = static_cast<uint32_t>(id);
        }
    }
    if (s.end_ns > horizon_ns_)
        settle(q, s.end_ns - horizon_ns_);
}

void NativeMap::settle(std::deque<Pending>& q, uint64_t before_ns)
{
    while (!q.empty() && q.front().ts < before_ns) {
        const Pending& p = q.front();
        if (!p.priority && outside_ < 0)
            outside_ = owner_id(kOutside, Claim::Outside);
        auto& a = agg_[p.priority ? p.owner : static_cast<uint32_t>(outside_)];
        a.samples++;
        a.named += p.named;
        a.kernel += p.kernel;
        a.by_fn[p.fn]++;
        total_++;
        q.pop_front();
    }
}

void NativeMap::finish()
{
    for (auto& [tid, q] : pending_)
        settle(q, UINT64_MAX);
}

std::vector<OpNativeMap> NativeMap::table() const
{
    std::vector<OpNativeMap> out;
    for (const auto& [owner, a] : agg_) {
        OpNativeMap m{owners_[owner].first, owners_[owner].second, a.samples, a.named, a.kernel, {}};
        for (const auto& [fn, n] : a.by_fn)
            m.functions.push_back({fns_[fn].first, fns_[fn].second, n});
        std::sort(m.functions.begin(), m.functions.end(), [](const NativeHit& x, const NativeHit& y) {
            return x.samples != y.samples     ? x.samples > y.samples
                   : x.function != y.function ? x.function < y.function
                                              : x.library < y.library;
        });
        out.push_back(std::move(m));
    }
    std::sort(out.begin(), out.end(), [](const OpNativeMap& x, const OpNativeMap& y) {
        return x.samples != y.samples ? x.samples > y.samples : x.op < y.op;
    });
    return out;
}

} // namespace lotus::model
