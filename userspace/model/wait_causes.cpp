#include "wait_causes.h"

#include <algorithm>

#include <fmt/format.h>

namespace lotus::model {

namespace {

constexpr size_t kMaxThreadSamples = 4096; // a thread running pipelines outside any batch keeps no more
constexpr size_t kMaxPending = 4096;       // batches handed over and not (yet) awaited, per kind


std::string string_arg(const Span& s, const char* name)
{
    for (const auto& [k, v] : s.args)
        if (k == name)
            if (auto* t = std::get_if<std::string>(&v))
                return *t;
    return "";
}

std::string ms(uint64_t ns)
{
    return fmt::format("{:.1f} ms", static_cast<double>(ns) / 1e6);
}

} // namespace

const char* wait_cause_key(WaitCause c)
{
    switch (c) {
    case WaitCause::LateStart: return "late_start";
    case WaitCause::HandOver: return "hand_over";
    case WaitCause::SlowSample: return "slow_sample";
    case WaitCause::Op: return "op";
    case WaitCause::Loading: return "loading";
    case WaitCause::Collation: return "collation";
    case WaitCause::TooFewWorkers: return "too_few_workers";
    case WaitCause::Unsplit: return "unsplit";
    case WaitCause::Unknown: return "unknown";
    }
    return "unknown";
}

std::string wait_cause_text(WaitCause c, const std::string& op)
{
    switch (c) {
    case WaitCause::LateStart: return "late start";
    case WaitCause::HandOver: return "hand-over";
    case WaitCause::SlowSample: return "slow sample";
    case WaitCause::Op: return "op " + op;
    case WaitCause::Loading: return "loading";
    case WaitCause::Collation: return "collation";
    case WaitCause::TooFewWorkers: return "too few workers";
    case WaitCause::Unsplit: return "preparation (not split)";
    case WaitCause::Unknown: return "not known";
    }
    return "not known";
}

void WaitCauses::see(const Span& s)
{
    switch (s.kind) {
    case SpanKind::Op:
        if (s.container.empty() && s.sample_id) { // a container's own span holds its ops' time
            auto& t = threads_[{s.pid, s.tid}];
            t.ops[s.sample_id][s.name] += s.end_ns - s.start_ns;
            if (t.ops.size() > kMaxThreadSamples)
                t.ops.erase(t.ops.begin());
        }
        break;
    case SpanKind::Sample: sample(s); break;
    case SpanKind::Loader: {
        auto& t = threads_[{s.pid, s.tid}];
        for (auto it = t.samples.rbegin(); it != t.samples.rend(); ++it)
            if (it->id == s.sample_id && s.sample_id) {
                it->load_ns = s.end_ns - s.start_ns;
                if (s.has_counters) {
                    it->load_cpu_ns = static_cast<int64_t>(s.counters.cpu_ns);
                    it->load_blocked = s.counters.voluntary_cs > 0;
                }
                it->path = string_arg(s, "path");
                break;
            }
        break;
    }
    case SpanKind::Collate: {
        auto& t = threads_[{s.pid, s.tid}];
        t.collate_ns = s.end_ns - s.start_ns;
        t.collate_end = s.end_ns;
        break;
    }
    case SpanKind::Batch: batch(s); break;
    default: break;
    }
}

void WaitCauses::sample(const Span& s)
{
    auto& t = threads_[{s.pid, s.tid}];
    SampleSeen x;
    x.id = s.sample_id;
    x.index = s.sample;
    x.start = s.start_ns;
    x.end = s.end_ns;
    if (s.has_counters) {
        x.cpu_ns = static_cast<int64_t>(s.counters.cpu_ns);
        x.blocked = s.counters.voluntary_cs > 0;
    }
    if (auto o = t.ops.find(s.sample_id); o != t.ops.end()) {
        x.ops = std::move(o->second);
        t.ops.erase(o);
    }
    t.samples.push_back(std::move(x));
    if (t.samples.size() > kMaxThreadSamples)
        t.samples.pop_front();
}

// A sample far over its pass's median whose own work (SampleSeen::work) was too.
bool WaitCauses::outlier(const SampleSeen& x, const Medians& m)
{
    auto far = [](double v, double median) { return v > kOutlierFactor * median && v > median + kOutlierMinNs; };
    return far(static_cast<double>(x.ns()), m.sample_ns) && far(static_cast<double>(x.work()), m.work_ns);
}

// The batch's samples (those of its thread inside it), what made it slower than its pass's usual batch, and the
// usual figures updated with it.
WaitCauses::BatchSeen WaitCauses::compose(const Span& s, ThreadSeen& t)
{
    BatchSeen b;
    b.pid = s.pid;
    b.worker_id = static_cast<int>(int_arg(s, "worker"));
    b.start = s.start_ns;
    b.end = s.end_ns;
    if (t.collate_end == s.end_ns)
        b.collate_ns = t.collate_ns;
    std::vector<SampleSeen> mine;
    while (!t.samples.empty() && t.samples.front().end <= s.end_ns) {
        if (t.samples.front().start >= s.start_ns)
            mine.push_back(std::move(t.samples.front()));
        t.samples.pop_front();
    }
    b.complete = int_arg(s, "samples") == static_cast<int64_t>(mine.size());
    Usual& u = usual_[{s.owner, s.loader}];
    bool known = u.sample_ns.count() >= kMinSamples;
    // (read once a batch: a quantile of a sketch past its exact size scans its buckets)
    const Medians m{known ? u.sample_ns.quantile(0.5) : 0, known ? u.work_ns.quantile(0.5) : 0};
    std::map<std::string, uint64_t> ordinary; // the parts of its ordinary samples
    uint64_t ordinary_n = 0;
    // Slow samples are a few of the batch's; where more are, its ops or loading were slow for all of them.
    size_t outliers = known ? std::count_if(mine.begin(), mine.end(), [&](const SampleSeen& x) { return outlier(x, m); })
                            : 0;
    known = known && outliers <= std::max<size_t>(1, mine.size() / 4);
    for (const auto& x : mine) {
        uint64_t ns = x.ns();
        if (ns >= b.slowest_ns) {
            b.slowest = x.index;
            b.slowest_ns = ns;
            b.slowest_path = x.path;
            std::string part = "loading";
            uint64_t most = x.load_ns;
            for (const auto& [op, ons] : x.ops)
                if (ons > most) {
                    most = ons;
                    part = op;
                }
            b.slowest_part = part;
        }
        for (const auto& [op, ons] : x.ops)
            b.parts[op] += ons;
        b.parts[""] += x.load_ns;
        if (known && outlier(x, m)) {
            b.excess.push_back({WaitCause::SlowSample, "", ns - static_cast<uint64_t>(m.sample_ns)});
            continue;
        }
        for (const auto& [op, ons] : x.ops)
            ordinary[op] += ons;
        ordinary[""] += x.load_ns;
        ordinary_n++;
    }
    auto over = [](uint64_t seen, double usual) {
        return seen > kExcessFactor * usual && seen > usual + kExcessMinNs ? seen - static_cast<uint64_t>(usual) : 0;
    };
    if (u.samples >= kMinSamples)
        for (const auto& [part, ns] : ordinary) {
            auto p = u.part_ns.find(part);
            double usual = p == u.part_ns.end() ? 0 : static_cast<double>(p->second) / u.samples * ordinary_n;
            if (uint64_t e = over(ns, usual))
                b.excess.push_back({part.empty() ? WaitCause::Loading : WaitCause::Op, part, e});
        }
    if (u.batches >= 3 && b.collate_ns)
        if (uint64_t e = over(b.collate_ns, static_cast<double>(u.collate_ns) / u.batches))
            b.excess.push_back({WaitCause::Collation, "", e});
    for (const auto& x : mine) {
        u.sample_ns.add(x.ns());
        u.work_ns.add(x.work());
    }
    for (const auto& [part, ns] : ordinary)
        u.part_ns[part] += ns;
    u.samples += ordinary_n;
    if (b.collate_ns) {
        u.batches++;
        u.collate_ns += b.collate_ns;
    }
    return b;
}

void WaitCauses::batch(const Span& s)
{
    auto& t = threads_[{s.pid, s.tid}];
    BatchSeen b = compose(s, t);
    int64_t idx = int_arg(s, "batch");
    Pass pass{{s.owner, s.loader}, int_arg(s, "epoch")};
    if (s.flow_out) {
        auto [w, fresh] = worker_pass_.try_emplace(s.pid, pass);
        b.first = pass.second >= 0 && (fresh || w->second != pass); // (a pass whose start was seen)
        w->second = pass;
        if (worker_pass_.size() > kMaxPending) // (workers of passes long over)
            worker_pass_.erase(worker_pass_.begin());
        if (idx >= 0) {
            auto& r = ready_[pass];
            r[idx] = s.end_ns;
            if (r.size() > kMaxPending)
                r.erase(r.begin());
        }
        by_flow_[s.flow_out] = std::move(b);
        if (by_flow_.size() > kMaxPending)
            by_flow_.erase(by_flow_.begin());
    } else {
        single_[{s.pid, s.tid}] = std::move(b);
    }
}

std::vector<CausePart> WaitCauses::split(const Span& w, const BatchSeen* b, bool later_ready) const
{
    const uint64_t start = w.start_ns, end = w.end_ns, all = end - start;
    if (!b)
        return {{WaitCause::Unknown, "", all}};
    std::vector<CausePart> parts;
    auto add = [&](WaitCause c, const std::string& op, uint64_t ns) {
        if (!ns)
            return;
        for (auto& p : parts)
            if (p.cause == c && p.op == op) {
                p.ns += ns;
                return;
            }
        parts.push_back({c, op, ns});
    };
    uint64_t late = 0, hand = 0;
    if (b->end <= start) {
        hand = all; // ready before the loop asked
    } else {
        late = b->start > start ? std::min(b->start, end) - start : 0;
        hand = b->end < end ? end - b->end : 0;
    }
    add(WaitCause::LateStart, "", late);
    add(WaitCause::HandOver, "", hand);
    uint64_t overlap = all - late - hand, given = 0;
    uint64_t excess = 0;
    for (const auto& e : b->excess)
        excess += e.ns;
    if (overlap && excess) {
        double scale = std::min(1.0, static_cast<double>(overlap) / static_cast<double>(excess));
        for (const auto& e : b->excess) {
            uint64_t ns = std::min(overlap - given, static_cast<uint64_t>(static_cast<double>(e.ns) * scale));
            add(e.cause, e.op, ns);
            given += ns;
        }
    }
    uint64_t rest = overlap - given;
    uint64_t prepared = b->collate_ns;
    for (const auto& [part, ns] : b->parts)
        prepared += ns;
    if (rest && b->first) {
        add(WaitCause::LateStart, "", rest);
    } else if (rest && !b->complete) {
        add(WaitCause::Unsplit, "", rest);
    } else if (rest && !later_ready) {
        add(WaitCause::TooFewWorkers, "", rest);
    } else if (rest && !prepared) {
        add(WaitCause::Unsplit, "", rest);
    } else if (rest) { // over its parts by their shares; what rounding leaves to the largest
        uint64_t left = rest;
        std::vector<CausePart> shares;
        for (const auto& [part, ns] : b->parts)
            shares.push_back({part.empty() ? WaitCause::Loading : WaitCause::Op, part, ns});
        shares.push_back({WaitCause::Collation, "", b->collate_ns});
        std::sort(shares.begin(), shares.end(), [](const CausePart& a, const CausePart& c) { return a.ns > c.ns; });
        for (size_t i = 1; i < shares.size(); i++) {
            uint64_t ns = static_cast<uint64_t>(static_cast<double>(rest) * shares[i].ns / prepared);
            ns = std::min(ns, left);
            add(shares[i].cause, shares[i].op, ns);
            left -= ns;
        }
        add(shares[0].cause, shares[0].op, left);
    }
    std::stable_sort(parts.begin(), parts.end(), [](const CausePart& a, const CausePart& c) { return a.ns > c.ns; });
    return parts;
}

void WaitCauses::attribute(Span& w)
{
    const BatchSeen* b = nullptr;
    BatchSeen found;
    if (w.flow_in) {
        if (auto it = by_flow_.find(w.flow_in); it != by_flow_.end()) {
            found = std::move(it->second);
            by_flow_.erase(it);
            b = &found;
        }
    } else if (auto it = single_.find({w.pid, w.tid}); it != single_.end() && it->second.end == w.end_ns) {
        found = std::move(it->second);
        single_.erase(it);
        b = &found;
    }
    const Key key{w.owner, w.loader};
    int64_t idx = int_arg(w, "batch");
    bool later_ready = false;
    if (auto r = ready_.find({key, int_arg(w, "epoch")}); r != ready_.end() && idx >= 0) {
        for (auto m = r->second.upper_bound(idx); m != r->second.end() && !later_ready; ++m)
            later_ready = m->second <= w.start_ns;
        r->second.erase(r->second.begin(), r->second.upper_bound(idx)); // awaited, or never to be
    }
    WaitRow row;
    row.owner = w.owner;
    row.pid = w.pid;
    row.loader = w.loader;
    row.batch = idx;
    row.epoch = int_arg(w, "epoch");
    row.start_ns = w.start_ns;
    row.end_ns = w.end_ns;
    row.later_ready = later_ready;
    row.parts = split(w, b, later_ready);
    if (b) {
        row.worker_pid = b->pid;
        row.worker_id = b->worker_id;
        row.prepare_ns = b->end - b->start;
        row.slowest_sample = b->slowest;
        row.slowest_path = b->slowest_path;
        row.slowest_part = b->slowest_part;
        row.slowest_ns = b->slowest_ns;
        if (b->worker_id >= 0)
            w.args.emplace_back("worker", int64_t{b->worker_id});
        w.args.emplace_back("prepare_ms", DurationNs{row.prepare_ns});
        if (b->slowest >= 0 || b->slowest_ns) {
            if (b->slowest >= 0)
                w.args.emplace_back("slowest_sample", int64_t{b->slowest});
            if (!b->slowest_path.empty())
                w.args.emplace_back("slowest_path", b->slowest_path);
            w.args.emplace_back("slowest_op", b->slowest_part);
        }
    }
    std::string causes;
    for (const auto& p : row.parts)
        causes += (causes.empty() ? "" : "; ") + wait_cause_text(p.cause, p.op) + " " + ms(p.ns);
    if (!row.parts.empty()) {
        w.args.emplace_back("cause", wait_cause_text(row.parts[0].cause, row.parts[0].op));
        w.args.emplace_back("causes", causes);
    }
    count(key, row);
    keep(std::move(row));
}

void WaitCauses::count(const Key& k, const WaitRow& row)
{
    waits_++;
    auto& t = totals_[k];
    for (size_t i = 0; i < row.parts.size(); i++) {
        const auto& p = row.parts[i];
        auto& c = t[{p.cause, p.op}];
        c.cause = p.cause;
        c.op = p.op;
        c.ns += p.ns;
        c.waits += i == 0;
    }
}

void WaitCauses::keep(WaitRow row)
{
    auto longer = [](const WaitRow& a, const WaitRow& b) { return a.ns() > b.ns(); }; // min-heap
    if (rows_.size() < kRows) {
        rows_.push_back(std::move(row));
        std::push_heap(rows_.begin(), rows_.end(), longer);
    } else if (row.ns() > rows_.front().ns()) {
        std::pop_heap(rows_.begin(), rows_.end(), longer);
        rows_.back() = std::move(row);
        std::push_heap(rows_.begin(), rows_.end(), longer);
    }
}

void WaitCauses::merge(const Key& from, const Key& into)
{
    auto f = totals_.find(from);
    if (f == totals_.end() || from == into)
        return;
    auto moved = std::move(f->second);
    totals_.erase(f);
    auto& t = totals_[into];
    for (auto& [k, c] : moved) {
        auto& d = t[k];
        d.cause = c.cause;
        d.op = c.op;
        d.ns += c.ns;
        d.waits += c.waits;
    }
    for (auto& r : rows_)
        if (r.owner == from.first && r.loader == from.second)
            r.loader = into.second;
}

static std::vector<CauseTotal> sorted(std::map<std::pair<WaitCause, std::string>, CauseTotal> m)
{
    std::vector<CauseTotal> out;
    for (auto& [k, c] : m)
        out.push_back(std::move(c));
    std::stable_sort(out.begin(), out.end(), [](const CauseTotal& a, const CauseTotal& b) { return a.ns > b.ns; });
    return out;
}

std::vector<CauseTotal> WaitCauses::totals(const Key& k) const
{
    auto t = totals_.find(k);
    return t == totals_.end() ? std::vector<CauseTotal>{} : sorted(t->second);
}

std::vector<CauseTotal> WaitCauses::totals_of_owner(uint32_t owner) const
{
    std::map<std::pair<WaitCause, std::string>, CauseTotal> all;
    for (const auto& [k, t] : totals_) {
        if (k.first != owner)
            continue;
        for (const auto& [ck, c] : t) {
            auto& d = all[ck];
            d.cause = c.cause;
            d.op = c.op;
            d.ns += c.ns;
            d.waits += c.waits;
        }
    }
    return sorted(std::move(all));
}

std::vector<WaitRow> WaitCauses::rows() const
{
    std::vector<WaitRow> out = rows_;
    std::sort(out.begin(), out.end(), [](const WaitRow& a, const WaitRow& b) { return a.ns() > b.ns(); });
    return out;
}

} // namespace lotus::model
