#include "export/slow_samples.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "export/summary.h"

namespace lotus::exporter {

namespace {

constexpr int64_t kNoKey = std::numeric_limits<int64_t>::min();

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
        std::string name = row_name(s);
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
    if (g.times.size() >= kMaxTimes) {
        g.not_kept++;
        return;
    }
    Time t;
    t.key = p.index >= 0      ? p.index
            : !p.path.empty() ? -static_cast<int64_t>(std::hash<std::string>{}(p.path) >> 2) - 1
                              : kNoKey;
    t.bytes = p.bytes;
    t.loader_ms = p.loader_ns >= 0 ? static_cast<float>(ns_ms(p.loader_ns)) : -1.0f;
    t.pipeline_ms = p.pipeline_ns >= 0 ? static_cast<float>(ns_ms(p.pipeline_ns)) : -1.0f;
    g.times.push_back(t);
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
        to->second.times.insert(to->second.times.end(), g.times.begin(), g.times.end());
        to->second.slowest.insert(to->second.slowest.end(), g.slowest.begin(), g.slowest.end());
        to->second.not_kept += g.not_kept;
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

// Each part's threshold, from the times that have that part.
void SlowSamples::thresholds(const Group& g, SlowSampleGroup& out)
{
    std::vector<float> loader, pipeline;
    for (const auto& t : g.times) {
        if (t.loader_ms >= 0)
            loader.push_back(t.loader_ms);
        if (t.pipeline_ms >= 0)
            pipeline.push_back(t.pipeline_ms);
        out.with_bytes += t.bytes >= 0 && t.loader_ms >= 0;
    }
    if (loader.size() >= kMinTimes) {
        out.loader_median_ms = median(std::vector<double>(loader.begin(), loader.end()));
        out.loader_threshold_ms = slow_threshold(std::move(loader));
    }
    if (pipeline.size() >= kMinTimes) {
        out.pipeline_median_ms = median(std::vector<double>(pipeline.begin(), pipeline.end()));
        out.pipeline_threshold_ms = slow_threshold(std::move(pipeline));
    }
}

bool SlowSamples::slow_loader(const Time& t, const SlowSampleGroup& g)
{
    return g.loader_threshold_ms >= 0 && t.loader_ms > g.loader_threshold_ms;
}

bool SlowSamples::slow_pipeline(const Time& t, const SlowSampleGroup& g)
{
    return g.pipeline_threshold_ms >= 0 && t.pipeline_ms > g.pipeline_threshold_ms;
}

// Times seen and slow per sample, its fastest loading (with that time's file size), and the size fit over them.
std::unordered_map<int64_t, SlowSamples::Count> SlowSamples::count_and_fit(const Group& g, SlowSampleGroup& out)
{
    std::unordered_map<int64_t, Count> counts;
    std::vector<double> x, y; // the size fit's points: MB, ms
    for (const auto& t : g.times) {
        bool slow = slow_loader(t, out) || slow_pipeline(t, out);
        out.slow_times += slow;
        if (t.key == kNoKey) {
            out.slow_samples += slow;
            if (t.bytes >= 0 && t.loader_ms >= 0)
                x.push_back(static_cast<double>(t.bytes) / 1e6), y.push_back(t.loader_ms);
            continue;
        }
        auto& c = counts[t.key];
        c.seen++;
        c.slow += slow;
        if (t.loader_ms >= 0 && (c.fastest_loader < 0 || t.loader_ms < c.fastest_loader))
            c.fastest_loader = t.loader_ms, c.bytes = t.bytes;
    }
    for (const auto& [k, c] : counts) {
        out.slow_samples += c.slow > 0;
        out.slow_every_time += c.seen > 1 && c.slow == c.seen;
        if (c.bytes >= 0 && c.fastest_loader >= 0)
            x.push_back(static_cast<double>(c.bytes) / 1e6), y.push_back(c.fastest_loader);
    }
    // One point per sample, its fastest loading: a time held up by the machine (a worker off its CPU) is not its
    // file's, and the fastest of a sample's times is the one least held up.
    if (x.size() >= kMinTimes && *std::min_element(x.begin(), x.end()) < *std::max_element(x.begin(), x.end()))
        out.fit = fit_sizes(x, y);
    return counts;
}

// A slow sample's row from its slowest kept time; c: its counts (null: known by neither index nor file).
SlowSampleRow SlowSamples::row_of(const Detail& d, const SlowSampleGroup& g, const Count* c) const
{
    SlowSampleRow r;
    r.index = d.index;
    r.path = d.path;
    r.bytes = d.t.bytes;
    r.ms = d.ms();
    r.loader_ms = d.t.loader_ms;
    r.pipeline_ms = d.t.pipeline_ms;
    r.slow_loader = slow_loader(d.t, g);
    r.slow_pipeline = slow_pipeline(d.t, g);
    for (const auto& [id, ns] : d.ops) {
        const std::string& name = op_names_[id];
        auto at = std::find_if(r.ops.begin(), r.ops.end(), [&](const auto& o) { return o.first == name; });
        if (at == r.ops.end())
            r.ops.emplace_back(name, ns_ms(static_cast<int64_t>(ns)));
        else
            at->second += ns_ms(static_cast<int64_t>(ns));
    }
    r.times_seen = c ? c->seen : 0;
    r.times_slow = c ? c->slow : 1;
    r.fastest_loader_ms = c ? c->fastest_loader : r.loader_ms;
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
    out.samples = g.times.size();
    out.not_kept = g.not_kept;
    thresholds(g, out);
    auto counts = count_and_fit(g, out);
    // The rows: each slow sample's slowest time among those whose details were kept.
    std::map<int64_t, const Detail*> worst;
    for (const auto& d : g.slowest) {
        if (!slow_loader(d.t, out) && !slow_pipeline(d.t, out))
            continue;
        if (d.t.key == kNoKey) {
            out.rows.push_back(row_of(d, out, nullptr));
            continue;
        }
        auto [w, fresh] = worst.try_emplace(d.t.key, &d);
        if (!fresh && d.ms() > w->second->ms())
            w->second = &d;
    }
    for (const auto& [k, d] : worst)
        out.rows.push_back(row_of(*d, out, &counts.at(k)));
    std::sort(out.rows.begin(), out.rows.end(), [](const SlowSampleRow& a, const SlowSampleRow& b) {
        return a.times_slow != b.times_slow ? a.times_slow > b.times_slow : a.ms > b.ms;
    });
    if (out.rows.size() > kRows)
        out.rows.resize(kRows);
    return out;
}

} // namespace lotus::exporter
