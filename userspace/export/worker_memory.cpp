#include "export/worker_memory.h"

#include "export/html_report.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace lotus::exporter {

const char* memory_verdict_key(MemoryVerdict v)
{
    switch (v) {
    case MemoryVerdict::Steady: return "steady";
    case MemoryVerdict::CopyOnRead: return "copy-on-read";
    case MemoryVerdict::LeakLike: return "leak-like";
    case MemoryVerdict::Unknown: break;
    }
    return "unknown";
}

namespace {

// Private memory at `x` read, on the straight lines between the readings.
double private_at(const std::vector<MemoryPoint>& p, double x)
{
    for (size_t i = 1; i < p.size(); i++)
        if (x <= p[i].read) {
            double span = p[i].read - p[i - 1].read;
            double f = span > 0 ? (x - p[i - 1].read) / span : 1;
            return p[i - 1].private_mb + f * (p[i].private_mb - p[i - 1].private_mb);
        }
    return p.back().private_mb;
}

double slope(const std::vector<MemoryPoint>& p)
{
    double mx = 0, my = 0;
    for (const auto& q : p)
        mx += q.read, my += q.private_mb;
    mx /= static_cast<double>(p.size()), my /= static_cast<double>(p.size());
    double sxy = 0, sxx = 0;
    for (const auto& q : p)
        sxy += (q.read - mx) * (q.private_mb - my), sxx += (q.read - mx) * (q.read - mx);
    return sxx > 0 ? sxy / sxx : 0;
}

} // namespace

CurveJudgement judge_curve(const std::vector<MemoryPoint>& p)
{
    CurveJudgement j;
    j.readings = p.size();
    if (p.size() < kMinMemoryReadings) {
        j.why = fmt::format("not enough readings ({} with private memory, {} needed)", p.size(), kMinMemoryReadings);
        // what the few say, without a rate: its private memory grew, made of pages it had shared
        if (p.size() >= 2 && p.back().read > p.front().read) {
            double grew = p.back().private_mb - p.front().private_mb;
            double copied = std::clamp(grew - (p.back().anon_mb - p.front().anon_mb), 0.0, std::max(grew, 0.0));
            if (grew >= kMinGrowthMb && copied >= kCopiedShare * grew) {
                j.copying_hint = true;
                j.why += fmt::format(", but its private memory grew {:.0f} MB over {:.0f} read, {:.0f} MB of it pages it "
                                     "had shared: copy-on-read may be under way", grew, p.back().read - p.front().read,
                                     copied);
            }
        }
        return j;
    }
    const auto &first = p.front(), &last = p.back();
    if (last.read <= first.read) {
        j.why = "it read nothing between its readings";
        return j;
    }
    j.rate_mb_per_1000 = 1000 * slope(p);
    j.growth_mb = last.private_mb - first.private_mb;
    double anon_growth = last.anon_mb - first.anon_mb;
    j.copied_mb = std::clamp(j.growth_mb - anon_growth, 0.0, std::max(j.growth_mb, 0.0));
    j.new_mb = std::max(j.growth_mb, 0.0) - j.copied_mb;
    j.shared_left_mb = last.shared_mb;
    // what the growth was made of, leaving the first interval out where there are readings to spare
    bool spare = p.size() > kMinMemoryReadings && last.private_mb - p[1].private_mb >= kMinGrowthMb;
    const auto& from = spare ? p[1] : first;
    double grew = last.private_mb - from.private_mb;
    double copied = std::clamp(grew - (last.anon_mb - from.anon_mb), 0.0, std::max(grew, 0.0));
    j.copied_share = grew > 0 ? copied / grew : 0;
    if (last.at_s > first.at_s)
        j.mb_per_s = j.growth_mb / (last.at_s - first.at_s);
    double mid = (first.read + last.read) / 2, at_mid = private_at(p, mid);
    double early = at_mid - first.private_mb, late = last.private_mb - at_mid;
    j.flattened = early > 0 && late < kFlatShare * early;
    if (j.growth_mb < kMinGrowthMb) {
        j.verdict = MemoryVerdict::Steady;
        j.why = fmt::format("private memory {:+.1f} MB over its readings (under {:g} MB)", j.growth_mb, kMinGrowthMb);
    } else if (j.copied_share >= kCopiedShare) {
        j.verdict = MemoryVerdict::CopyOnRead;
        j.why = fmt::format("{:.0f} of its {:.0f} MB of private growth were pages it had shared (its anonymous "
                            "memory grew {:.0f} MB){}", j.copied_mb, j.growth_mb, std::max(anon_growth, 0.0),
                            j.flattened ? "; flat in the second half of what it read" : "; still growing");
    } else if (j.flattened) {
        j.verdict = MemoryVerdict::Steady;
        j.why = fmt::format("it allocated {:.0f} MB early on, then stayed flat", j.new_mb);
    } else {
        j.verdict = MemoryVerdict::LeakLike;
        j.why = fmt::format("{:.0f} of its {:.0f} MB of private growth were new memory (its anonymous memory grew "
                            "with it), and "
                            "it did not flatten", j.new_mb, j.growth_mb);
    }
    return j;
}

void WorkerMemory::consume(const void* data, size_t len)
{
    model::dispatch(data, len, *this);
}

void WorkerMemory::usage(const model::RecordUsage& r)
{
    auto& p = procs_[r.tgid];
    p.any_reading = true;
    if (r.private_kb == model::kNoPss) {
        if (r.pss_kb != model::kNoPss)
            private_missing_ = true; // a walk was made, but the record is older than private memory
        return;
    }
    private_seen_ = true;
    if (!p.readings.empty() && r.ts_ns <= p.readings.back().ts_ns)
        return;
    Reading x{r.ts_ns, r.private_kb, r.anon_kb == model::kNoPss ? r.rss_kb : r.anon_kb, r.shared_dirty_kb};
    // the spans that ended since the last reading, up to this one
    auto take = [&](std::vector<uint64_t>& pending, uint64_t& into) {
        auto keep = std::partition(pending.begin(), pending.end(), [&](uint64_t end) { return end <= r.ts_ns; });
        into = static_cast<uint64_t>(keep - pending.begin());
        pending.erase(pending.begin(), keep);
    };
    take(p.pending_samples, x.samples);
    take(p.pending_batches, x.batches);
    x.samples += std::exchange(p.old_samples, 0);
    x.batches += std::exchange(p.old_batches, 0);
    p.readings.push_back(x);
}

void WorkerMemory::add(const model::Span& s)
{
    bool sample = s.kind == model::SpanKind::Sample;
    if (!sample && s.kind != model::SpanKind::Batch)
        return;
    auto& p = procs_[s.pid];
    p.any_sample |= sample;
    // counted at the first reading at or after its end (or pending until one comes)
    auto at = std::lower_bound(p.readings.begin(), p.readings.end(), s.end_ns,
                               [](const Reading& r, uint64_t end) { return r.ts_ns < end; });
    if (at == p.readings.end()) {
        auto& pending = sample ? p.pending_samples : p.pending_batches;
        pending.push_back(s.end_ns);
        if (pending.size() > kMaxPending) {
            auto half = pending.begin() + static_cast<std::ptrdiff_t>(kMaxPending / 2);
            std::nth_element(pending.begin(), half, pending.end());
            (sample ? p.old_samples : p.old_batches) += kMaxPending / 2;
            pending.erase(pending.begin(), half);
        }
    } else {
        (sample ? at->samples : at->batches)++;
    }
}

namespace {

bool parent_is_forkserver(const std::map<uint32_t, model::ProcessInfo>& processes, const model::ProcessInfo& info)
{
    auto parent = processes.find(info.parent);
    return parent != processes.end() && parent->second.helper == "forkserver";
}

} // namespace

void WorkerMemory::judge(uint32_t pid, Proc& p, const model::ProcessInfo& info, bool from_forkserver,
                         std::string label)
{
    if (!info.worker && info.worker_id < 0)
        return;
    if (!p.any_reading && p.readings.empty())
        return;
    WorkerMemoryRow row;
    row.pid = pid;
    row.label = std::move(label);
    row.unit = p.any_sample ? "samples" : "batches";
    row.from_forkserver = from_forkserver;
    std::vector<MemoryPoint> points;
    uint64_t read = 0;
    double t0 = p.readings.empty() ? 0 : static_cast<double>(p.readings.front().ts_ns);
    for (const auto& r : p.readings) {
        read += p.any_sample ? r.samples : r.batches;
        if (read && row.first_private_mb < 0)
            row.first_private_mb = static_cast<double>(r.private_kb) / 1024;
        points.push_back({static_cast<double>(read), static_cast<double>(r.private_kb) / 1024,
                          static_cast<double>(r.anon_kb) / 1024, (static_cast<double>(r.ts_ns) - t0) / 1e9,
                          r.shared_dirty_kb == model::kNoPss ? -1 : static_cast<double>(r.shared_dirty_kb) / 1024});
    }
    row.read = static_cast<double>(read);
    row.curve = judge_curve(points);
    rows_.push_back(std::move(row));
}

void WorkerMemory::fold(uint32_t pid, const std::map<uint32_t, model::ProcessInfo>& processes, std::string label)
{
    auto it = procs_.find(pid);
    auto info = processes.find(pid);
    if (it == procs_.end() || info == processes.end())
        return;
    judge(pid, it->second, info->second, parent_is_forkserver(processes, info->second), std::move(label));
    procs_.erase(it);
}

WorkerMemoryReport WorkerMemory::finish(const std::map<uint32_t, model::ProcessInfo>& processes, const JobMemory& job)
{
    for (auto& [pid, p] : procs_)
        if (auto info = processes.find(pid); info != processes.end())
            judge(pid, p, info->second, parent_is_forkserver(processes, info->second),
                  model::process_label(processes, pid));
    procs_.clear();
    WorkerMemoryReport r;
    r.private_known = private_seen_ || !private_missing_;
    std::stable_sort(rows_.begin(), rows_.end(), [](const auto& a, const auto& b) { return a.pid < b.pid; });
    for (auto& row : rows_) {
        switch (row.curve.verdict) {
        case MemoryVerdict::CopyOnRead: r.copy_on_read++; break;
        case MemoryVerdict::LeakLike: r.leak_like++; break;
        case MemoryVerdict::Steady: r.steady++; break;
        case MemoryVerdict::Unknown: r.unknown++; break;
        }
    }
    // the rows that matter first when there are too many
    std::stable_partition(rows_.begin(), rows_.end(), [](const auto& row) {
        return row.curve.verdict == MemoryVerdict::CopyOnRead || row.curve.verdict == MemoryVerdict::LeakLike;
    });
    if (rows_.size() > WorkerMemoryReport::kMaxRows) {
        r.left_out = rows_.size() - WorkerMemoryReport::kMaxRows;
        rows_.resize(WorkerMemoryReport::kMaxRows);
    }
    r.workers = std::move(rows_);
    rows_.clear();
    r.advice = worker_memory_advice(r, job);
    return r;
}

namespace {

double median_rate(const WorkerMemoryReport& r, MemoryVerdict v, std::string& unit)
{
    std::vector<double> rates;
    for (const auto& w : r.workers)
        if (w.curve.verdict == v)
            rates.push_back(w.curve.rate_mb_per_1000), unit = w.unit;
    if (rates.empty())
        return 0;
    std::sort(rates.begin(), rates.end());
    size_t n = rates.size();
    return n % 2 ? rates[n / 2] : (rates[n / 2 - 1] + rates[n / 2]) / 2;
}

// When the copying would reach the job's memory limit, or that it cannot (bounded by the pages shared).
std::string projection(const WorkerMemoryReport& r, const JobMemory& job)
{
    double pace = 0, bound = 0;
    bool bounded = true;
    for (const auto& w : r.workers)
        if (w.curve.verdict == MemoryVerdict::CopyOnRead && !w.curve.flattened) {
            pace += std::max(0.0, w.curve.mb_per_s), bound += std::max(0.0, w.curve.shared_left_mb);
            bounded &= w.curve.shared_left_mb >= 0;
        }
    if (pace <= 0)
        return " Their copies had stopped growing by their last readings.";
    std::string most = bounded ? fmt::format("up to {:.0f} MB more (the written pages they still shared)", bound)
                               : std::string("an amount not known (their shared pages were not read)");
    if (!job.limit_bytes)
        return fmt::format(" No memory limit is known for the job; they could copy {}.", most);
    double limit_mb = static_cast<double>(job.limit_bytes) / (1 << 20);
    if (job.peak_pss_mb <= 0)
        return fmt::format(" The job's memory limit is {:.0f} MiB; its own footprint (PSS) was not read in one sweep, "
                           "so when it would be reached is not known; they could copy {}.", limit_mb, most);
    double room = limit_mb - job.peak_pss_mb;
    if (bounded && bound < room)
        return fmt::format(" They can copy at most {:.0f} MB more (the pages they still shared): under the job's "
                           "memory limit ({:.0f} MiB, its peak PSS {:.0f} MB).", bound, limit_mb, job.peak_pss_mb);
    return fmt::format(" They could copy {}; at {:.1f} MB/s together that would reach the job's memory limit ({:.0f} "
                       "MiB, its peak PSS {:.0f} MB) in about {:.0f} s of reading.", most, pace, limit_mb,
                       job.peak_pss_mb, std::max(0.0, room) / pace);
}

// Workers a forkserver started share nothing of the training process to copy on read: said, with what each held
// from its start (the dataset pickled to it, among the rest), so that "steady" is not read as "shares the data".
std::string forkserver_note(const WorkerMemoryReport& r)
{
    size_t n = 0;
    double lo = 0, hi = 0;
    for (const auto& w : r.workers)
        if (w.from_forkserver && w.first_private_mb >= 0) {
            lo = n ? std::min(lo, w.first_private_mb) : w.first_private_mb;
            hi = n ? std::max(hi, w.first_private_mb) : w.first_private_mb;
            n++;
        }
    if (!n)
        return "";
    std::string low = fmt::format("{:.0f}", lo), high = fmt::format("{:.0f}", hi);
    return fmt::format(
        "{} DataLoader worker process(es) were started by multiprocessing's forkserver (CPython 3.14's default start "
        "method): they share no pages of the training process, so its dataset is not copied on read; each holds a "
        "copy of its own, pickled to it as it started (its private memory once it had begun reading: {}). What they can "
        "copy on read is the forkserver's pages.",
        n, low == high ? low + " MB" : low + "-" + high + " MB");
}

} // namespace

std::vector<std::string> worker_memory_advice(const WorkerMemoryReport& r, const JobMemory& job)
{
    std::vector<std::string> out;
    if (r.copy_on_read) {
        std::string unit;
        double rate = median_rate(r, MemoryVerdict::CopyOnRead, unit);
        out.push_back(fmt::format(
            "Copy-on-read in {} DataLoader worker process(es) (pytorch/pytorch#13246): reading Python objects the "
            "dataset holds (a list, a dict) writes their reference counts, so each worker copies the pages it reads "
            "from its parent: {:.2f} MB per 1,000 {} per worker (median).{} The usual fix: hold the data in numpy "
            "arrays, tensors or bytes instead of lists or dicts of Python objects, or read it from files in "
            "__getitem__.", r.copy_on_read, rate, unit, projection(r, job)));
    }
    if (auto note = forkserver_note(r); !note.empty())
        out.push_back(note);
    if (r.leak_like) {
        std::string unit;
        double rate = median_rate(r, MemoryVerdict::LeakLike, unit);
        out.push_back(fmt::format(
            "Leak-like growth in {} DataLoader worker process(es): {:.2f} MB per 1,000 {} (median) of new memory "
            "(its anonymous memory grew with it, so not copies of the parent's pages) that did not flatten: something kept per "
            "sample (a cache, a growing list) or a leak.", r.leak_like, rate, unit));
    }
    return out;
}

nlohmann::ordered_json worker_memory_json(const WorkerMemoryReport& r)
{
    auto workers = nlohmann::ordered_json::array();
    for (const auto& w : r.workers) {
        const auto& c = w.curve;
        nlohmann::ordered_json j{{"pid", w.pid}, {"process", w.label}, {"verdict", memory_verdict_key(c.verdict)},
                                 {"readings", c.readings}, {"unit", w.unit}, {"read", w.read}};
        bool known = c.verdict != MemoryVerdict::Unknown;
        j["rate_mb_per_1000"] = known ? nlohmann::ordered_json(c.rate_mb_per_1000) : nlohmann::ordered_json(nullptr);
        j["growth_mb"] = known ? nlohmann::ordered_json(c.growth_mb) : nlohmann::ordered_json(nullptr);
        j["copied_mb"] = known ? nlohmann::ordered_json(c.copied_mb) : nlohmann::ordered_json(nullptr);
        j["new_mb"] = known ? nlohmann::ordered_json(c.new_mb) : nlohmann::ordered_json(nullptr);
        j["flattened"] = known ? nlohmann::ordered_json(c.flattened) : nlohmann::ordered_json(nullptr);
        j["why"] = c.why;
        j["from_forkserver"] = w.from_forkserver;
        j["first_private_mb"] =
            w.first_private_mb >= 0 ? nlohmann::ordered_json(w.first_private_mb) : nlohmann::ordered_json(nullptr);
        workers.push_back(std::move(j));
    }
    return nlohmann::ordered_json{{"private_known", r.private_known}, {"min_readings", kMinMemoryReadings},
                                  {"copy_on_read", r.copy_on_read}, {"leak_like", r.leak_like},
                                  {"steady", r.steady}, {"unknown", r.unknown}, {"left_out", r.left_out},
                                  {"workers", std::move(workers)}, {"advice", r.advice}};
}

std::string worker_memory_html(const WorkerMemoryReport& r)
{
    std::string h = "<div data-chart=\"worker-memory\">\n<h3 id=\"worker-memory\">Memory that workers copy</h3>\n";
    if (!r.private_known || r.workers.empty()) {
        h += "<p class=\"absent\">" +
             html_escape(!r.private_known ? "Private memory was not read (a record made before lotus-bpf read it)."
                                          : "No DataLoader worker had its private memory read.") +
             "</p>\n</div>\n";
        return h;
    }
    h += "<table class=\"numbers\"><thead><tr><th>process</th><th>PID</th><th>verdict</th><th>MB per 1,000</th>"
         "<th>read</th><th>private growth MB</th><th>of it copied MB</th><th>readings</th><th>why</th></tr></thead>"
         "<tbody>\n";
    for (const auto& w : r.workers) {
        const auto& c = w.curve;
        bool known = c.verdict != MemoryVerdict::Unknown;
        h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0f} {}</td><td>{}</td><td>{}</td>"
                         "<td>{}</td><td>{}</td></tr>\n",
                         html_escape(w.label), w.pid, memory_verdict_key(c.verdict),
                         known ? fmt::format("{:.2f}", c.rate_mb_per_1000) : "-", w.read, w.unit,
                         known ? fmt::format("{:.0f}", c.growth_mb) : "-",
                         known ? fmt::format("{:.0f}", c.copied_mb) : "-", c.readings, html_escape(c.why));
    }
    h += "</tbody></table>\n";
    for (const auto& a : r.advice)
        h += "<p>" + html_escape(a) + "</p>\n";
    h += fmt::format("<p class=\"legend\">Private memory (USS: Private_Clean + Private_Dirty of smaps_rollup, read "
                     "with PSS) over the samples (or batches) each worker had read; {} readings at least. Copied: "
                     "private growth its anonymous memory (smaps_rollup's Anonymous) did not share: pages it had shared with its "
                     "parent.</p>\n</div>\n",
                     kMinMemoryReadings);
    return h;
}

std::vector<std::string> worker_memory_lines(const WorkerMemoryReport& r)
{
    std::vector<std::string> out;
    if (!r.private_known) {
        out.push_back("Worker memory: private memory was not read (a record made before lotus-bpf read it): "
                      "copy-on-read is not known.");
        return out;
    }
    size_t judged = r.copy_on_read + r.leak_like + r.steady + r.unknown;
    if (!judged)
        return out;
    out.push_back(fmt::format("Worker memory (private memory over what each worker read): {} copy-on-read, {} "
                              "leak-like, {} steady, {} unknown.", r.copy_on_read, r.leak_like, r.steady, r.unknown));
    for (const auto& w : r.workers) {
        const auto& c = w.curve;
        if (c.verdict != MemoryVerdict::CopyOnRead && c.verdict != MemoryVerdict::LeakLike)
            continue;
        out.push_back(fmt::format("  {} (PID {}): {}, {:+.2f} MB per 1,000 {} ({:+.0f} MB over {:.0f} {}, {} "
                                  "readings: {}).", w.label, w.pid, memory_verdict_key(c.verdict),
                                  c.rate_mb_per_1000, w.unit, c.growth_mb, w.read, w.unit, c.readings, c.why));
    }
    for (const auto& w : r.workers)
        if (w.curve.copying_hint)
            out.push_back(fmt::format("  {} (PID {}, counting {}): {}.", w.label, w.pid, w.unit, w.curve.why));
    if (r.left_out)
        out.push_back(fmt::format("  ({} more worker process(es) not listed.)", r.left_out));
    if (r.unknown) {
        size_t most = 0;
        for (const auto& w : r.workers)
            if (w.curve.verdict == MemoryVerdict::Unknown)
                most = std::max(most, w.curve.readings);
        out.push_back(fmt::format("  {} worker process(es) not judged: not enough readings with private memory (at "
                                  "most {}, {} needed; it is read with PSS: --pss-interval MS reads it more often).",
                                  r.unknown, most, kMinMemoryReadings));
    }
    for (const auto& a : r.advice)
        out.push_back(a);
    return out;
}

} // namespace lotus::exporter
