#include "summary.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <tuple>

#include "common/utf8.h"
#include "export/json.h"

namespace lotus::exporter {

double percentile(const std::vector<uint64_t>& sorted, double q)
{
    if (sorted.empty())
        return 0;
    size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
    rank = std::clamp<size_t>(rank, 1, sorted.size());
    return static_cast<double>(sorted[rank - 1]);
}

DurationStats stats_of(const common::QuantileSketch& d)
{
    DurationStats s;
    if (!d.count())
        return s;
    double n = static_cast<double>(d.count());
    s.count = d.count();
    s.total_ms = d.total() / 1e6;
    s.mean_ms = d.total() / n / 1e6;
    s.p50_ms = d.quantile(0.50) / 1e6;
    s.p95_ms = d.quantile(0.95) / 1e6;
    s.p99_ms = d.quantile(0.99) / 1e6;
    s.p25_ms = d.quantile(0.25) / 1e6;
    s.p75_ms = d.quantile(0.75) / 1e6;
    s.min_ms = static_cast<double>(d.min()) / 1e6;
    s.max_ms = static_cast<double>(d.max()) / 1e6;
    double mean_ns = d.total() / n;
    s.std_ms = std::sqrt(std::max(0.0, d.sum_squares() / n - mean_ns * mean_ns)) / 1e6;
    return s;
}

DurationStats stats_of(const std::vector<uint64_t>& durations_ns)
{
    DurationSeries d;
    for (uint64_t v : durations_ns)
        d.add(v);
    return stats_of(d);
}

std::string row_name(const model::Span& s)
{
    return model::op_row_name(s.container.empty() ? s.name : s.name + " (in " + s.container + ")");
}

const std::string& row_name(const model::Span& s, std::string& scratch)
{
    return s.container.empty() && model::op_row_is_name(s.name) ? s.name : (scratch = row_name(s));
}

void print_wrapped(FILE* out, const std::string& text, size_t indent, size_t width)
{
    size_t start = text.find_first_not_of(' ');
    if (start == std::string::npos)
        start = text.size();
    fmt::print(out, "{}", text.substr(0, start)); // its own leading spaces
    size_t col = start, first = start;
    while (start < text.size()) {
        size_t end = text.find(' ', start);
        if (end == std::string::npos)
            end = text.size();
        std::string word = text.substr(start, end - start);
        if (col > first && col + 1 + word.size() > width) {
            fmt::print(out, "\n{}", std::string(indent, ' '));
            col = first = indent;
        } else if (col > first) {
            fmt::print(out, " ");
            col++;
        }
        fmt::print(out, "{}", word);
        col += word.size();
        start = end + 1;
    }
    fmt::print(out, "\n");
}

double share(uint64_t part, uint64_t whole) { return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0; }

// Mean per-sample pipeline time of a training process's DataLoaders (the "sample" rows).
static double per_sample_ms(const Summary& summary, uint32_t owner)
{
    double total = 0;
    uint64_t n = 0;
    for (const auto& [key, rows] : summary.groups())
        if (key.owner == owner)
            for (const auto& r : rows)
                if (r.part == Part::Sample)
                    total += r.stats.total_ms, n += r.stats.count;
    return n ? total / static_cast<double>(n) : 0;
}

static std::string short_duration(double ms)
{
    return ms >= 1000 ? fmt::format("{:.1f} s", ms / 1000) : ms >= 10 ? fmt::format("{:.0f} ms", ms)
                                                                       : fmt::format("{:.2f} ms", ms);
}

// Where most of a part's time is a few calls far longer than its others (each at least 100 times the mean of the
// calls outside its kLongest longest, and 10 ms), a sentence saying so: those calls are not the part's usual cost,
// and shrinking the part's typical call would not remove them. Empty otherwise, and where more than kLongest-1
// calls may be such (the sentence could not count them), or with too few calls to tell.
static std::string few_long_calls(const std::vector<LongCall>& calls, uint64_t count, double total_ms)
{
    if (calls.empty() || count < 8 * Summary::kLongest)
        return {};
    double listed_ms = 0;
    for (const auto& c : calls)
        listed_ms += static_cast<double>(c.ns) / 1e6;
    double floor_ms = std::max(100 * (total_ms - listed_ms) / static_cast<double>(count - calls.size()), 10.0);
    size_t n = 0;
    double long_ms = 0;
    while (n < calls.size() && static_cast<double>(calls[n].ns) / 1e6 >= floor_ms)
        long_ms += static_cast<double>(calls[n++].ns) / 1e6;
    if (n == 0 || n == calls.size() || long_ms * 2 < total_ms)
        return {};
    double longest = static_cast<double>(calls[0].ns) / 1e6, shortest = static_cast<double>(calls[n - 1].ns) / 1e6;
    std::string each = n == 1   ? short_duration(longest)
                       : n == 2 ? fmt::format("{} and {}", short_duration(shortest), short_duration(longest))
                                : fmt::format("{} to {}", short_duration(shortest), short_duration(longest));
    std::string where = calls[0].sample_id ? fmt::format("sample_id {} in PID {}", calls[0].sample_id, calls[0].pid)
                                           : fmt::format("in PID {}", calls[0].pid);
    return fmt::format(" {} of its {} calls took {:.0f} % of that ({}; its other calls {} on average): not its usual "
                       "cost; look at them in the trace first (the longest: {}).",
                       n, count, 100 * long_ms / total_ms, each,
                       short_duration((total_ms - long_ms) / static_cast<double>(count - n)), where);
}

// The model's advice on the number of workers, with its figures: more where the curve's best is over 5 % above
// today's configuration as modelled and the loop waited (moderately input-bound or more); fewer where fewer give
// within 5 % of the best; else none.
static std::string workers_advice(const WorkerModel& m, double waiting_pct)
{
    const ModelPoint* today = m.at(m.in.workers);
    const ModelPoint* best = m.at(m.suggested);
    if (!today || !best)
        return {};
    const auto& in = m.in;
    std::string figures = fmt::format(
        "a worker takes {:.2f} ms per sample with a CPU to itself, a sample costs {:.2f} ms of CPU in all (the workers' "
        "{:.2f}, the training process's {:.2f}{}), the training loop's own work {:.2f} ms per sample, and the job may "
        "use {:g} CPU(s){}",
        in.worker_s * 1e3, in.cpu_s() * 1e3, in.worker_cpu_s * 1e3, in.main_cpu_s * 1e3,
        in.main_cpu_read ? "" : ", its loop time: its CPU was not read", in.loop_s * 1e3, in.cpus,
        in.others_cpus < 0 ? " (what other processes took of them was not read: the estimate assumes none)"
                           : fmt::format(", of which other processes (this tracer's included) took {:.2f} meanwhile (the "
                                         "estimate assumes they go on doing so)",
                                         in.others_cpus));
    auto bound = [](Bound b) {
        return b == Bound::Workers ? "the workers" : b == Bound::Cpus ? "the CPUs" : "the training loop itself";
    };
    if (m.suggested > in.workers && best->samples_per_s > 1.05 * today->samples_per_s &&
        waiting_pct >= kModeratelyInputBound * 100)
        return fmt::format("More DataLoader workers should help: with {} the model of this pipeline gives about {:.0f} "
                           "samples/s, against {:.0f} for today's {} ({:.0f} measured); beyond that {} bound it. Its "
                           "figures, from this run: {} (docs/worker-estimate.md; its error is stated there).",
                           m.suggested, best->samples_per_s, today->samples_per_s, in.workers, m.measured_per_s,
                           bound(best->bound), figures);
    if (m.suggested < in.workers)
        return fmt::format("Fewer DataLoader workers would do: with {} the model of this pipeline gives about {:.0f} "
                           "samples/s, within 5 % of the most it gives ({:.0f} for today's {}, {:.0f} measured), as {} "
                           "bound it. Its figures, from this run: {} (docs/worker-estimate.md).",
                           m.suggested, best->samples_per_s, today->samples_per_s, in.workers, m.measured_per_s,
                           bound(today->bound), figures);
    if (waiting_pct >= kModeratelyInputBound * 100)
        return fmt::format("More DataLoader workers would not help: the model of this pipeline gives at most {:.0f} "
                           "samples/s ({:.0f} for today's {}, {:.0f} measured), as {} bound it; make the pipeline "
                           "cheaper instead. Its figures, from this run: {} (docs/worker-estimate.md).",
                           best->samples_per_s, today->samples_per_s, in.workers, m.measured_per_s,
                           bound(today->bound), figures);
    return {};
}

// What the numbers of one training loop suggest doing, each with its figures: the part of per-sample time that
// dominates, whether more (or fewer) DataLoader workers would help (the model of worker_model.h), and whether the
// pipeline ran mostly off-CPU.
static std::vector<std::string> advice_for(uint32_t pid, double waiting_pct, const Summary& summary,
                                           const std::map<uint32_t, model::ProcessInfo>& processes, double cpus,
                                           std::optional<WorkerModel>& estimate)
{
    std::vector<std::string> out;
    struct Sums {
        Row row; // (its stats unused)
        double total_ms = 0, cpu_ms = 0, cpu_wall_ms = 0; // cpu_*: over the calls whose on-CPU time was measured
        uint64_t count = 0;
    };
    std::map<std::string, Sums> parts; // by row name (those of different parts differ): its DataLoaders together
    for (const auto& [key, rows] : summary.groups()) {
        if (key.owner != pid)
            continue;
        for (const auto& r : rows) {
            auto& p = parts[r.name];
            p.row = r;
            p.total_ms += r.stats.total_ms;
            p.count += r.stats.count;
            if (r.stats.cpu_ms >= 0) {
                p.cpu_ms += r.stats.cpu_ms * static_cast<double>(r.stats.count);
                p.cpu_wall_ms += r.stats.total_ms;
            }
        }
    }
    // Per sample: its loading, its ops and its share of the collation.
    const Sums* sample = nullptr;
    const Sums* top = nullptr;
    double whole = 0;
    for (const auto& [name, p] : parts) {
        if (p.row.part == Part::Sample) {
            sample = &p;
            continue;
        }
        whole += p.total_ms;
        if (p.total_ms > (top ? top->total_ms : 0))
            top = &p;
    }
    double samples = sample ? static_cast<double>(sample->count) : 0;
    if (samples > 0 && whole > 0 && top) {
        double top_ms = top->total_ms, pct = 100 * top_ms / whole;
        const std::string few = few_long_calls(summary.longest(pid, top->row), top->count, top_ms);
        if (top->row.part == Part::Loader && summary.loaders_read_files())
            out.push_back(fmt::format("Loading (reading and decoding each file) takes the most time per sample: {:.2f} "
                                      "ms of {:.2f} ms ({:.0f} %).{}{}",
                                      top_ms / samples, whole / samples, pct, few,
                                      pct >= 50 && few.empty() ? " Decoding dominates: smaller or pre-resized images, "
                                                                 "or a faster decoder, would help most."
                                                               : ""));
        else if (top->row.part == Part::Loader)
            out.push_back(fmt::format("Loading (the dataset's own work before the pipeline) takes the most time per "
                                      "sample: {:.2f} ms of {:.2f} ms ({:.0f} %).{}",
                                      top_ms / samples, whole / samples, pct, few));
        else if (top->row.part == Part::Collate)
            out.push_back(fmt::format("Collation (each batch's collate_fn: from its last sample's end to the batch's "
                                      "end) takes the most time per sample: {:.2f} ms of {:.2f} ms ({:.0f} %; each "
                                      "batch's collation divided among its samples).{}",
                                      top_ms / samples, whole / samples, pct, few));
        else
            out.push_back(fmt::format("{} takes the most time per sample: {:.2f} ms of {:.2f} ms ({:.0f} %; loading and "
                                      "collation included){}",
                                      top->row.name, top_ms / samples, whole / samples, pct,
                                      few.empty() ? ": the op to make cheaper first." : "." + few));
    }
    std::set<int> ids;
    uint64_t busy = 0, seen = 0;
    bool workers_idle = false; // an input-bound loop's workers mostly idle: batches held up after they were made
    for (const auto& [wpid, p] : processes) {
        if (p.owner != pid || p.batches == 0 || wpid == pid)
            continue;
        ids.insert(p.worker_id);
        busy += p.busy_ns;
        seen += p.seen_ns(); // (folded processes included, as in busy)
    }
    auto self = processes.find(pid);
    if (waiting_pct >= kHighlyInputBound * 100 && ids.empty() && self != processes.end() && self->second.batches > 0) {
        out.push_back(fmt::format("The training loop builds its batches itself (num_workers=0): DataLoader workers would "
                                  "take that work off it{}.",
                                  cpus ? fmt::format(" (the job may use {} CPU(s))", cpus) : ""));
    } else if (waiting_pct >= kHighlyInputBound * 100 && !ids.empty() && seen) {
        double b = 100.0 * static_cast<double>(busy) / static_cast<double>(seen);
        size_t n = ids.size();
        workers_idle = b < 80;
        if (b < 80)
            out.push_back(fmt::format("The {} worker(s) were busy only {:.0f} % of their time while the training loop "
                                      "waited: batches were held up after they were made (the result queue, pin_memory, "
                                      "prefetch_factor), so more workers would not help.",
                                      n, b));
        else if (!cpus)
            out.push_back(fmt::format("The {} worker(s) were busy {:.0f} % of their time; whether more would help depends "
                                      "on the CPUs the job may use, which this record does not say.",
                                      n, b));
    }
    if (!ids.empty() && cpus)
        if (auto in = summary.model_figures().inputs(pid, cpus, processes, summary.process_usage())) {
            unsigned n = static_cast<unsigned>(ids.size());
            unsigned most = std::min(64u, std::max(n + 4, static_cast<unsigned>(std::ceil(cpus)) + 2));
            estimate = worker_model(*in, most);
        }
    if (estimate && !estimate->curve.empty() && !workers_idle)
        if (auto line = workers_advice(*estimate, waiting_pct); !line.empty())
            out.push_back(std::move(line));
    if (sample && sample->cpu_wall_ms > 0) {
        double on = 100 * sample->cpu_ms / sample->cpu_wall_ms;
        if (on < 70)
            out.push_back(fmt::format("The pipeline ran on a CPU only {:.0f} % of its wall time: the rest it waited for a "
                                      "CPU (more busy threads than {}) or for I/O, and the times above include that.",
                                      on, cpus ? fmt::format("the {} CPU(s)", cpus) : "CPUs"));
    }
    return out;
}

std::optional<InputBound> input_bound_grade(uint64_t batches, double seconds, double waiting_share)
{
    if (!batches || !(seconds > 0))
        return std::nullopt;
    return waiting_share >= kHighlyInputBound     ? InputBound::Highly
           : waiting_share >= kModeratelyInputBound ? InputBound::Moderately
                                                    : InputBound::Not;
}

const char* input_bound_key(InputBound g)
{
    return g == InputBound::Highly ? "highly" : g == InputBound::Moderately ? "moderately" : "not";
}

const char* input_bound_text(InputBound g)
{
    return g == InputBound::Highly       ? "highly input-bound"
           : g == InputBound::Moderately ? "moderately input-bound"
                                         : "not input-bound";
}

LoopFigures loop_figures(const model::BatchTracker& batches, uint32_t pid)
{
    LoopFigures f;
    auto loop = batches.loops().find(pid);
    if (loop == batches.loops().end())
        return f;
    for (const auto& [key, b] : batches.stats())
        if (key.first == pid)
            f.batches += b.wait_ns.count();
    const auto& l = loop->second;
    double span = static_cast<double>(l.last_ns > l.first_ns ? l.last_ns - l.first_ns : 0);
    f.waiting_share = span > 0 ? static_cast<double>(l.wait_ns) / span : 0;
    f.seconds = span / 1e9;
    f.grade = input_bound_grade(f.batches, f.seconds, f.waiting_share);
    return f;
}

// A waiting share in % as the verdict prints it: rounded to a whole number, unless that would read as the other
// side of a threshold (19.6 % is not "20 %"): then cut to one decimal.
static std::string waiting_pct_text(double share)
{
    double pct = share * 100;
    std::string whole = fmt::format("{:.0f}", pct);
    double shown = std::stod(whole) / 100;
    for (double t : {kModeratelyInputBound, kHighlyInputBound})
        if ((shown >= t) != (share >= t))
            return fmt::format("{:.1f}", std::floor(pct * 10) / 10);
    return whole;
}

static BatchSummary summarize(const model::BatchStats& b, GroupKey key)
{
    BatchSummary s;
    s.key = key;
    s.prepare = stats_of(b.prepare_ns);
    s.wait = stats_of(b.wait_ns);
    s.delay = stats_of(b.delay_ns);
    s.out_of_order = b.out_of_order;
    s.wait_le_1ms = b.wait_le_1ms;
    s.wait_1_500ms = b.wait_1_500ms;
    s.wait_gt_500ms = b.wait_gt_500ms;
    s.delay_le_1ms = b.delay_le_1ms;
    s.delay_1_500ms = b.delay_1_500ms;
    s.delay_gt_500ms = b.delay_gt_500ms;
    s.unnamed = b.unnamed;
    s.unmatched = b.unmatched;
    s.arrival_order = b.arrival_order;
    s.misnamed = b.misnamed;
    s.passes_before = b.passes_before;
    s.joined_partial = b.joined_partial;
    s.partial_batches = b.partial_batches;
    return s;
}

DataLoaderReport summarize_batches(const model::BatchTracker& batches,
                                   const std::map<uint32_t, model::ProcessInfo>& processes, const Summary& summary,
                                   double cpus, const model::WaitCauses* causes)
{
    DataLoaderReport out;
    for (const auto& [key, b] : batches.stats()) {
        out.loaders.push_back(summarize(b, GroupKey{key.first, key.second}));
        if (causes)
            out.loaders.back().causes = causes->totals(key);
    }
    size_t loops_seen = batches.loops().size();
    for (const auto& [pid, loop] : batches.loops()) {
        LoopSummary l;
        l.pid = pid;
        model::BatchStats all;
        for (const auto& [key, b] : batches.stats()) {
            if (key.first != pid)
                continue;
            all.merge(b);
        }
        l.all = summarize(all, GroupKey{pid, -1});
        if (causes)
            l.all.causes = causes->totals_of_owner(pid);
        LoopFigures f = loop_figures(batches, pid);
        l.batches = f.batches;
        l.waiting_share = f.waiting_share;
        l.seconds = f.seconds;
        l.grade = f.grade;
        std::set<int> ids; // worker ids, not processes: each epoch may fork new ones
        for (const auto& [wpid, p] : processes)
            if (p.owner == pid && p.batches > 0)
                ids.insert(p.worker_id);
        std::string who = loops_seen > 1 ? " of " + model::process_label(processes, pid) : "";
        double pct = l.waiting_share * 100;
        // The grade and its thresholds, said where it is given.
        std::string waited = fmt::format("The training loop{} waited for data {} % of the time", who,
                                         waiting_pct_text(l.waiting_share));
        auto ladder = fmt::format("{:g} % or more: highly; {:g}-{:g} %: moderately; under {:g} %: not",
                                  kHighlyInputBound * 100, kModeratelyInputBound * 100, kHighlyInputBound * 100,
                                  kModeratelyInputBound * 100);
        if (l.batches == 0)
            l.verdict = fmt::format("The training loop{} consumed no DataLoader batch while tracing: whether it is "
                                    "input-bound is not known.",
                                    who);
        else if (!l.grade)
            l.verdict = fmt::format("The training loop{} consumed {} batch(es) in no measurable time: whether it is "
                                    "input-bound is not known.",
                                    who, l.batches);
        else if (*l.grade == InputBound::Highly)
            l.verdict = fmt::format("{}: highly input-bound ({}); the data pipeline is the bottleneck ({} worker(s) x "
                                    "{:.2f} ms/sample in the pipeline).",
                                    waited, ladder, ids.size(), per_sample_ms(summary, pid));
        else if (*l.grade == InputBound::Moderately)
            l.verdict = fmt::format("{}: moderately input-bound ({}); the data pipeline holds it back part of the time "
                                    "({} worker(s) x {:.2f} ms/sample in the pipeline).",
                                    waited, ladder, ids.size(), per_sample_ms(summary, pid));
        else
            l.verdict = fmt::format("{}: not input-bound ({}); the data pipeline keeps up.", waited, ladder);
        if (l.batches)
            l.advice = advice_for(pid, pct, summary, processes, cpus, l.estimate);
        out.loops.push_back(l);
    }
    return out;
}

void Summary::add(const model::Span& s)
{
    model_.add(s);
    if (s.kind != model::SpanKind::Sample && s.kind != model::SpanKind::Op && s.kind != model::SpanKind::Loader &&
        s.kind != model::SpanKind::Collate && s.kind != model::SpanKind::Py)
        return; // batches and waits have their own section
    slow_.add(s);
    if (s.kind == model::SpanKind::Sample) {
        first_sample_ns_ = std::min(first_sample_ns_, s.start_ns);
        last_sample_ns_ = std::max(last_sample_ns_, s.end_ns);
    }
    if (s.kind == model::SpanKind::Loader) {
        loaders_++;
        for (const auto& [k, v] : s.args)
            files_opened_ += k == "path";
    }
    GroupKey key{s.owner, s.loader};
    auto [g, fresh] = groups_.try_emplace(key);
    if (fresh)
        group_order_.push_back(key);
    uint64_t dur = s.end_ns > s.start_ns ? s.end_ns - s.start_ns : 0;
    static const std::string kSample = "sample", kLoader = "loader", kCollate = "collate";
    std::string scratch;
    const std::string& name = s.kind == model::SpanKind::Sample    ? kSample
                              : s.kind == model::SpanKind::Loader  ? kLoader
                              : s.kind == model::SpanKind::Collate ? kCollate
                                                                   : row_name(s, scratch);
    for (Group* grp : {&all_, &g->second}) {
        if (s.has_counters) {
            auto& c = grp->counters[name];
            c.cpu_ns += s.counters.cpu_ns;
            c.wall_ns += dur;
            c.minor_faults += s.counters.minor_faults;
            for (unsigned k = 0; k < model::kMaxPerfCounters; k++)
                c.perf[k] += s.counters.perf[k];
            c.count++;
        }
        if (s.kind == model::SpanKind::Sample || s.kind == model::SpanKind::Loader ||
            s.kind == model::SpanKind::Collate) {
            (s.kind == model::SpanKind::Sample ? grp->samples : s.kind == model::SpanKind::Loader ? grp->loaders
                                                                                                 : grp->collates)
                .add(dur);
            continue;
        }
        auto [it, first] = grp->durations.try_emplace(name);
        if (first)
            grp->order.push_back(name);
        it->second.add(dur);
    }
    if (s.kind == model::SpanKind::Sample)
        return;
    auto& top = g->second.longest[name];
    if (top.size() < kLongest || dur > top.back().ns) {
        LongCall c{dur, s.pid, s.sample_id};
        top.insert(std::upper_bound(top.begin(), top.end(), c,
                                    [](const LongCall& a, const LongCall& b) { return a.ns > b.ns; }),
                   c);
        if (top.size() > kLongest)
            top.pop_back();
    }
}

std::vector<LongCall> Summary::longest(uint32_t owner, const Row& row) const
{
    std::vector<LongCall> out;
    for (const auto& [key, g] : groups_)
        if (auto it = g.longest.find(row.name); key.owner == owner && it != g.longest.end())
            out.insert(out.end(), it->second.begin(), it->second.end());
    std::stable_sort(out.begin(), out.end(), [](const LongCall& a, const LongCall& b) { return a.ns > b.ns; });
    if (out.size() > kLongest)
        out.resize(kLongest);
    return out;
}

Rows Summary::rows_of(const Group& g) const
{
    Rows out;
    // Ops in first-seen order, then the loading and the collation around them, then the whole pipeline.
    for (const auto& name : g.order)
        out.push_back({Part::Op, name, stats_of(g.durations.at(name))});
    if (g.loaders.count())
        out.push_back({Part::Loader, "loader", stats_of(g.loaders)});
    if (g.collates.count())
        out.push_back({Part::Collate, "collate", stats_of(g.collates)});
    if (g.samples.count())
        out.push_back({Part::Sample, "sample", stats_of(g.samples)});
    for (auto& [part, name, st] : out) {
        auto c = g.counters.find(name);
        if (c == g.counters.end() || !c->second.count)
            continue;
        st.cpu_ms = static_cast<double>(c->second.cpu_ns) / 1e6 / static_cast<double>(c->second.count);
        st.on_cpu_pct = c->second.wall_ns ? 100.0 * static_cast<double>(c->second.cpu_ns) / static_cast<double>(c->second.wall_ns) : 0;
        st.minor_faults = static_cast<double>(c->second.minor_faults) / static_cast<double>(c->second.count);
    }
    return out;
}

Rows Summary::rows() const { return rows_of(all_); }

double Summary::samples_per_s() const
{
    if (all_.samples.count() < 2 || last_sample_ns_ <= first_sample_ns_)
        return 0;
    return static_cast<double>(all_.samples.count()) / (static_cast<double>(last_sample_ns_ - first_sample_ns_) / 1e9);
}

void Summary::merge_group(const GroupKey& from, const GroupKey& into)
{
    slow_.merge_group(from.owner, from.loader, into.owner, into.loader);
    auto f = groups_.find(from);
    if (f == groups_.end() || from == into)
        return;
    auto [t, fresh] = groups_.try_emplace(into);
    Group& g = t->second;
    for (const auto& name : f->second.order) {
        auto [d, first] = g.durations.try_emplace(name);
        if (first)
            g.order.push_back(name);
        d->second.merge(f->second.durations.at(name));
    }
    g.loaders.merge(f->second.loaders);
    g.collates.merge(f->second.collates);
    g.samples.merge(f->second.samples);
    for (const auto& [name, c] : f->second.counters) {
        auto& to = g.counters[name];
        to.cpu_ns += c.cpu_ns, to.wall_ns += c.wall_ns, to.minor_faults += c.minor_faults, to.count += c.count;
        for (unsigned k = 0; k < model::kMaxPerfCounters; k++)
            to.perf[k] += c.perf[k];
    }
    for (const auto& [name, calls] : f->second.longest) {
        auto& top = g.longest[name];
        top.insert(top.end(), calls.begin(), calls.end());
        std::stable_sort(top.begin(), top.end(), [](const LongCall& a, const LongCall& b) { return a.ns > b.ns; });
        if (top.size() > kLongest)
            top.resize(kLongest);
    }
    groups_.erase(f);
    auto at_from = std::find(group_order_.begin(), group_order_.end(), from);
    auto at_into = std::find(group_order_.begin(), group_order_.end(), into);
    if (fresh || at_from < at_into) { // (the pass in flight came first)
        if (at_into != group_order_.end())
            group_order_.erase(at_into);
        at_from = std::find(group_order_.begin(), group_order_.end(), from);
        *at_from = into;
    } else {
        group_order_.erase(at_from);
    }
}

std::vector<std::pair<GroupKey, Rows>> Summary::groups() const
{
    std::vector<std::pair<GroupKey, Rows>> out;
    for (const auto& key : group_order_)
        out.emplace_back(key, rows_of(groups_.at(key)));
    return out;
}

} // namespace lotus::exporter
