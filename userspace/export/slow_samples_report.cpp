#include "export/slow_samples_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/printable.h"
#include "export/html_report.h"
#include "export/json.h"
#include "export/summary.h"

namespace lotus::exporter {

const char* const kSlowSampleRule =
    "a sample time is slow where its loading, or its pipeline, took longer than the farther of Q3 + 3 x IQR "
    "(Tukey's far-out fence) and twice the median of its DataLoader's";

namespace {

using J = nlohmann::ordered_json;

// The op that took longest in a row's time, "name 1.23"; "-" for none.
std::string slowest_op(const SlowSampleRow& r)
{
    auto top = std::max_element(r.ops.begin(), r.ops.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    return top == r.ops.end() ? "-" : fmt::format("{} {:.2f}", top->first, top->second);
}

std::string times(const SlowSampleRow& r)
{
    return r.times_seen ? fmt::format("{}/{}", r.times_slow, r.times_seen) : fmt::format("{}/?", r.times_slow);
}

std::string ms_or_dash(double ms) { return ms < 0 ? "-" : fmt::format("{:.2f}", ms); }

// What the bounded memory cost the figures (nothing where every time was kept): "; ..." or "".
std::string bounds_text(const SlowSampleGroup& g)
{
    std::string t;
    if (!g.thresholds_exact)
        t += fmt::format("; thresholds from histograms of every time, each within {:.2f} ms of the exact one",
                         std::max(g.loader_error_ms, g.pipeline_error_ms));
    if (g.not_kept)
        t += fmt::format("; up to {} more slow time(s) not counted (let go of under a running bound the final "
                         "threshold fell below)",
                         g.not_kept);
    if (g.untracked)
        t += fmt::format("; {} time(s) of samples past the first {} were not counted per sample (their times "
                         "seen, their fastest loading and the size fit leave them out)",
                         g.untracked, SampleCounts::kMaxSamples);
    return t;
}

// "slow samples: 8 of 400 sample times (4 samples) were slow: loading over 2.31 ms (median 0.52) or ..."
std::string headline(const SlowSampleGroup& g)
{
    std::vector<std::string> limits;
    if (g.loader_threshold_ms >= 0)
        limits.push_back(fmt::format("loading over {:.2f} ms (median {:.2f})", g.loader_threshold_ms, g.loader_median_ms));
    if (g.pipeline_threshold_ms >= 0)
        limits.push_back(fmt::format("the pipeline over {:.2f} ms (median {:.2f})", g.pipeline_threshold_ms,
                                     g.pipeline_median_ms));
    if (limits.empty())
        return fmt::format("too few sample times to tell ({}; {} needed)", g.samples, SlowSamples::kMinTimes);
    std::string rule = limits.size() == 2 ? limits[0] + " or " + limits[1] : limits[0];
    std::string told = bounds_text(g);
    if (!g.slow_times)
        return fmt::format("none of {} sample times ({}){}", g.samples, rule, told);
    return fmt::format("{} of {} sample times were slow, {} sample(s), {} of them slow every time they were loaded "
                       "(more than once): {}{}",
                       g.slow_times, g.samples, g.slow_samples, g.slow_every_time, rule, told);
}

// The size fit in words, or why there is none.
std::string fit_text(const SlowSampleGroup& g)
{
    if (!g.with_bytes)
        return "File sizes are not known (no sample opened a regular file, or a record file made before event ABI "
               "12): no size fit.";
    if (!g.fit)
        return fmt::format("No size fit: the samples with a known size ({} time(s)) are all of one size or fewer than {}.",
                           g.with_bytes, SlowSamples::kMinTimes);
    const SizeFit& f = *g.fit;
    bool follows = f.r2 >= 0.5 && f.ms_per_mb > 0;
    return fmt::format("Loading time {} file size: {:.3f} ms per MB {} {:.3f} ms (least squares of each sample's fastest "
                       "loading on its size, over {} samples, r² {:.2f}); {} sample(s) load slower than their size "
                       "explains, even at their fastest (by over {:.2f} ms and {:.0f} % of the time expected).",
                       follows ? "follows" : "does not follow", f.ms_per_mb, f.fixed_ms < 0 ? "-" : "+",
                       std::fabs(f.fixed_ms), f.samples, f.r2, f.stand_out,
                       f.band_ms, SizeFit::kRelativeBand * 100);
}

std::string title_of(const std::vector<SlowSampleGroup>& groups, const SlowSampleGroup& g)
{
    return groups.size() > 1 || g.title.find(": ") != std::string::npos ? " of " + g.title : "";
}

} // namespace

void print_slow_samples(FILE* out, const std::vector<SlowSampleGroup>& groups)
{
    for (const auto& g : groups) {
        fmt::print(out, "\n");
        print_wrapped(out, fmt::format("slow samples{}: {}", common::printable(title_of(groups, g)), headline(g)), 2);
        if (!g.rows.empty()) {
            fmt::print(out, "{:>7} {:>9} {:>8} {:>9} {:>11} {:>10} {:>10} {:>10}  {:<22} {}\n", "index", "slow/seen", "ms",
                       "loader ms", "pipeline ms", "fastest ld", "bytes", "by size ms", "slowest op ms", "file");
            for (size_t i = 0; i < g.rows.size() && i < kTextRows; i++) {
                const auto& r = g.rows[i];
                std::string file = common::printable(r.path.empty() ? "-" : r.path);
                if (file.size() > 48)
                    file = "..." + file.substr(file.size() - 45);
                std::string op = common::printable(slowest_op(r));
                fmt::print(out, "{:>7} {:>9} {:>8.2f} {:>9} {:>11} {:>10} {:>10} {:>10}  {:<22} {}\n",
                           r.index >= 0 ? std::to_string(r.index) : "?", times(r), r.ms, ms_or_dash(r.loader_ms),
                           ms_or_dash(r.pipeline_ms), ms_or_dash(r.fastest_loader_ms),
                           r.bytes >= 0 ? std::to_string(r.bytes) : "?",
                           r.expected_loader_ms < 0 ? "-" : ms_or_dash(r.expected_loader_ms) + (r.stands_out ? "*" : " "),
                           op.size() > 22 ? op.substr(0, 19) + "..." : op, file);
            }
            size_t shown = std::min(g.rows.size(), kTextRows);
            if (g.slow_samples > shown)
                fmt::print(out, "  ({} more slow sample(s); the summary JSON lists {} in all)\n", g.slow_samples - shown,
                           g.rows.size());
        }
        print_wrapped(out, fit_text(g), 2);
    }
    if (!groups.empty())
        print_wrapped(out, fmt::format("({}; each sample's figures are of its slowest time; slow/seen: the times it was "
                                       "slow and the times it was loaded, once per epoch with a plain sampler; by size: "
                                       "the loading time the size fit expects for its bytes, * where even its fastest loading "
                                       "(fastest ld) was slower than that by more than the fit's band)",
                                       kSlowSampleRule));
}

J slow_samples_json(const std::vector<SlowSampleGroup>& groups)
{
    auto ms = [](double v) { return v < 0 ? J(nullptr) : json_fixed(v, 4); };
    J loaders = J::array();
    for (const auto& g : groups) {
        J o = J::object();
        o["owner"] = g.owner ? J(g.owner) : J(nullptr);
        o["loader"] = g.loader >= 0 ? J(g.loader) : J(nullptr);
        o["title"] = json_text(g.title);
        o["samples"] = g.samples;
        o["not_analysed"] = g.not_kept;
        o["untracked_times"] = g.untracked;
        o["with_bytes"] = g.with_bytes;
        J thr = J::object();
        thr["loader_ms"] = ms(g.loader_threshold_ms);
        thr["loader_median_ms"] = ms(g.loader_median_ms);
        thr["pipeline_ms"] = ms(g.pipeline_threshold_ms);
        thr["pipeline_median_ms"] = ms(g.pipeline_median_ms);
        thr["exact"] = g.thresholds_exact;
        thr["loader_error_ms"] = g.loader_threshold_ms < 0 ? J(nullptr) : json_fixed(g.loader_error_ms, 4);
        thr["pipeline_error_ms"] = g.pipeline_threshold_ms < 0 ? J(nullptr) : json_fixed(g.pipeline_error_ms, 4);
        o["threshold"] = std::move(thr);
        o["slow_times"] = g.slow_times;
        o["slow_samples"] = g.slow_samples;
        o["slow_every_time"] = g.slow_every_time;
        J rows = J::array();
        for (const auto& r : g.rows) {
            J row = J::object();
            row["index"] = r.index >= 0 ? J(r.index) : J(nullptr);
            row["path"] = r.path.empty() ? J(nullptr) : json_text(r.path);
            row["bytes"] = r.bytes >= 0 ? J(r.bytes) : J(nullptr);
            row["ms"] = json_fixed(r.ms, 4);
            row["loader_ms"] = ms(r.loader_ms);
            row["pipeline_ms"] = ms(r.pipeline_ms);
            J ops = J::object();
            for (const auto& [name, v] : r.ops)
                ops[json_text(name).get<std::string>()] = json_fixed(v, 4);
            row["ops"] = std::move(ops);
            J in = J::array();
            if (r.slow_loader)
                in.push_back("loader");
            if (r.slow_pipeline)
                in.push_back("pipeline");
            row["slow_in"] = std::move(in);
            row["times_slow"] = r.times_slow;
            row["times_seen"] = r.times_seen ? J(r.times_seen) : J(nullptr);
            row["fastest_loader_ms"] = ms(r.fastest_loader_ms);
            row["expected_loader_ms"] = ms(r.expected_loader_ms);
            row["stands_out"] = r.expected_loader_ms < 0 ? J(nullptr) : J(r.stands_out);
            rows.push_back(std::move(row));
        }
        o["rows"] = std::move(rows);
        J fit = nullptr;
        if (g.fit) {
            fit = J::object();
            fit["ms_per_mb"] = json_fixed(g.fit->ms_per_mb, 6);
            fit["fixed_ms"] = json_fixed(g.fit->fixed_ms, 4);
            fit["r2"] = json_fixed(g.fit->r2, 4);
            fit["samples"] = g.fit->samples;
            fit["stand_out"] = g.fit->stand_out;
            fit["band_ms"] = json_fixed(g.fit->band_ms, 4);
            fit["relative_band"] = SizeFit::kRelativeBand;
        }
        o["size_fit"] = std::move(fit);
        loaders.push_back(std::move(o));
    }
    J out = J::object();
    out["rule"] = kSlowSampleRule;
    out["loaders"] = std::move(loaders);
    return out;
}

std::string slow_samples_html(const std::vector<SlowSampleGroup>& groups)
{
    if (groups.empty())
        return "<p class=\"absent\">No sample was seen.</p>\n";
    std::string h;
    for (const auto& g : groups) {
        h += "<p>" + html_escape(fmt::format("Slow samples{}: {}", title_of(groups, g), headline(g))) + "</p>\n";
        if (!g.rows.empty()) {
            h += "<table class=\"numbers\" data-table=\"slow-samples\"><thead><tr><th>index</th><th>slow / seen</th>"
                 "<th>ms</th><th>loader ms</th><th>pipeline ms</th><th>ops ms</th><th>bytes</th><th>by size ms</th>"
                 "<th>file</th></tr></thead><tbody>\n";
            for (const auto& r : g.rows) {
                std::string ops;
                for (const auto& [name, v] : r.ops)
                    ops += (ops.empty() ? "" : ", ") + fmt::format("{} {:.2f}", name, v);
                h += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.2f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                                 "<td>{}</td><td>{}</td></tr>\n",
                                 r.index >= 0 ? std::to_string(r.index) : "?", times(r), r.ms, ms_or_dash(r.loader_ms),
                                 ms_or_dash(r.pipeline_ms), html_escape(ops.empty() ? "-" : ops),
                                 r.bytes >= 0 ? std::to_string(r.bytes) : "?",
                                 r.expected_loader_ms < 0 ? "-"
                                                          : ms_or_dash(r.expected_loader_ms) +
                                                                (r.stands_out ? " (slower than its size explains)" : ""),
                                 html_escape(r.path.empty() ? "-" : r.path));
            }
            h += "</tbody></table>\n";
        }
        h += "<p>" + html_escape(fit_text(g)) + "</p>\n";
    }
    h += "<p class=\"legend\">" +
         html_escape(fmt::format("{}. Each sample's figures are of its slowest time; slow / seen: the times it was "
                                 "slow and the times it was loaded (once per epoch with a plain sampler); by size: the "
                                 "loading time the size fit expects for its bytes.",
                                 kSlowSampleRule)) +
         "</p>\n";
    return h;
}

} // namespace lotus::exporter
