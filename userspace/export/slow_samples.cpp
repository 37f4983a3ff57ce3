#include "export/slow_samples.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "export/summary.h"

namespace lotus::exporter {

namespace {

constexpr int64_t kNoKey = SampleCounts::kEmpty; // (a time of no sample known)

// The value at quantile q of sorted values, interpolated between neighbours.
double quantile(const std::vector<double>& sorted, double q)
{
    if (sorted.empty())
        return 0;
    double at = q * static_cast<double>(sorted.size() - 1);
    size_t lo = static_cast<size_t>(at);
    size_t hi = std::min(lo + 1, sorted.size() - 1);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - static_cast<double>(lo));
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return quantile(v, 0.5);
}

// Four robust standard deviations of the residuals (1.4826 x their median absolute deviation).
double band_of(const std::vector<double>& residuals)
{
    double m = median(residuals);
    std::vector<double> dev;
    dev.reserve(residuals.size());
    for (double r : residuals)
        dev.push_back(std::fabs(r - m));
    return 4 * 1.4826 * median(dev);
}

double ns_ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

} // namespace

double slow_threshold(std::vector<float> ms)
{
    std::vector<double> v(ms.begin(), ms.end());
    std::sort(v.begin(), v.end());
    double q1 = quantile(v, 0.25), q3 = quantile(v, 0.75);
    return std::max(q3 + 3 * (q3 - q1), 2 * quantile(v, 0.5));
}

std::optional<LineFit> least_squares(const std::vector<double>& x, const std::vector<double>& y)
{
    size_t n = std::min(x.size(), y.size());
    if (n < 2)
        return std::nullopt;
    double mx = 0, my = 0;
    for (size_t i = 0; i < n; i++)
        mx += x[i], my += y[i];
    mx /= static_cast<double>(n), my /= static_cast<double>(n);
    double sxx = 0, sxy = 0, syy = 0;
    for (size_t i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
        syy += (y[i] - my) * (y[i] - my);
    }
    if (sxx <= 0)
        return std::nullopt;
    LineFit f;
    f.slope = sxy / sxx;
    f.intercept = my - f.slope * mx;
    double ss_res = 0;
    for (size_t i = 0; i < n; i++) {
        double r = y[i] - (f.intercept + f.slope * x[i]);
        ss_res += r * r;
    }
    f.r2 = syy > 0 ? 1 - ss_res / syy : 1;
    return f;
}

bool SizeFit::stands_out(double loader_ms, double bytes) const
{
    double expected = expected_ms(bytes);
    return loader_ms - expected > std::max(band_ms, kRelativeBand * std::max(expected, median_ms));
}

double SlowSamples::Detail::ms() const
{
    return std::max(0.0f, t.loader_ms) + std::max(0.0f, t.pipeline_ms);
}

void SlowSamples::add(const model::Span& s)
{
    using K = model::SpanKind;
    if ((s.kind != K::Loader && s.kind != K::Sample && s.kind != K::Op) || !s.sample_id)
        return;
    auto [it, fresh] = pending_.try_emplace(s.sample_id);
    Pending& p = it->second;
    if (fresh)
        p.group = {s.owner, s.loader};
    int64_t ns = s.end_ns > s.start_ns ? static_cast<int64_t>(s.end_ns - s.start_ns) : 0;
    if (s.sample >= 0)
        p.index = s.sample;
    if (s.kind == K::Op) {
        std::string scratch;
        const std::string& name = row_name(s, scratch);
        auto [id, added] = op_ids_.try_emplace(name, static_cast<uint32_t>(op_names_.size()));
        if (added)
            op_names_.push_back(name);
        p.ops.emplace_back(id->second, static_cast<uint64_t>(ns));
    } else if (s.kind == K::Loader) {
        p.loader_ns = ns;
        p.group = {s.owner, s.loader};
        for (const auto& [k, v] : s.args) {
            if (k == "path" && std::holds_alternative<std::string>(v))
                p.path = std::get<std::string>(v);
            else if (k == "bytes" && std::holds_alternative<int64_t>(v))
                p.bytes = std::get<int64_t>(v);
        }
    } else {
        p.pipeline_ns = ns;
    }
    if (s.kind != K::Op && p.loader_ns >= 0 && p.pipeline_ns >= 0) {
        Pending done = std::move(p);
        pending_.erase(it);
        finalize(std::move(done));
    }
    while (pending_.size() > kMaxPending) { // the oldest never got its other span
        Pending old = std::move(pending_.begin()->second);
        pending_.erase(pending_.begin());
        finalize(std::move(old));
    }
}

void SlowSamples::finalize(Pending p) const
{
    if (p.loader_ns < 0 && p.pipeline_ns < 0)
        return; // ops whose sample span never came: no sample time
    Group& g = groups_[p.group];
    g.times++;
    Time t;
    t.key = p.index >= 0      ? p.index
            : !p.path.empty() ? -static_cast<int64_t>(std::hash<std::string>{}(p.path) >> 2) - 1
                              : kNoKey;
    t.bytes = p.bytes;
    t.loader_ms = p.loader_ns >= 0 ? static_cast<float>(ns_ms(p.loader_ns)) : -1.0f;
    t.pipeline_ms = p.pipeline_ns >= 0 ? static_cast<float>(ns_ms(p.pipeline_ns)) : -1.0f;
    if (p.loader_ns >= 0) {
        g.loader_ns.add(static_cast<uint64_t>(p.loader_ns));
        g.with_bytes += t.bytes >= 0;
    }
    if (p.pipeline_ns >= 0)
        g.pipeline_ns.add(static_cast<uint64_t>(p.pipeline_ns));
    if (t.key != kNoKey && !g.counts.add(t.key, t.loader_ms, t.bytes))
        g.untracked++;
    Candidate c{t.key, t.loader_ms, t.pipeline_ms};
    if (score(g, c) > g.admit)
        g.candidates.push_back(c);
    else
        let_go(g, c);
    if (g.times == kExactTimes || (g.times > kExactTimes && g.times % kRebound == 0))
        rebound(g);
    if (g.candidates.size() >= kMaxCandidates)
        raise(g);
    Detail d{t, p.index, std::move(p.path), std::move(p.ops)};
    auto later = [](const Detail& a, const Detail& b) { return a.ms() > b.ms(); }; // a min-heap by ms
    if (g.slowest.size() < kKept) {
        g.slowest.push_back(std::move(d));
        std::push_heap(g.slowest.begin(), g.slowest.end(), later);
    } else if (d.ms() > g.slowest.front().ms()) {
        std::pop_heap(g.slowest.begin(), g.slowest.end(), later);
        g.slowest.back() = std::move(d);
        std::push_heap(g.slowest.begin(), g.slowest.end(), later);
    }
}

double SlowSamples::score(const Group& g, const Candidate& c)
{
    constexpr double kAll = std::numeric_limits<double>::infinity();
    if (g.bound_loader < 0 && g.bound_pipeline < 0)
        return kAll; // no running threshold yet: every time is kept
    double s = 0;
    auto part = [&](double v, double bound) {
        if (v >= 0 && bound >= 0)
            s = std::max(s, bound > 0 ? v / bound : v > 0 ? kAll : 0);
    };
    part(c.loader_ms, g.bound_loader);
    part(c.pipeline_ms, g.bound_pipeline);
    return s;
}

void SlowSamples::let_go(Group& g, const Candidate& c)
{
    g.dropped_any = true;
    if (c.loader_ms >= 0)
        g.dropped_loader.add(c.loader_ms);
    if (c.pipeline_ms >= 0)
        g.dropped_pipeline.add(c.pipeline_ms);
}

void SlowSamples::prune(Group& g)
{
    size_t kept = 0;
    for (const auto& c : g.candidates) {
        if (score(g, c) > g.admit)
            g.candidates[kept++] = c;
        else
            let_go(g, c);
    }
    g.candidates.resize(kept);
}

// The running thresholds from the histograms of every time so far (a candidate's bound, not the final figure).
void SlowSamples::rebound(Group& g)
{
    auto estimate = [](const common::QuantileSketch& q) {
        if (q.count() < kMinTimes)
            return -1.0;
        double q1 = q.quantile(0.25) / 1e6, q3 = q.quantile(0.75) / 1e6;
        return std::max(q3 + 3 * (q3 - q1), 2 * q.quantile(0.5) / 1e6);
    };
    g.bound_loader = estimate(g.loader_ns);
    g.bound_pipeline = estimate(g.pipeline_ns);
    prune(g);
}

// Too many candidates: the least slow quarter goes, and the bound rises to where they were.
void SlowSamples::raise(Group& g)
{
    std::vector<double> scores;
    scores.reserve(g.candidates.size());
    for (const auto& c : g.candidates)
        scores.push_back(score(g, c));
    auto at = scores.begin() + static_cast<std::ptrdiff_t>(scores.size() / 4);
    std::nth_element(scores.begin(), at, scores.end());
    if (!std::isfinite(*at))
        return; // (no running threshold: cannot happen past kExactTimes)
    // The bar rises to the highest score under the quarter's (times alike keep together), or to it where the
    // whole quarter is alike (memory first: not_analysed says what went).
    double below = -1;
    for (auto it = scores.begin(); it != at; ++it)
        if (*it < *at)
            below = std::max(below, *it);
    g.admit = std::max(g.admit, below >= 0 ? below : *at);
    prune(g);
}

void SlowSamples::Group::merge(const Group& o)
{
    times += o.times;
    with_bytes += o.with_bytes;
    untracked += o.untracked;
    loader_ns.merge(o.loader_ns);
    pipeline_ns.merge(o.pipeline_ns);
    candidates.insert(candidates.end(), o.candidates.begin(), o.candidates.end());
    dropped_any = dropped_any || o.dropped_any;
    dropped_loader.merge(o.dropped_loader);
    dropped_pipeline.merge(o.dropped_pipeline);
    counts.merge(o.counts);
    slowest.insert(slowest.end(), o.slowest.begin(), o.slowest.end());
}

size_t SlowSamples::memory_bytes() const
{
    auto sketch = [](const common::QuantileSketch& q) {
        return (q.exact() ? q.count() : q.buckets()) * sizeof(uint64_t);
    };
    size_t n = 0;
    for (const auto& [k, g] : groups_) {
        n += sizeof(g) + g.candidates.capacity() * sizeof(Candidate) + g.counts.memory_bytes() +
             g.dropped_loader.memory_bytes() + g.dropped_pipeline.memory_bytes() + sketch(g.loader_ns) +
             sketch(g.pipeline_ns) + g.slowest.capacity() * sizeof(Detail);
        for (const auto& d : g.slowest)
            n += d.path.capacity() + d.ops.capacity() * sizeof(d.ops[0]);
    }
    return n;
}

void SlowSamples::flush() const
{
    while (!pending_.empty()) {
        Pending p = std::move(pending_.begin()->second);
        pending_.erase(pending_.begin());
        finalize(std::move(p));
    }
}

void SlowSamples::merge_group(uint32_t from_owner, int from_loader, uint32_t into_owner, int into_loader)
{
    if (Key{from_owner, from_loader} != Key{into_owner, into_loader})
        merged_[{from_owner, from_loader}] = {into_owner, into_loader};
}

SlowSamples::Key SlowSamples::resolve(Key k) const
{
    for (size_t hops = 0; hops < 8; hops++) { // (a chain of joins, never a cycle: bounded anyway)
        auto m = merged_.find(k);
        if (m == merged_.end())
            break;
        k = m->second;
    }
    return k;
}

std::vector<SlowSampleGroup> SlowSamples::analyze() const
{
    flush();
    std::map<Key, Group> groups;
    std::vector<Key> order;
    for (const auto& [key, g] : groups_) {
        Key k = resolve(key);
        auto [to, fresh] = groups.try_emplace(k);
        if (fresh)
            order.push_back(k);
        to->second.merge(g);
    }
    std::vector<SlowSampleGroup> out;
    for (const auto& k : order)
        out.push_back(analyze_group(k, groups.at(k)));
    return out;
}

SizeFit SlowSamples::fit_sizes(const std::vector<double>& x, const std::vector<double>& y)
{
    SizeFit out;
    auto first = least_squares(x, y);
    if (!first)
        return out; // (the caller checked that x varies)
    out.median_ms = median(y);
    auto residuals = [&](const LineFit& f, const std::vector<double>& xs, const std::vector<double>& ys) {
        std::vector<double> r;
        r.reserve(xs.size());
        for (size_t i = 0; i < xs.size(); i++)
            r.push_back(ys[i] - (f.intercept + f.slope * xs[i]));
        return r;
    };
    // Once without the samples the first fit cannot explain (a corrupt file's minute drags a line up).
    out.ms_per_mb = first->slope;
    out.fixed_ms = first->intercept;
    out.band_ms = band_of(residuals(*first, x, y));
    std::vector<double> kx, ky;
    for (size_t i = 0; i < x.size(); i++)
        if (!out.stands_out(y[i], x[i] * 1e6))
            kx.push_back(x[i]), ky.push_back(y[i]);
    auto second = least_squares(kx, ky);
    LineFit f = second ? *second : *first;
    if (!second)
        kx = x, ky = y;
    out.ms_per_mb = f.slope;
    out.fixed_ms = f.intercept;
    out.r2 = f.r2;
    out.samples = kx.size();
    out.band_ms = band_of(residuals(f, kx, ky));
    for (size_t i = 0; i < x.size(); i++)
        out.stand_out += out.stands_out(y[i], x[i] * 1e6);
    return out;
}

// Each part's threshold: exact from the candidates while they are every time, else from the histograms.
void SlowSamples::thresholds(const Group& g, SlowSampleGroup& out)
{
    out.with_bytes = g.with_bytes;
    out.thresholds_exact = !g.dropped_any;
    if (!g.dropped_any) {
        std::vector<float> loader, pipeline;
        for (const auto& c : g.candidates) {
            if (c.loader_ms >= 0)
                loader.push_back(c.loader_ms);
            if (c.pipeline_ms >= 0)
                pipeline.push_back(c.pipeline_ms);
        }
        if (loader.size() >= kMinTimes) {
            out.loader_median_ms = median(std::vector<double>(loader.begin(), loader.end()));
            out.loader_threshold_ms = slow_threshold(std::move(loader));
        }
        if (pipeline.size() >= kMinTimes) {
            out.pipeline_median_ms = median(std::vector<double>(pipeline.begin(), pipeline.end()));
            out.pipeline_threshold_ms = slow_threshold(std::move(pipeline));
        }
        return;
    }
    // Each quantile within a (1 %) of its value: Q3 + 3 IQR = 4 Q3 - 3 Q1 within a (4 Q3 + 3 Q1), 2 x median
    // within a (2 x median), their farther within the larger of the two.
    auto part = [](const common::QuantileSketch& q, double& median_ms, double& threshold_ms, double& error_ms) {
        if (q.count() < kMinTimes)
            return;
        double q1 = q.quantile(0.25) / 1e6, q3 = q.quantile(0.75) / 1e6;
        median_ms = q.quantile(0.5) / 1e6;
        threshold_ms = std::max(q3 + 3 * (q3 - q1), 2 * median_ms);
        error_ms = q.exact() ? 0 : common::QuantileSketch::kRelativeError * std::max(4 * q3 + 3 * q1, 2 * median_ms);
    };
    part(g.loader_ns, out.loader_median_ms, out.loader_threshold_ms, out.loader_error_ms);
    part(g.pipeline_ns, out.pipeline_median_ms, out.pipeline_threshold_ms, out.pipeline_error_ms);
}

bool SlowSamples::slow_loader(float loader_ms, const SlowSampleGroup& g)
{
    return g.loader_threshold_ms >= 0 && loader_ms > g.loader_threshold_ms;
}

bool SlowSamples::slow_pipeline(float pipeline_ms, const SlowSampleGroup& g)
{
    return g.pipeline_threshold_ms >= 0 && pipeline_ms > g.pipeline_threshold_ms;
}

// The slow times among the candidates, their samples (times slow per sample), and how many of the times let go
// of may have been slow.
std::unordered_map<int64_t, uint32_t> SlowSamples::count_slow(const Group& g, SlowSampleGroup& out)
{
    std::unordered_map<int64_t, uint32_t> slow;
    for (const auto& c : g.candidates) {
        if (!slow_loader(c.loader_ms, out) && !slow_pipeline(c.pipeline_ms, out))
            continue;
        out.slow_times++;
        if (c.key == kNoKey)
            out.slow_samples++;
        else
            slow[c.key]++;
    }
    out.slow_samples += slow.size();
    for (const auto& [key, n] : slow) {
        const auto* e = g.counts.find(key);
        out.slow_every_time += e && e->seen > 1 && n == e->seen;
    }
    if (out.loader_threshold_ms >= 0)
        out.not_kept += g.dropped_loader.at_most_over(out.loader_threshold_ms);
    if (out.pipeline_threshold_ms >= 0)
        out.not_kept += g.dropped_pipeline.at_most_over(out.pipeline_threshold_ms);
    return slow;
}

// The size fit over each counted sample's fastest loading, with the file's size at it: one point per sample, as
// a time held up by the machine (a worker off its CPU) is not its file's, and the fastest is the least held up.
void SlowSamples::fit(const Group& g, SlowSampleGroup& out)
{
    std::vector<double> x, y; // MB, ms
    for (const auto& e : g.counts.slots())
        if (e.key != SampleCounts::kEmpty && e.bytes >= 0 && e.fastest >= 0)
            x.push_back(static_cast<double>(e.bytes) / 1e6), y.push_back(e.fastest);
    if (x.size() >= kMinTimes && *std::min_element(x.begin(), x.end()) < *std::max_element(x.begin(), x.end()))
        out.fit = fit_sizes(x, y);
}

// A slow sample's row from its slowest kept time and its counts.
SlowSampleRow SlowSamples::row_of(const Detail& d, const SlowSampleGroup& g, const Count& c) const
{
    SlowSampleRow r;
    r.index = d.index;
    r.path = d.path;
    r.bytes = d.t.bytes;
    r.ms = d.ms();
    r.loader_ms = d.t.loader_ms;
    r.pipeline_ms = d.t.pipeline_ms;
    r.slow_loader = slow_loader(d.t.loader_ms, g);
    r.slow_pipeline = slow_pipeline(d.t.pipeline_ms, g);
    for (const auto& [id, ns] : d.ops) {
        const std::string& name = op_names_[id];
        auto at = std::find_if(r.ops.begin(), r.ops.end(), [&](const auto& o) { return o.first == name; });
        if (at == r.ops.end())
            r.ops.emplace_back(name, ns_ms(static_cast<int64_t>(ns)));
        else
            at->second += ns_ms(static_cast<int64_t>(ns));
    }
    r.times_seen = c.seen;
    r.times_slow = c.slow;
    r.fastest_loader_ms = c.fastest_loader;
    // Its size explains its loading where even its fastest was no slower than the fit allows (a time held up by
    // the machine, a worker off its CPU, is not the file's).
    if (g.fit && r.bytes >= 0 && r.fastest_loader_ms >= 0) {
        r.expected_loader_ms = g.fit->expected_ms(static_cast<double>(r.bytes));
        r.stands_out = g.fit->stands_out(r.fastest_loader_ms, static_cast<double>(r.bytes));
    }
    return r;
}

SlowSampleGroup SlowSamples::analyze_group(Key key, const Group& g) const
{
    SlowSampleGroup out;
    out.owner = key.first;
    out.loader = key.second;
    out.samples = g.times;
    out.untracked = g.untracked;
    thresholds(g, out);
    auto slow = count_slow(g, out);
    fit(g, out);
    // The rows: each slow sample's slowest time among those whose details were kept.
    std::map<int64_t, const Detail*> worst;
    for (const auto& d : g.slowest) {
        if (!slow_loader(d.t.loader_ms, out) && !slow_pipeline(d.t.pipeline_ms, out))
            continue;
        if (d.t.key == kNoKey) { // nothing tells it is the same sample another time
            out.rows.push_back(row_of(d, out, Count{0, 1, d.t.loader_ms}));
            continue;
        }
        auto [w, fresh] = worst.try_emplace(d.t.key, &d);
        if (!fresh && d.ms() > w->second->ms())
            w->second = &d;
    }
    for (const auto& [k, d] : worst) {
        const auto* e = g.counts.find(k);
        auto n = slow.find(k);
        // (a slow time let go of is not in `slow`: counted in not_kept)
        Count c{e ? e->seen : 0, std::max<uint32_t>(1, n == slow.end() ? 0 : n->second), e ? e->fastest : -1};
        out.rows.push_back(row_of(*d, out, c));
    }
    std::sort(out.rows.begin(), out.rows.end(), [](const SlowSampleRow& a, const SlowSampleRow& b) {
        return a.times_slow != b.times_slow ? a.times_slow > b.times_slow : a.ms > b.ms;
    });
    if (out.rows.size() > kRows)
        out.rows.resize(kRows);
    return out;
}

} // namespace lotus::exporter
