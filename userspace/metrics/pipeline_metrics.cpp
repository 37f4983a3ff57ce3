#include "metrics/pipeline_metrics.h"

#include <algorithm>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "common/utf8.h"
#include "export/summary.h"

namespace lotus::metrics {

namespace {

using prometheus::Labels;

template <typename B>
auto& family(B builder, const char* name, const char* help, prometheus::Registry& r)
{
    return builder.Name(name).Help(help).Register(r);
}

auto& counters(const char* name, const char* help, prometheus::Registry& r)
{
    return family(prometheus::BuildCounter(), name, help, r);
}
auto& histograms(const char* name, const char* help, prometheus::Registry& r)
{
    return family(prometheus::BuildHistogram(), name, help, r);
}
auto& gauges(const char* name, const char* help, prometheus::Registry& r)
{
    return family(prometheus::BuildGauge(), name, help, r);
}

const std::string& grade_help()
{
    static const std::string help = fmt::format(
        "Each training loop's graded verdict from its lotus_wait_ratio: 0 not input-bound (under {:g}), 1 moderately "
        "({:g} to {:g}), 2 highly ({:g} or more); absent until it has consumed a batch",
        exporter::kModeratelyInputBound, exporter::kModeratelyInputBound, exporter::kHighlyInputBound,
        exporter::kHighlyInputBound);
    return help;
}

double seconds(const model::Span& s) { return s.end_ns > s.start_ns ? static_cast<double>(s.end_ns - s.start_ns) / 1e9 : 0; }

std::string number(int v) { return v >= 0 ? std::to_string(v) : ""; }

// A label map's text, the key of its series in the caches (the family's name first).
std::string key_of(const void* family, const Labels& l)
{
    std::string k = std::to_string(reinterpret_cast<uintptr_t>(family));
    for (const auto& [name, value] : l) {
        k += '\x1f';
        k += name;
        k += '=';
        k += value;
    }
    return k;
}

// Empty label values are dropped: Prometheus reads an empty label as an absent one.
Labels compact(Labels l)
{
    for (auto it = l.begin(); it != l.end();)
        it = it->second.empty() ? l.erase(it) : std::next(it);
    return l;
}

} // namespace

std::string label_value(std::string_view v)
{
    // Prometheus refuses a whole scrape for one label value that is not UTF-8, and the values come from the
    // target (argv, its environment, class and function names): invalid bytes and control characters (a
    // terminal's escapes, for whoever reads the exposition) become U+FFFD, and a value is cut at kMaxLabelBytes.
    std::string out;
    size_t fits = 0; // out's length at the last code point that leaves room for the ellipsis
    for (size_t i = 0; i < v.size();) {
        size_t n = common::utf8_sequence(v, i);
        bool control = n == 1 && (static_cast<unsigned char>(v[i]) < 0x20 || v[i] == 0x7f);
        out += n && !control ? v.substr(i, n) : common::kReplacement;
        i += n ? n : 1;
        if (out.size() <= kMaxLabelBytes - 3)
            fits = out.size();
        else if (out.size() > kMaxLabelBytes) {
            out.resize(fits);
            out += "\xE2\x80\xA6"; // U+2026 (…): cut here
            break;
        }
    }
    return out;
}

const prometheus::Histogram::BucketBoundaries& duration_buckets()
{
    static const prometheus::Histogram::BucketBoundaries b = [] {
        prometheus::Histogram::BucketBoundaries out;
        for (double decade = 1e-5; decade < 10; decade *= 10)
            for (double step : {1.0, 2.5, 5.0})
                out.push_back(decade * step);
        out.push_back(10);
        return out;
    }();
    return b;
}

JobIdentity PipelineMetrics::clean(JobIdentity job)
{
    for (auto* v : {&job.node, &job.version, &job.python})
        *v = label_value(*v);
    for (auto& [name, value] : job.labels)
        value = label_value(value);
    return job;
}

PipelineMetrics::PipelineMetrics(std::shared_ptr<SharedRegistry> registry, JobIdentity job)
    : registry_(std::move(registry)), job_(clean(std::move(job))),
      samples_(counters("lotus_samples_total", "Samples through the pipeline (one call of the Compose or pipeline, or "
                        "a dataset's __getitem__ without one)", *registry_)),
      consumed_(counters("lotus_batches_consumed_total", "Batches the training loop took from its DataLoader",
                         *registry_)),
      out_of_order_(counters("lotus_batches_out_of_order_total",
                             "Batches taken after a later batch had been handed over", *registry_)),
      events_(counters("lotus_events_total", "Events the BPF programs submitted", *registry_)),
      lost_(counters("lotus_events_lost_total",
                     "Events lost (ring buffer full): the figures are short by what they carried", *registry_)),
      failures_(counters("lotus_bpf_failures_total", "Failures in the BPF programs, per failure path", *registry_)),
      cpu_(counters("lotus_cpu_seconds_total", "CPU time of the traced processes while traced, per role (as /proc "
                    "reads it at the resource readings)", *registry_)),
      folded_(counters("lotus_label_values_folded_total",
                       "Distinct op or function names of the job past its bound, whose spans count in the series "
                       "labelled op=\"other\" or function=\"other\"", *registry_)),
      ops_(histograms("lotus_op_duration_seconds", "Wall time of each op (transform) of a sample", *registry_)),
      loads_(histograms("lotus_load_duration_seconds", "Wall time of a sample's loading (file read and decode: "
                        "__getitem__ up to the pipeline call)", *registry_)),
      collates_(histograms("lotus_collate_duration_seconds", "Wall time of a batch's collation", *registry_)),
      sample_durations_(histograms("lotus_sample_duration_seconds", "Wall time of a sample's pipeline call",
                                   *registry_)),
      batches_(histograms("lotus_batch_preparation_duration_seconds",
                          "Wall time a worker took to prepare a batch (its count: batches prepared)", *registry_)),
      waits_(histograms("lotus_wait_duration_seconds",
                        "Time the training loop waited in next() for a batch", *registry_)),
      delays_(histograms("lotus_batch_delay_seconds",
                         "Time from a worker handing a batch over to the training loop taking it", *registry_)),
      functions_(histograms("lotus_function_duration_seconds", "Wall time of each call of a --span function",
                            *registry_)),
      rss_(gauges("lotus_resident_memory_bytes", "Resident memory of the traced processes per role, at the last "
                  "resource reading (shared pages counted in each process)", *registry_)),
      processes_(gauges("lotus_processes", "Traced processes alive, per role", *registry_)),
      info_(gauges("lotus_job_info", "The traced job: one series per training process (rank), value 1", *registry_)),
      wait_ratio_(gauges("lotus_wait_ratio", "Share of each training loop's time, from its first next() to its last "
                         "so far, spent waiting in next() for a batch", *registry_)),
      grade_(gauges("lotus_input_bound_grade", grade_help().c_str(), *registry_)),
      stuck_(gauges("lotus_stuck_processes", "Processes of the job inside work (a batch, a sample) that have ended no "
                    "span for their threshold (--stuck-after, or 10 x their median step, at least 10 s)", *registry_))
{
}

PipelineMetrics::Trainer PipelineMetrics::trainer(uint32_t pid, const std::map<uint32_t, model::ProcessInfo>& processes) const
{
    auto it = processes.find(pid);
    if (it == processes.end())
        return {};
    const auto& p = it->second;
    // RANK is global; the spawn index (rank) and LOCAL_RANK are local to the node.
    return {number(p.env_rank), number(p.local_rank >= 0 ? p.local_rank : p.rank)};
}

Labels PipelineMetrics::with_job(Labels l) const
{
    l.insert(job_.labels.begin(), job_.labels.end());
    l["node"] = job_.node;
    return compact(std::move(l));
}

// A process's role ("main", "trainer", "worker", a helper's as the rules name it, "child"), with its training process's ranks and its worker id.
Labels PipelineMetrics::role_labels(uint32_t pid, const std::map<uint32_t, model::ProcessInfo>& processes) const
{
    auto it = processes.find(pid);
    if (it == processes.end())
        return with_job({{"role", "child"}});
    const auto& p = it->second;
    bool worker = p.worker || p.worker_id >= 0;
    std::string role = p.consumer ? (p.root ? "main" : "trainer")
                       : worker   ? "worker"
                       : p.root   ? "main"
                       : !p.helper.empty() ? p.helper // (the rules' helpers: a bounded set)
                                           : "child";
    Trainer t = trainer(worker ? p.owner : p.consumer ? pid : 0, processes);
    return with_job({{"role", role}, {"rank", t.rank}, {"local_rank", t.local_rank},
                     {"worker", worker ? (p.worker_id >= 0 ? std::to_string(p.worker_id) : "?") : ""}});
}

std::string PipelineMetrics::bounded(BoundedNames& names, size_t bound, const char* label, std::string value)
{
    if (names.named.count(value))
        return value;
    if (names.named.size() < bound) {
        names.named.insert(value);
        return value;
    }
    if (names.folded.insert(std::hash<std::string>()(value)).second)
        counter(folded_, with_job({{"label", label}})).Increment();
    return kOtherLabel;
}

prometheus::Histogram& PipelineMetrics::histogram(prometheus::Family<prometheus::Histogram>& f, const Labels& l)
{
    auto [it, fresh] = histograms_.try_emplace(key_of(&f, l));
    if (fresh)
        it->second = {&f, registry_->acquire(f, l, duration_buckets())};
    return *it->second.metric;
}

prometheus::Counter& PipelineMetrics::counter(prometheus::Family<prometheus::Counter>& f, const Labels& l)
{
    auto [it, fresh] = counters_.try_emplace(key_of(&f, l));
    if (fresh)
        it->second = {&f, registry_->acquire(f, l)};
    return *it->second.metric;
}

void PipelineMetrics::span(const model::Span& s, const std::map<uint32_t, model::ProcessInfo>& processes)
{
    using K = model::SpanKind;
    if (s.kind == K::Native)
        return; // (the native map's business: far too many to count one by one here)
    uint32_t owner = s.owner;
    if (!owner)
        if (auto it = processes.find(s.pid); it != processes.end() && it->second.consumer)
            owner = s.pid;
    Trainer t = trainer(owner, processes);
    Labels l = with_job({{"rank", t.rank}, {"local_rank", t.local_rank}, {"dataloader", number(s.loader)}});
    auto worker_of = [&] {
        auto it = processes.find(s.pid);
        if (it == processes.end() || !(it->second.worker || it->second.worker_id >= 0))
            return std::string();
        return it->second.worker_id >= 0 ? std::to_string(it->second.worker_id) : std::string("?");
    };
    switch (s.kind) {
    case K::Sample: {
        histogram(sample_durations_, l).Observe(seconds(s));
        Labels w = l;
        if (auto id = worker_of(); !id.empty())
            w["worker"] = id;
        counter(samples_, w).Increment();
        break;
    }
    case K::Op: {
        Labels o = l;
        o["op"] = bounded(ops_named_, kMaxOpsPerJob, "op", label_value(exporter::row_name(s))); // (the target's classes)
        histogram(ops_, o).Observe(seconds(s));
        break;
    }
    case K::Py: {
        Labels o = l;
        o["function"] = bounded(functions_named_, kMaxFunctionsPerJob, "function", label_value(exporter::row_name(s)));
        histogram(functions_, o).Observe(seconds(s));
        break;
    }
    case K::Loader:
        histogram(loads_, l).Observe(seconds(s));
        break;
    case K::Collate:
        histogram(collates_, l).Observe(seconds(s));
        break;
    case K::Batch: {
        Labels w = l;
        if (auto id = worker_of(); !id.empty())
            w["worker"] = id;
        histogram(batches_, w).Observe(seconds(s));
        break;
    }
    case K::Wait:
        histogram(waits_, l).Observe(seconds(s));
        break;
    case K::Consumed:
        counter(consumed_, l).Increment();
        for (const auto& [name, value] : s.args) {
            if (name == "delay_ms")
                if (auto* d = std::get_if<model::DurationNs>(&value))
                    histogram(delays_, l).Observe(static_cast<double>(d->ns) / 1e9);
            if (name == "out_of_order")
                if (auto* b = std::get_if<bool>(&value); b && *b)
                    counter(out_of_order_, l).Increment();
        }
        break;
    case K::Native:
        break;
    }
}

void PipelineMetrics::usage(const model::UsagePoint& p, const std::map<uint32_t, model::ProcessInfo>& processes)
{
    rss_bytes_[p.pid] = static_cast<uint64_t>(p.rss_mb * 1024 * 1024);
    double cpu_s = (p.user_pct + p.system_pct) / 100 * p.interval_s;
    auto it = processes.find(p.pid);
    bool unnamed = it != processes.end() && it->second.worker && it->second.worker_id < 0;
    if (unnamed && !it->second.exited) {
        cpu_unnamed_[p.pid] += std::max(0.0, cpu_s);
        return;
    }
    if (auto held = cpu_unnamed_.find(p.pid); held != cpu_unnamed_.end()) {
        cpu_s += held->second;
        cpu_unnamed_.erase(held);
    }
    if (cpu_s > 0)
        counter(cpu_, role_labels(p.pid, processes)).Increment(cpu_s);
}

// Each training loop's waiting share and grade, as the summary computes them from the same records: one series per
// training process's labels (two of equal labels, neither with a rank: the one that waited more).
void PipelineMetrics::loops(const model::BatchTracker& batches, const std::map<uint32_t, model::ProcessInfo>& processes)
{
    std::map<std::string, std::pair<Labels, exporter::LoopFigures>> now;
    for (const auto& [pid, loop] : batches.loops()) {
        exporter::LoopFigures f = exporter::loop_figures(batches, pid);
        if (!f.grade)
            continue; // not known (no batch consumed yet): no series rather than a guessed grade
        Trainer t = trainer(pid, processes);
        Labels l = with_job({{"rank", t.rank}, {"local_rank", t.local_rank}});
        auto [it, fresh] = now.try_emplace(key_of(nullptr, l), l, f);
        if (!fresh && f.waiting_share > it->second.second.waiting_share)
            it->second.second = f;
    }
    std::map<std::string, LoopGauges> kept;
    for (const auto& [key, v] : now) {
        auto old = loop_series_.find(key);
        LoopGauges g = old != loop_series_.end()
                           ? old->second
                           : LoopGauges{registry_->acquire(wait_ratio_, v.first), registry_->acquire(grade_, v.first)};
        g.wait_ratio->Set(v.second.waiting_share);
        g.grade->Set(static_cast<double>(*v.second.grade));
        kept[key] = g;
    }
    for (const auto& [key, g] : loop_series_) // (a training process whose labels changed: its rank learnt later)
        if (!kept.count(key)) {
            registry_->release(wait_ratio_, g.wait_ratio);
            registry_->release(grade_, g.grade);
        }
    loop_series_ = std::move(kept);
}

void PipelineMetrics::stuck(size_t n)
{
    Labels l = with_job({});
    std::string key = key_of(&stuck_, l);
    auto [g, fresh] = gauges_.try_emplace(key);
    if (fresh)
        g->second = {&stuck_, registry_->acquire(stuck_, l)};
    g->second.metric->Set(static_cast<double>(n));
}

void PipelineMetrics::refresh(const std::map<uint32_t, model::ProcessInfo>& processes, const model::BatchTracker* batches)
{
    if (batches)
        loops(*batches, processes);
    // Per role: resident memory summed over its live processes, and how many there are.
    std::map<std::string, std::pair<Labels, std::pair<double, double>>> roles;
    for (auto it = rss_bytes_.begin(); it != rss_bytes_.end();) {
        auto p = processes.find(it->first);
        if (p == processes.end() || p->second.exited) {
            it = rss_bytes_.erase(it);
            continue;
        }
        Labels l = role_labels(it->first, processes);
        auto& r = roles[key_of(nullptr, l)];
        r.first = l;
        r.second.first += static_cast<double>(it->second);
        r.second.second += 1;
        ++it;
    }
    std::set<std::string> set;
    for (const auto& [k, r] : roles) {
        for (auto* f : {&rss_, &processes_}) {
            std::string key = key_of(f, r.first);
            auto [g, fresh] = gauges_.try_emplace(key);
            if (fresh)
                g->second = {f, registry_->acquire(*f, r.first)};
            g->second.metric->Set(f == &rss_ ? r.second.first : r.second.second);
            set.insert(key);
        }
    }
    for (const auto& [k, g] : gauges_) // a role none of whose processes is alive now reads 0
        if (!set.count(k) && g.family != &stuck_)
            g.metric->Set(0);
    // The info series: one per training process, else one for the job.
    std::vector<Labels> info;
    for (const auto& [pid, p] : processes) {
        if (!p.consumer)
            continue;
        Trainer t = trainer(pid, processes);
        info.push_back(with_job({{"version", job_.version}, {"python", job_.python}, {"pid", std::to_string(job_.pid)},
                                 {"rank", t.rank}, {"local_rank", t.local_rank}, {"world_size", number(p.world_size)}}));
    }
    if (info.empty())
        info.push_back(with_job({{"version", job_.version}, {"python", job_.python}, {"pid", std::to_string(job_.pid)}}));
    std::map<std::string, prometheus::Gauge*> now;
    for (const auto& l : info) {
        std::string key = key_of(nullptr, l);
        if (now.count(key))
            continue; // (two training processes of equal ranks: one series, owned once)
        auto old = info_series_.find(key);
        (now[key] = old != info_series_.end() ? old->second : registry_->acquire(info_, l))->Set(1);
    }
    for (const auto& [key, g] : info_series_)
        if (!now.count(key))
            registry_->release(info_, g);
    info_series_ = std::move(now);
}

void PipelineMetrics::bump(prometheus::Family<prometheus::Counter>& f, const Labels& l, uint64_t total, uint64_t& last)
{
    auto& c = counter(f, l); // (made at the first call: a zero is a figure too)
    if (total > last)
        c.Increment(static_cast<double>(total - last));
    last = std::max(last, total);
}

PipelineMetrics::~PipelineMetrics() { release_all(false); }

void PipelineMetrics::remove_series() { release_all(true); }

void PipelineMetrics::release_all(bool remove)
{
    // Only what this job owns alone goes (see acquire): a job with equal labels keeps its series.
    for (auto& [k, h] : histograms_)
        registry_->release(*h.family, h.metric, remove);
    for (auto& [k, c] : counters_)
        registry_->release(*c.family, c.metric, remove);
    for (auto& [k, g] : gauges_)
        registry_->release(*g.family, g.metric, remove);
    for (const auto& [k, g] : info_series_)
        registry_->release(info_, g, remove);
    for (const auto& [k, g] : loop_series_) {
        registry_->release(wait_ratio_, g.wait_ratio, remove);
        registry_->release(grade_, g.grade, remove);
    }
    loop_series_.clear();
    histograms_.clear();
    counters_.clear();
    gauges_.clear();
    info_series_.clear();
}

void PipelineMetrics::capture(const CaptureFigures& f)
{
    bump(events_, with_job({}), f.events, events_seen_);
    bump(lost_, with_job({}), f.lost, lost_seen_);
    for (const auto& [name, n] : f.failures)
        bump(failures_, with_job({{"failure", name}}), n, failures_seen_[name]);
}

} // namespace lotus::metrics
