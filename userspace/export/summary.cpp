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

static double share(uint64_t part, uint64_t whole) { return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0; }

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

// What the numbers of one training loop suggest doing, each with its figures: the part of per-sample time that
// dominates, whether more DataLoader workers would help (their busy share, the CPUs the job may use), and whether
// the pipeline ran mostly off-CPU.
static std::vector<std::string> advice_for(uint32_t pid, double waiting_pct, const Summary& summary,
                                           const std::map<uint32_t, model::ProcessInfo>& processes, unsigned cpus)
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
    for (const auto& [wpid, p] : processes) {
        if (p.owner != pid || p.batches == 0 || wpid == pid)
            continue;
        ids.insert(p.worker_id);
        busy += p.busy_ns;
        seen += p.seen_ns(); // (folded processes included, as in busy)
    }
    auto self = processes.find(pid);
    if (waiting_pct >= 20 && ids.empty() && self != processes.end() && self->second.batches > 0) {
        out.push_back(fmt::format("The training loop builds its batches itself (num_workers=0): DataLoader workers would "
                                  "take that work off it{}.",
                                  cpus ? fmt::format(" (the job may use {} CPU(s))", cpus) : ""));
    } else if (waiting_pct >= 20 && !ids.empty() && seen) {
        double b = 100.0 * static_cast<double>(busy) / static_cast<double>(seen);
        size_t n = ids.size();
        if (b < 80)
            out.push_back(fmt::format("The {} worker(s) were busy only {:.0f} % of their time while the training loop "
                                      "waited: batches were held up after they were made (the result queue, pin_memory, "
                                      "prefetch_factor), so more workers would not help.",
                                      n, b));
        else if (!cpus)
            out.push_back(fmt::format("The {} worker(s) were busy {:.0f} % of their time; whether more would help depends "
                                      "on the CPUs the job may use, which this record does not say.",
                                      n, b));
        else if (n + 1 < cpus)
            out.push_back(fmt::format("More DataLoader workers should help: the {} worker(s) were busy {:.0f} % of their "
                                      "time and the job may use {} CPUs (try num_workers up to {}).",
                                      n, b, cpus, cpus - 1));
        else
            out.push_back(fmt::format("More workers would not help: {} worker(s) and the training loop already have the "
                                      "{} CPU(s) the job may use; make the pipeline cheaper instead.",
                                      n, cpus));
    }
    if (sample && sample->cpu_wall_ms > 0) {
        double on = 100 * sample->cpu_ms / sample->cpu_wall_ms;
        if (on < 70)
            out.push_back(fmt::format("The pipeline ran on a CPU only {:.0f} % of its wall time: the rest it waited for a "
                                      "CPU (more busy threads than {}) or for I/O, and the times above include that.",
                                      on, cpus ? fmt::format("the {} CPU(s)", cpus) : "CPUs"));
    }
    return out;
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
    return s;
}

DataLoaderReport summarize_batches(const model::BatchTracker& batches,
                                   const std::map<uint32_t, model::ProcessInfo>& processes, const Summary& summary,
                                   unsigned cpus)
{
    DataLoaderReport out;
    for (const auto& [key, b] : batches.stats())
        out.loaders.push_back(summarize(b, GroupKey{key.first, key.second}));
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
        l.batches = all.wait_ns.count();
        double span = static_cast<double>(loop.last_ns > loop.first_ns ? loop.last_ns - loop.first_ns : 0);
        l.waiting_share = span > 0 ? static_cast<double>(loop.wait_ns) / span : 0;
        std::set<int> ids; // worker ids, not processes: each epoch may fork new ones
        for (const auto& [wpid, p] : processes)
            if (p.owner == pid && p.batches > 0)
                ids.insert(p.worker_id);
        std::string who = loops_seen > 1 ? " of " + model::process_label(processes, pid) : "";
        double pct = l.waiting_share * 100;
        if (l.batches == 0)
            l.verdict = fmt::format("The training loop{} consumed no DataLoader batch while tracing.", who);
        else if (pct >= 20)
            l.verdict = fmt::format("The training loop{} waited for data {:.0f} % of the time: input-bound; the data "
                                    "pipeline is the bottleneck ({} worker(s) x {:.2f} ms/sample in the pipeline).",
                                    who, pct, ids.size(), per_sample_ms(summary, pid));
        else
            l.verdict = fmt::format("The training loop{} waited for data {:.0f} % of the time: not input-bound; the "
                                    "data pipeline keeps up.",
                                    who, pct);
        if (l.batches)
            l.advice = advice_for(pid, pct, summary, processes, cpus);
        out.loops.push_back(l);
    }
    return out;
}

void Summary::add(const model::Span& s)
{
    if (s.kind != model::SpanKind::Sample && s.kind != model::SpanKind::Op && s.kind != model::SpanKind::Loader &&
        s.kind != model::SpanKind::Collate && s.kind != model::SpanKind::Py)
        return; // batches and waits have their own section
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
    const std::string name = s.kind == model::SpanKind::Sample   ? "sample"
                             : s.kind == model::SpanKind::Loader  ? "loader"
                             : s.kind == model::SpanKind::Collate ? "collate"
                                                                  : row_name(s);
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

std::vector<std::pair<GroupKey, Rows>> Summary::groups() const
{
    std::vector<std::pair<GroupKey, Rows>> out;
    for (const auto& key : group_order_)
        out.emplace_back(key, rows_of(groups_.at(key)));
    return out;
}

static double busy_pct(const model::ProcessInfo& p)
{
    return p.seen_ns() ? 100.0 * static_cast<double>(p.busy_ns) / static_cast<double>(p.seen_ns()) : 0;
}

// A row other exited processes of its role were folded into: how many it stands for, and the first of their pids.
static void add_folded(nlohmann::ordered_json& o, const model::ProcessInfo& p)
{
    if (!p.folded)
        return;
    auto pids = nlohmann::ordered_json::array();
    for (uint32_t pid : p.folded_pids)
        pids.push_back(pid);
    o["processes"] = p.processes();
    o["folded_pids"] = std::move(pids);
}

static std::string group_title(const GroupKey& k, const std::map<uint32_t, model::ProcessInfo>& processes)
{
    if (!k.owner)
        return "Outside any DataLoader that was seen";
    std::string who = model::process_label(processes, k.owner);
    if (k.loader < 0)
        return fmt::format("DataLoader ? of {} (its iterator was made before tracing began)", who);
    return fmt::format("DataLoader {} of {}", k.loader, who);
}

static void print_rows(FILE* out, const Rows& r)
{
    fmt::print(out, "{:<28} {:>8} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>9} {:>12}\n", "op", "count", "mean ms",
               "p50 ms", "p95 ms", "p99 ms", "total ms", "on-CPU ms", "on-CPU %", "faults/call");
    bool measured = false;
    for (const auto& row : r) {
        const DurationStats& s = row.stats;
        std::string cpu = s.cpu_ms < 0 ? "-" : fmt::format("{:.3f}", s.cpu_ms);
        std::string pct = s.on_cpu_pct < 0 ? "-" : fmt::format("{:.0f}", s.on_cpu_pct);
        std::string flt = s.minor_faults < 0 ? "-" : fmt::format("{:.1f}", s.minor_faults);
        measured |= s.cpu_ms >= 0;
        fmt::print(out, "{:<28} {:>8} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>12.1f} {:>10} {:>9} {:>12}\n",
                   row.label(), s.count, s.mean_ms, s.p50_ms, s.p95_ms, s.p99_ms, s.total_ms, cpu, pct, flt);
    }
    print_wrapped(out, fmt::format("(wall-clock time per call; p50/p95/p99 exact up to {} calls, within 1 % beyond; loader: from "
                    "the previous sample's end to its pipeline call, the dataset's work such as reading and decoding "
                    "the file; collate: the last sample's end to the batch's end{})",
               common::QuantileSketch::kExactLimit,
               measured ? "; on-CPU: the thread's time on a CPU during the call, low % = it waited for a CPU or for "
                          "I/O; faults/call: minor page faults"
                        : ""));
}

static void print_batches(FILE* out, const BatchSummary& b)
{
    if (b.prepare.count)
        print_wrapped(out, fmt::format("batches prepared by the workers: {}; time to prepare one, ms: mean {:.2f}, std {:.2f} "
                        "({:.0f} % of the mean), min {:.2f}, p25 {:.2f}, median {:.2f}, p75 {:.2f}, max {:.2f} "
                        "(interquartile range {:.2f}), total {:.1f}",
                   b.prepare.count, b.prepare.mean_ms, b.prepare.std_ms,
                   b.prepare.mean_ms > 0 ? 100 * b.prepare.std_ms / b.prepare.mean_ms : 0, b.prepare.min_ms,
                   b.prepare.p25_ms, b.prepare.p50_ms, b.prepare.p75_ms, b.prepare.max_ms,
                   b.prepare.p75_ms - b.prepare.p25_ms, b.prepare.total_ms));
    else
        fmt::print(out, "batches prepared by the workers: 0\n");
    if (!b.wait.count)
        return;
    // Arrival order and delay are known only for the batches whose hand-over was seen (the delay's count).
    std::string seen = b.delay.count < b.wait.count ? fmt::format(" (of the {} whose hand-over was seen)", b.delay.count)
                                                    : std::string();
    print_wrapped(out, fmt::format("batches consumed by the training loop: {}; its wait in next(), ms: mean {:.2f}, p50 {:.2f}, p99 "
                    "{:.2f}; waits of at most 1 ms {:.0f} %, 1-500 ms {:.0f} %, over 500 ms {:.0f} % (the Lotus "
                    "paper's buckets){}",
               b.wait.count, b.wait.mean_ms, b.wait.p50_ms, b.wait.p99_ms, share(b.wait_le_1ms, b.wait.count),
               share(b.wait_1_500ms, b.wait.count), share(b.wait_gt_500ms, b.wait.count),
               b.delay.count ? fmt::format("; arrived out of order {:.0f} %{}", share(b.out_of_order, b.delay.count), seen)
                             : std::string()));
    if (b.delay.count)
        print_wrapped(out, fmt::format("from a batch ready to its use, ms: mean {:.2f}, p50 {:.2f}, p99 {:.2f}; over 500 ms {:.0f} %{}",
                   b.delay.mean_ms, b.delay.p50_ms, b.delay.p99_ms, share(b.delay_gt_500ms, b.delay.count), seen));
    if (b.unnamed)
        print_wrapped(out, fmt::format("{} batch(es) consumed before their index could be known (tracing began mid-epoch): their waits "
                        "carry no batch id and no arrow.",
                   b.unnamed));
    if (b.unmatched)
        print_wrapped(out, fmt::format("{} consumed batch(es) have no batch span to point to (prepared before tracing began, or by a "
                        "worker whose epoch is unknown): no arrow, no delay.",
                   b.unmatched));
    if (b.arrival_order)
        print_wrapped(out, fmt::format("next() returned batches as they arrived (DataLoader(in_order=False)), handed over by a "
                        "pin-memory thread: seen when one returned before the batch next in index order had reached it, "
                        "or when a task went to a worker out of turn; from then on each wait is named in arrival "
                        "order.{}{}",
                   b.misnamed ? fmt::format(" {} wait(s) of that pass before then carry another batch's id, delay and "
                                            "arrow.", b.misnamed)
                              : "",
                   b.passes_before ? fmt::format(" Its {} earlier pass(es) were named in index order: their waits may "
                                                 "carry other batches' ids.", b.passes_before)
                                   : ""));
}

void Summary::print(FILE* out, const std::map<uint32_t, model::ProcessInfo>& processes, const DataLoaderReport& batches,
                    const std::vector<std::string>& notes, const std::vector<UsageRow>& usage,
                    unsigned usage_interval_ms) const
{
    // One section per DataLoader of each training process (just the table where there is only one).
    std::vector<GroupKey> keys = group_order_;
    for (const auto& b : batches.loaders)
        if (std::find(keys.begin(), keys.end(), b.key) == keys.end())
            keys.push_back(b.key);
    if (keys.empty())
        fmt::print(out, "No pipeline was seen: no Compose-like call ran in the traced processes.\n");
    bool titled = keys.size() > 1;
    for (size_t i = 0; i < keys.size(); i++) {
        if (titled)
            fmt::print(out, "{}{}\n", i ? "\n" : "", group_title(keys[i], processes));
        if (auto g = groups_.find(keys[i]); g != groups_.end())
            print_rows(out, rows_of(g->second));
        for (const auto& b : batches.loaders)
            if (b.key == keys[i] && (b.prepare.count || b.wait.count)) {
                fmt::print(out, "\n");
                print_batches(out, b);
            }
    }
    if (samples_per_s() > 0)
        fmt::print(out, "\nsamples/s: {:.1f} ({} samples from the first one's start to the last one's end, {:.2f} s)\n",
                   samples_per_s(), all_.samples.count(),
                   static_cast<double>(last_sample_ns_ - first_sample_ns_) / 1e9);
    if (!batches.loops.empty())
        fmt::print(out, "\n");
    for (const auto& l : batches.loops) {
        print_wrapped(out, l.verdict, 0);
        for (const auto& a : l.advice)
            print_wrapped(out, "  - " + a, 4);
    }
    // One row per role: a DataLoader worker id stands for every process that played it (non-persistent
    // workers are new processes each epoch); the JSON summary keeps one entry per process, but for those folded
    // into their role's row (process_fold.h).
    struct Row {
        std::string pids;
        size_t processes = 0;
        uint64_t samples = 0, batches = 0, busy_ns = 0, seen_ns = 0;
    };
    std::map<std::tuple<uint32_t, int, int, int, std::string>, Row> rows;
    for (const auto& [pid, p] : processes) {
        bool worker = p.worker || p.worker_id >= 0;
        if (!p.root && !p.consumer && p.samples == 0 && !worker)
            continue;
        uint32_t group = worker && p.owner ? p.owner : pid;
        auto& r = rows[{p.root ? 0 : group, worker ? 1 : 0, worker ? p.loader : -1,
                        p.worker_id < 0 ? 1 << 30 : p.worker_id, model::process_label(processes, pid)}];
        r.pids += (r.pids.empty() ? "" : ",") + model::pid_list(p);
        r.processes += p.processes();
        r.samples += p.samples;
        r.batches += p.batches;
        r.busy_ns += p.busy_ns;
        r.seen_ns += p.seen_ns();
    }
    fmt::print(out, "\n{:<20} {:>6} {:>10} {:>8} {:>8} {:>7} {:>7}  pids\n", "process", "loader", "processes", "samples",
               "batches", "busy %", "idle %");
    bool any_busy = false;
    for (const auto& [key, r] : rows) {
        int loader = std::get<2>(key);
        std::string pids = r.pids.size() > 40 ? r.pids.substr(0, 37) + "..." : r.pids;
        std::string ld = std::get<1>(key) ? (loader >= 0 ? std::to_string(loader) : "?") : "-";
        if (r.batches == 0 || r.seen_ns == 0) { // busy/idle are about DataLoader workers
            fmt::print(out, "{:<20} {:>6} {:>10} {:>8} {:>8} {:>7} {:>7}  {}\n", std::get<4>(key), ld, r.processes,
                       r.samples, r.batches, "-", "-", pids);
            continue;
        }
        any_busy = true;
        double busy = 100.0 * static_cast<double>(r.busy_ns) / static_cast<double>(r.seen_ns);
        fmt::print(out, "{:<20} {:>6} {:>10} {:>8} {:>8} {:>7.1f} {:>7.1f}  {}\n", std::get<4>(key), ld, r.processes,
                   r.samples, r.batches, busy, 100.0 - busy, pids);
    }
    if (any_busy)
        print_wrapped(out, fmt::format("(busy %: time a worker spent preparing batches, from its first event to its last; a worker id "
                        "stands for every process that played it, one per epoch unless persistent_workers)"));
    print_usage(out, usage, usage_interval_ms);
    print_counters(out);
    print_native_map(out);
    for (const auto& n : notes)
        fmt::print(out, "{}\n", n);
    fmt::print(out, "How to read this summary: docs/trace-format.md (installed under /usr/share/doc/lotus-bpf).\n");
}

} // namespace lotus::exporter

namespace lotus::exporter {

using J = nlohmann::ordered_json;

static J stats_json(const DurationStats& s)
{
    J o = J::object();
    o["count"] = s.count;
    for (auto [key, v] : std::initializer_list<std::pair<const char*, double>>{
             {"mean_ms", s.mean_ms}, {"std_ms", s.std_ms}, {"min_ms", s.min_ms}, {"p25_ms", s.p25_ms},
             {"p50_ms", s.p50_ms}, {"p75_ms", s.p75_ms}, {"p95_ms", s.p95_ms}, {"p99_ms", s.p99_ms},
             {"max_ms", s.max_ms}, {"total_ms", s.total_ms}})
        o[key] = json_fixed(v, 4);
    if (s.cpu_ms >= 0) {
        o["cpu_ms"] = json_fixed(s.cpu_ms, 4);
        o["on_cpu_pct"] = json_fixed(s.on_cpu_pct, 2);
        o["minor_faults"] = json_fixed(s.minor_faults, 2);
    }
    return o;
}

static J rows_json(const Rows& rows)
{
    J ops = J::object();
    for (const auto& r : rows)
        ops[common::valid_utf8(r.name)] = stats_json(r.stats);
    return ops;
}

static J batches_json(const BatchSummary& x)
{
    J o = J::object(), wait = J::object(), delay = J::object();
    o["prepare"] = stats_json(x.prepare);
    o["wait"] = stats_json(x.wait);
    o["delay"] = stats_json(x.delay);
    wait["out_of_order"] = json_fixed(share(x.out_of_order, x.delay.count) / 100, 4);
    wait["le_1ms"] = json_fixed(share(x.wait_le_1ms, x.wait.count) / 100, 4);
    wait["1ms_500ms"] = json_fixed(share(x.wait_1_500ms, x.wait.count) / 100, 4);
    wait["gt_500ms"] = json_fixed(share(x.wait_gt_500ms, x.wait.count) / 100, 4);
    o["wait_share"] = std::move(wait);
    o["delay_gt_500ms_share"] = json_fixed(share(x.delay_gt_500ms, x.delay.count) / 100, 4);
    delay["le_1ms"] = json_fixed(share(x.delay_le_1ms, x.delay.count) / 100, 4);
    delay["1ms_500ms"] = json_fixed(share(x.delay_1_500ms, x.delay.count) / 100, 4);
    delay["gt_500ms"] = json_fixed(share(x.delay_gt_500ms, x.delay.count) / 100, 4);
    o["delay_share"] = std::move(delay);
    o["unnamed"] = x.unnamed;
    o["unmatched"] = x.unmatched;
    o["arrival_order"] = x.arrival_order;
    o["misnamed"] = x.misnamed;
    o["misnamed_passes"] = x.passes_before;
    return o;
}

std::string Summary::json(const std::map<uint32_t, model::ProcessInfo>& processes, const DataLoaderReport& batches,
                          const RunInfo& run, const std::string& resources) const
{
    J procs = J::array();
    for (const auto& [pid, p] : processes)
        if (p.root || p.consumer || p.samples > 0 || p.worker || p.worker_id >= 0) {
            J o = J::object();
            o["pid"] = pid;
            o["label"] = json_text(model::process_label(processes, pid));
            o["worker"] = p.worker_id;
            o["rank"] = p.known_rank();
            o["owner"] = p.owner;
            o["loader"] = p.loader;
            o["samples"] = p.samples;
            o["batches"] = p.batches;
            o["busy_pct"] = json_fixed(p.root || p.consumer ? 0.0 : busy_pct(p), 2);
            add_folded(o, p);
            procs.push_back(std::move(o));
        }
    // Per DataLoader of each training process: its ops and batches.
    J loaders = J::array();
    std::vector<GroupKey> keys = group_order_;
    for (const auto& b : batches.loaders)
        if (std::find(keys.begin(), keys.end(), b.key) == keys.end())
            keys.push_back(b.key);
    for (const auto& k : keys) {
        J b = nullptr;
        for (const auto& x : batches.loaders)
            if (x.key == k)
                b = batches_json(x);
        auto g = groups_.find(k);
        J o = J::object();
        o["owner"] = k.owner;
        o["owner_label"] = json_text(k.owner ? model::process_label(processes, k.owner) : "");
        o["loader"] = k.loader;
        o["ops"] = g == groups_.end() ? J::object() : rows_json(rows_of(g->second));
        o["batches"] = std::move(b);
        loaders.push_back(std::move(o));
    }
    J loops = J::array();
    for (const auto& l : batches.loops) {
        J o = J::object();
        o["pid"] = l.pid;
        o["label"] = json_text(model::process_label(processes, l.pid));
        o["batches"] = l.batches;
        o["waiting_share"] = json_fixed(l.waiting_share, 4);
        o["verdict"] = json_text(l.verdict);
        o["advice"] = json_texts(l.advice);
        o["all"] = batches_json(l.all);
        loops.push_back(std::move(o));
    }
    // Every DataLoader together, and the training loop's share: where there is one training process (else null).
    J merged = nullptr;
    if (batches.loops.size() == 1) {
        const auto& l = batches.loops[0];
        merged = batches_json(l.all);
        merged["waiting_share"] = json_fixed(l.waiting_share, 4);
        merged["verdict"] = json_text(l.verdict);
        merged["advice"] = json_texts(l.advice);
    }
    J throughput = nullptr;
    if (samples_per_s() > 0) {
        throughput = J::object();
        throughput["samples"] = all_.samples.count();
        throughput["seconds"] = json_fixed(static_cast<double>(last_sample_ns_ - first_sample_ns_) / 1e9, 4);
        throughput["samples_per_s"] = json_fixed(samples_per_s(), 3);
    }
    J res = J::parse(resources, nullptr, false);
    J doc = J::object();
    doc["run"] = run_json(run);
    doc["ops"] = rows_json(rows());
    doc["batches"] = std::move(merged);
    doc["loaders"] = std::move(loaders);
    doc["training"] = std::move(loops);
    doc["processes"] = std::move(procs);
    doc["counters"] = counters_json_value();
    doc["native_map"] = native_map_json_value();
    doc["resources"] = res.is_discarded() ? J(nullptr) : std::move(res);
    doc["throughput"] = std::move(throughput);
    return json_dump(doc) + "\n";
}

} // namespace lotus::exporter
