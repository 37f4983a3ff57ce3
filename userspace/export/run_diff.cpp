#include "run_diff.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "export/html_report.h"

namespace lotus::exporter {

namespace {

using json = nlohmann::ordered_json;

// The number at a path of keys, if every key is there and the value is a number.
std::optional<double> number(const json& j, std::initializer_list<const char*> path)
{
    const json* at = &j;
    for (const char* k : path) {
        if (!at->is_object() || !at->contains(k))
            return std::nullopt;
        at = &(*at)[k];
    }
    if (!at->is_number())
        return std::nullopt;
    return at->get<double>();
}

std::string value(std::optional<double> v, int decimals)
{
    return v ? fmt::format("{:.{}f}", *v, decimals) : "-";
}

// "+1.23 (+4.5 %)"; "-" when either side is missing; no % when the first is 0.
std::string change(std::optional<double> a, std::optional<double> b, int decimals, bool points = false)
{
    if (!a || !b)
        return "-";
    double d = *b - *a;
    if (points)
        return fmt::format("{:+.{}f} pts", d, decimals);
    if (*a == 0)
        return fmt::format("{:+.{}f}", d, decimals);
    return fmt::format("{:+.{}f} ({:+.1f} %)", d, decimals, 100 * d / *a);
}

std::string line(const std::string& what, std::optional<double> a, std::optional<double> b, int decimals,
                 bool points = false)
{
    return fmt::format("{:<34} {:>12} {:>12}  {}\n", what, value(a, decimals), value(b, decimals),
                       change(a, b, decimals, points));
}

std::string verdict(const json& j)
{
    if (j.contains("batches") && j["batches"].is_object() && j["batches"].contains("verdict") &&
        j["batches"]["verdict"].is_string())
        return j["batches"]["verdict"].get<std::string>();
    if (j.contains("training") && j["training"].is_array() && !j["training"].empty())
        return fmt::format("({} training processes: see each run's summary)", j["training"].size());
    return "(no training loop seen)";
}

} // namespace

std::string diff_runs(const json& a, const json& b, const std::string& name_a, const std::string& name_b)
{
    std::string out = fmt::format("A: {}\nB: {}\n\n{:<34} {:>12} {:>12}  {}\n", name_a, name_b, "", "A", "B",
                                  "change (B - A)");
    out += line("samples", number(a, {"throughput", "samples"}), number(b, {"throughput", "samples"}), 0);
    out += line("samples/s", number(a, {"throughput", "samples_per_s"}), number(b, {"throughput", "samples_per_s"}), 1);
    auto waiting = [](const json& j) -> std::optional<double> {
        auto w = number(j, {"batches", "waiting_share"});
        return w ? std::optional<double>(*w * 100) : std::nullopt;
    };
    out += line("training loop waiting for data, %", waiting(a), waiting(b), 1, true);
    for (const char* part : {"wait", "delay", "prepare"}) {
        const char* what = part == std::string("wait")    ? "wait in next()"
                           : part == std::string("delay") ? "batch ready to its use"
                                                          : "batch preparation";
        for (const char* stat : {"mean_ms", "p50_ms", "p95_ms"})
            out += line(fmt::format("{}, {} ms", what, std::string(stat).substr(0, std::string(stat).size() - 3)),
                        number(a, {"batches", part, stat}), number(b, {"batches", part, stat}), 3);
    }
    out += fmt::format("verdict A: {}\nverdict B: {}\n", verdict(a), verdict(b));

    // Ops: those of A in its order, then those only B has; loader, collate and the whole pipeline last. (In the
    // summary JSON those three keys are the parts': an op of such a name is written "NAME (op)", model::op_row_name.)
    std::vector<std::string> ops;
    for (const json* j : {&a, &b})
        if (j->contains("ops") && (*j)["ops"].is_object())
            for (const auto& [name, st] : (*j)["ops"].items())
                if (std::find(ops.begin(), ops.end(), name) == ops.end() && name != "loader" && name != "collate" &&
                    name != "sample")
                    ops.push_back(name);
    for (const char* last : {"loader", "collate", "sample"})
        ops.push_back(last);
    out += fmt::format("\n{:<28} {:>8} {:>8} {:>10} {:>10} {:>18} {:>10} {:>10} {:>18}\n", "per call, ms", "count A",
                       "count B", "mean A", "mean B", "mean change", "p95 A", "p95 B", "p95 change");
    for (const auto& op : ops) {
        auto ca = number(a, {"ops", op.c_str(), "count"}), cb = number(b, {"ops", op.c_str(), "count"});
        if (!ca && !cb)
            continue;
        auto ma = number(a, {"ops", op.c_str(), "mean_ms"}), mb = number(b, {"ops", op.c_str(), "mean_ms"});
        auto pa = number(a, {"ops", op.c_str(), "p95_ms"}), pb = number(b, {"ops", op.c_str(), "p95_ms"});
        out += fmt::format("{:<28} {:>8} {:>8} {:>10} {:>10} {:>18} {:>10} {:>10} {:>18}\n",
                           op == "sample" ? "sample (whole pipeline)" : op.substr(0, 28), value(ca, 0), value(cb, 0),
                           value(ma, 3), value(mb, 3), change(ma, mb, 3), value(pa, 3), value(pb, 3), change(pa, pb, 3));
    }

    auto job = [](const json& j, const char* k) { return number(j, {"resources", "job", k}); };
    if (job(a, "wall_s") || job(b, "wall_s")) {
        out += fmt::format("\n{:<34} {:>12} {:>12}  {}\n", "resources of the job", "A", "B", "change (B - A)");
        out += line("wall s", job(a, "wall_s"), job(b, "wall_s"), 2);
        auto cpu = [&](const json& j) -> std::optional<double> {
            auto u = job(j, "user_s"), s = job(j, "system_s");
            return u && s ? std::optional<double>(*u + *s) : std::nullopt;
        };
        out += line("CPU s", cpu(a), cpu(b), 2);
        out += line("avg CPU %", job(a, "cpu_avg_pct"), job(b, "cpu_avg_pct"), 0);
        out += line("peak CPU %", job(a, "cpu_peak_pct"), job(b, "cpu_peak_pct"), 0);
        out += line("avg RSS MB", job(a, "rss_avg_mb"), job(b, "rss_avg_mb"), 0);
        out += line("peak RSS MB (sum over processes)", job(a, "rss_peak_mb"), job(b, "rss_peak_mb"), 0);
        out += line("peak PSS MB", job(a, "pss_peak_mb"), job(b, "pss_peak_mb"), 0);
        out += line("storage read MB", job(a, "read_mb"), job(b, "read_mb"), 1);
        out += line("storage written MB", job(a, "write_mb"), job(b, "write_mb"), 1);
        out += line("network sent MB", job(a, "net_sent_mb"), job(b, "net_sent_mb"), 1);
        out += line("network received MB", job(a, "net_recv_mb"), job(b, "net_recv_mb"), 1);
    }
    out += "\n(change: B minus A, and relative to A; pts: percentage points; -: not in that run)\n";
    return out;
}

std::string diff_html(const json& a, const json& b, const std::string& name_a, const std::string& name_b)
{
    // per op (and loader, collation, the whole pipeline), its mean per call in each run
    std::vector<std::tuple<std::string, std::optional<double>, std::optional<double>>> bars;
    double top = 0;
    std::vector<std::string> ops;
    for (const json* j : {&a, &b})
        if (j->contains("ops") && (*j)["ops"].is_object())
            for (const auto& [name, st] : (*j)["ops"].items())
                if (std::find(ops.begin(), ops.end(), name) == ops.end())
                    ops.push_back(name);
    for (const auto& op : ops) {
        auto ma = number(a, {"ops", op.c_str(), "mean_ms"}), mb = number(b, {"ops", op.c_str(), "mean_ms"});
        top = std::max({top, ma.value_or(0), mb.value_or(0)});
        bars.emplace_back(op == "sample" ? "sample (whole pipeline)" : op, ma, mb);
    }
    if (top <= 0)
        top = 1;
    const double L = 240, W = 560, rowh = 30;
    std::string svg = fmt::format("<svg viewBox=\"0 0 960 {:.0f}\" role=\"img\" aria-label=\"mean per call, A and B\">\n",
                                  rowh * static_cast<double>(bars.size()) + 30);
    for (size_t i = 0; i < bars.size(); i++) {
        const auto& [name, ma, mb] = bars[i];
        double y = rowh * static_cast<double>(i) + 4;
        svg += fmt::format("<text class=\"label\" x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{}</text>\n", L - 8,
                           y + 16, html_escape(name));
        int k = 0;
        for (const auto& [v, cls, who] : {std::tuple{ma, "a", "A"}, std::tuple{mb, "b", "B"}}) {
            double yy = y + 12.0 * k++;
            if (!v) {
                svg += fmt::format("<text class=\"value\" x=\"{:.0f}\" y=\"{:.0f}\">{}: not in this run</text>\n", L,
                                   yy + 10, who);
                continue;
            }
            svg += fmt::format("<g><title>{} {}: {:.3f} ms per call</title><rect class=\"{}\" x=\"{:.0f}\" y=\"{:.0f}\" "
                               "width=\"{:.1f}\" height=\"10\"/><text class=\"value\" x=\"{:.1f}\" y=\"{:.0f}\">{} "
                               "{:.3f} ms</text></g>\n",
                               who, html_escape(name), *v, cls, L, yy, std::max(0.5, W * *v / top),
                               L + W * *v / top + 6, yy + 9, who, *v);
        }
    }
    svg += "</svg>\n";
    return fmt::format("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>lotus-bpf diff</title>\n"
                       "<style>\nbody{{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;padding:0 12px}}"
                       "pre{{font-size:12px;overflow-x:auto}}svg{{width:100%;height:auto}}svg text{{font:11px system-ui,"
                       "sans-serif}}.a{{fill:#1a56b0}}.b{{fill:#d9480f}}\n</style>\n</head>\n<body>\n<h1>lotus-bpf diff</h1>\n"
                       "<figure class=\"chart\" data-chart=\"diff-ops\">\n{}<figcaption>Mean wall-clock time per call of "
                       "each op in A (blue) and B (orange).</figcaption>\n</figure>\n<div data-chart=\"diff-table\">"
                       "<pre>{}</pre></div>\n</body>\n</html>\n",
                       svg, html_escape(diff_runs(a, b, name_a, name_b)));
}

} // namespace lotus::exporter
