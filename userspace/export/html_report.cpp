#include "html_report.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "common/utf8.h"
#include "export/slow_samples_report.h"

namespace lotus::exporter {

std::string html_escape(std::string_view raw)
{
    std::string s = common::valid_utf8(raw), out;
    out.reserve(s.size());
    for (char c : s) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&#39;"; break;
        default: out += c;
        }
    }
    return out;
}

namespace {

using model::ProcessInfo;
using Processes = std::map<uint32_t, ProcessInfo>;

// A duration in the unit that reads best: "850 ns", "12.3 µs", "4.56 ms", "1.20 s".
std::string duration(double ms)
{
    if (ms < 1e-3)
        return fmt::format("{:.0f} ns", ms * 1e6);
    if (ms < 1)
        return fmt::format("{:.3g} µs", ms * 1e3);
    if (ms < 1000)
        return fmt::format("{:.3g} ms", ms);
    return fmt::format("{:.3g} s", ms / 1e3);
}

std::string absent(const std::string& why) { return "<p class=\"absent\">" + html_escape(why) + "</p>\n"; }

// The loop's waiting by cause (model/wait_causes.h).
std::string wait_causes_table(const std::string& who, const std::vector<model::CauseTotal>& causes)
{
    uint64_t all = 0;
    for (const auto& c : causes)
        all += c.ns;
    if (!all)
        return "";
    std::string h = "<table class=\"causes\"><caption>" + html_escape(who) +
                    "The training loop's waiting by cause (docs/wait-causes.md): the causes add up to its waits' "
                    "total.</caption>\n<thead><tr><th>cause</th><th>s</th><th>share %</th><th>waits it was the most of"
                    "</th></tr></thead><tbody>\n";
    for (const auto& c : causes)
        h += fmt::format("<tr><td>{}</td><td>{:.3f}</td><td>{:.1f}</td><td>{}</td></tr>\n",
                         html_escape(model::wait_cause_text(c.cause, c.op)), static_cast<double>(c.ns) / 1e9,
                         100.0 * static_cast<double>(c.ns) / static_cast<double>(all), c.waits);
    return h + "</tbody></table>\n";
}

// The longest waits, each with the batch it awaited and its causes.
std::string longest_waits_table(const Report& r)
{
    constexpr size_t kShown = 20;
    if (r.waits.empty())
        return "";
    std::string h = fmt::format("<table class=\"waits\"><caption>The {} longest of the {} waits: the batch awaited, "
                                "its worker and preparation, its slowest sample and the wait's causes (all of the "
                                "longest {} in the summary JSON's waits).</caption>\n<thead><tr><th>ms</th><th>epoch"
                                "</th><th>batch</th><th>worker</th><th>prepared in ms</th><th>a later batch ready</th>"
                                "<th>slowest sample</th><th>causes</th></tr></thead><tbody>\n",
                                std::min(kShown, r.waits.size()), r.waits_seen, r.waits.size());
    auto id = [](int64_t v) { return v >= 0 ? std::to_string(v) : std::string("?"); };
    for (size_t i = 0; i < r.waits.size() && i < kShown; i++) {
        const auto& w = r.waits[i];
        std::string causes, slowest;
        for (const auto& p : w.parts)
            causes += (causes.empty() ? "" : "; ") +
                      fmt::format("{} {:.1f}", model::wait_cause_text(p.cause, p.op), static_cast<double>(p.ns) / 1e6);
        if (w.slowest_ns)
            slowest = fmt::format("{} {}{:.1f} ms ({})", id(w.slowest_sample),
                                  w.slowest_path.empty() ? "" : w.slowest_path + " ",
                                  static_cast<double>(w.slowest_ns) / 1e6, w.slowest_part);
        h += fmt::format("<tr><td>{:.1f}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                         "<td>{}</td></tr>\n",
                         static_cast<double>(w.ns()) / 1e6, id(w.epoch), id(w.batch),
                         w.worker_pid ? id(w.worker_id) : "-",
                         w.worker_pid ? fmt::format("{:.1f}", static_cast<double>(w.prepare_ns) / 1e6) : "-",
                         w.later_ready ? "yes" : "no", html_escape(slowest.empty() ? "-" : slowest),
                         html_escape(causes));
    }
    return h + "</tbody></table>\n";
}

// The processes the live watch named stuck: which, from when to when, where, and their stacks' innermost frames.
std::string stuck_table(const std::vector<StuckRow>& rows)
{
    std::string h = "<table class=\"stuck\"><thead><tr><th>process</th><th>from s</th><th>to s</th><th>threshold s"
                    "</th><th>batch</th><th>sample</th><th>op</th><th>Python stack (innermost first)</th></tr></thead>"
                    "<tbody>\n";
    auto id = [](int64_t v) { return v >= 0 ? std::to_string(v) : std::string("-"); };
    for (const auto& x : rows)
        h += fmt::format("<tr><td>{} (PID {})</td><td>{:.2f}</td><td>{}</td><td>{:.1f}</td><td>{}</td><td>{}</td>"
                         "<td>{}</td><td><pre>{}</pre></td></tr>\n",
                         html_escape(x.label), x.pid, x.since_s,
                         x.end_s >= 0 ? fmt::format("{:.2f}", x.end_s) : "still, when tracing stopped", x.threshold_s,
                         id(x.batch), id(x.sample), html_escape(x.op.empty() ? "-" : x.op), html_escape(x.stack));
    return h + "</tbody></table>\n";
}

std::string figure(const char* id, const std::string& caption, const std::string& body)
{
    return fmt::format("<figure class=\"chart\" data-chart=\"{}\">\n{}<figcaption>{}</figcaption>\n</figure>\n", id,
                       body, html_escape(caption));
}

// Per-op durations (ops, loader, collate, the whole pipeline) as horizontal box plots on a log axis: whiskers
// min to max, box p25 to p75, the median as a bar, the mean as a dot.
std::string box_plots(const Rows& all)
{
    Rows rows;
    for (const auto& r : all)
        if (r.stats.count)
            rows.push_back(r);
    if (rows.empty())
        return absent("No op, loader or pipeline call was seen: nothing to plot.");
    double lo = 1e300, hi = 0;
    for (const auto& r : rows) {
        const DurationStats& s = r.stats;
        lo = std::min(lo, std::max(s.min_ms, 1e-4));
        hi = std::max(hi, std::max(s.max_ms, 1e-4));
    }
    lo = std::pow(10, std::floor(std::log10(lo)));
    hi = std::pow(10, std::ceil(std::log10(hi)));
    if (hi <= lo)
        hi = lo * 10;
    const double L = 240, W = 540, rowh = 26, top = 8;
    double height = top + rowh * static_cast<double>(rows.size()) + 34;
    auto x = [&](double v) {
        v = std::clamp(v, lo, hi);
        return L + (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo)) * W;
    };
    std::string svg = fmt::format("<svg viewBox=\"0 0 960 {:.0f}\" role=\"img\" aria-label=\"duration per call, per op\">\n",
                                  height);
    double axis_y = top + rowh * static_cast<double>(rows.size());
    for (double t = lo; t <= hi * 1.0001; t *= 10)
        svg += fmt::format("<line class=\"grid\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1}\" y2=\"{2:.1f}\"/>"
                           "<text class=\"tick\" x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
                           x(t), top, axis_y, axis_y + 16, html_escape(duration(t)));
    for (size_t i = 0; i < rows.size(); i++) {
        const DurationStats& s = rows[i].stats;
        double y = top + rowh * static_cast<double>(i) + rowh / 2;
        std::string label = rows[i].label();
        std::string tip = fmt::format("{}: {} calls; min {}, p25 {}, median {}, p75 {}, max {}, mean {}, p95 {}, p99 {}",
                                      label, s.count, duration(s.min_ms), duration(s.p25_ms), duration(s.p50_ms),
                                      duration(s.p75_ms), duration(s.max_ms), duration(s.mean_ms), duration(s.p95_ms),
                                      duration(s.p99_ms));
        svg += fmt::format("<g class=\"box\"><title>{}</title>", html_escape(tip));
        svg += fmt::format("<text class=\"label\" x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>", L - 8, y + 4,
                           html_escape(label.size() > 34 ? label.substr(0, 31) + "..." : label));
        svg += fmt::format("<line class=\"whisker\" x1=\"{0:.1f}\" x2=\"{1:.1f}\" y1=\"{2:.1f}\" y2=\"{2:.1f}\"/>",
                           x(s.min_ms), x(s.max_ms), y);
        svg += fmt::format("<rect class=\"iqr\" x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.0f}\"/>",
                           x(s.p25_ms), y - 8, std::max(1.0, x(s.p75_ms) - x(s.p25_ms)), 16.0);
        svg += fmt::format("<line class=\"median\" x1=\"{0:.1f}\" x2=\"{0:.1f}\" y1=\"{1:.1f}\" y2=\"{2:.1f}\"/>",
                           x(s.p50_ms), y - 9, y + 9);
        svg += fmt::format("<circle class=\"mean\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\"/>", x(s.mean_ms), y);
        svg += fmt::format("<text class=\"value\" x=\"{:.0f}\" y=\"{:.1f}\">median {} · n {}</text></g>\n", L + W + 12,
                           y + 4, html_escape(duration(s.p50_ms)), s.count);
    }
    svg += "</svg>\n";
    return svg;
}

std::string ops_table(const Rows& rows)
{
    std::string t = "<table class=\"numbers\"><thead><tr><th>op</th><th>count</th><th>mean</th><th>p50</th><th>p95</th>"
                    "<th>p99</th><th>total</th><th>on-CPU per call</th><th>on-CPU %</th></tr></thead><tbody>\n";
    for (const auto& r : rows)
        t += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                         "<td>{}</td></tr>\n",
                         html_escape(r.label()), r.stats.count, duration(r.stats.mean_ms), duration(r.stats.p50_ms),
                         duration(r.stats.p95_ms), duration(r.stats.p99_ms), duration(r.stats.total_ms),
                         r.stats.cpu_ms < 0 ? "-" : duration(r.stats.cpu_ms),
                         r.stats.on_cpu_pct < 0 ? "-" : fmt::format("{:.0f}", r.stats.on_cpu_pct));
    return t + "</tbody></table>\n";
}

// Counts in the Lotus paper's three buckets as bars, each with its count and share.
std::string buckets(const char* what, uint64_t le_1ms, uint64_t mid, uint64_t gt_500ms)
{
    const uint64_t counts[] = {le_1ms, mid, gt_500ms};
    const char* names[] = {"≤ 1 ms", "1–500 ms", "> 500 ms"};
    uint64_t total = le_1ms + mid + gt_500ms, most = std::max({le_1ms, mid, gt_500ms});
    const double base = 170, H = 140;
    std::string svg = fmt::format("<svg viewBox=\"0 0 420 210\" role=\"img\" aria-label=\"{}\">\n", what);
    svg += fmt::format("<line class=\"axis\" x1=\"20\" x2=\"400\" y1=\"{0}\" y2=\"{0}\"/>\n", base);
    for (int i = 0; i < 3; i++) {
        double h = most ? H * static_cast<double>(counts[i]) / static_cast<double>(most) : 0;
        double x = 40 + i * 125.0;
        double pct = total ? 100.0 * static_cast<double>(counts[i]) / static_cast<double>(total) : 0;
        svg += fmt::format("<g class=\"bar\"><title>{}: {} of {} ({:.1f} %)</title>"
                           "<rect x=\"{:.0f}\" y=\"{:.1f}\" width=\"90\" height=\"{:.1f}\"/>"
                           "<text class=\"value\" x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"middle\">{} ({:.0f} %)</text>"
                           "<text class=\"tick\" x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"middle\">{}</text></g>\n",
                           html_escape(names[i]), counts[i], total, pct, x, base - h, h, x + 45, base - h - 5, counts[i],
                           pct, x + 45, base + 18, html_escape(names[i]));
    }
    return svg + "</svg>\n";
}

// Seconds on the x axis of the time charts.
std::string time_axis(double L, double W, double y, double seconds)
{
    std::string svg;
    double step = 1e-3; // 1, 2, 5 x 10^k ms: at most ten ticks
    for (int i = 0; seconds / step > 10; i++)
        step *= i % 3 == 1 ? 2.5 : 2;
    for (double t = 0; t <= seconds + 1e-9; t += step)
        svg += fmt::format("<text class=\"tick\" x=\"{:.1f}\" y=\"{:.0f}\" text-anchor=\"middle\">{:g} s</text>\n",
                           L + W * t / seconds, y, std::round(t * 1000) / 1000);
    return svg;
}

// Samples completed per second by the whole job, per bin.
std::string samples_rate(const Timeline& tl)
{
    const auto& n = tl.samples();
    if (n.empty())
        return absent("No sample (pipeline call) completed while tracing.");
    double width_s = static_cast<double>(tl.width_ns()) / 1e9, seconds = static_cast<double>(tl.end_ns()) / 1e9;
    std::vector<double> rate;
    for (size_t i = 0; i < tl.bins(); i++) {
        // the last bin ends where the last span did
        double w = std::min(width_s, seconds - static_cast<double>(i) * width_s);
        rate.push_back(i < n.size() && w > 0 ? static_cast<double>(n[i]) / w : 0);
    }
    double top = *std::max_element(rate.begin(), rate.end());
    if (top <= 0)
        top = 1;
    const double L = 70, W = 860, H = 180, y0 = 10;
    std::string svg = "<svg viewBox=\"0 0 960 230\" role=\"img\" aria-label=\"samples per second over time\">\n";
    for (int k = 0; k <= 4; k++) {
        double y = y0 + H - H * k / 4;
        svg += fmt::format("<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/><text class=\"tick\" "
                           "x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.0f}</text>\n",
                           L, L + W, y, y, L - 6, y + 4, top * k / 4);
    }
    std::string pts = fmt::format("{:.1f},{:.1f}", L, y0 + H);
    for (size_t i = 0; i < rate.size(); i++) {
        double t0 = static_cast<double>(i) * width_s, t1 = std::min(seconds, t0 + width_s);
        double y = y0 + H - H * rate[i] / top;
        pts += fmt::format(" {:.1f},{:.1f} {:.1f},{:.1f}", L + W * t0 / seconds, y, L + W * t1 / seconds, y);
    }
    pts += fmt::format(" {:.1f},{:.1f}", L + W, y0 + H);
    svg += fmt::format("<polygon class=\"rate\" points=\"{}\"><title>samples/s per {:g} ms; peak {:.0f}</title></polygon>\n",
                       pts, width_s * 1000, top);
    svg += time_axis(L, W, y0 + H + 18, seconds);
    return svg + "</svg>\n";
}

// Per worker id (and per training loop): the share of each bin spent inside batch spans (or waiting in next()),
// over the time a process playing that role was alive in the bin; bins where none was alive stay blank.
std::string busy_strips(const Timeline& tl, const Processes& procs)
{
    struct Row {
        std::string label;
        bool wait = false;
        std::vector<uint32_t> pids;
    };
    std::map<std::tuple<uint32_t, int, int, int>, Row> rows; // (owner, 0 loop / 1 worker, loader, worker id)
    std::set<int> loaders;
    for (const auto& [pid, p] : procs)
        if (p.worker && p.batches && pid != p.owner)
            loaders.insert(p.loader);
    for (const auto& [pid, p] : procs) {
        if (tl.wait_ns().count(pid)) {
            auto& r = rows[{pid, 0, -1, -1}];
            r.label = model::process_label(procs, pid) + ": waiting in next()";
            r.wait = true;
            r.pids.push_back(pid);
        }
        if (tl.busy_ns().count(pid) && !tl.wait_ns().count(pid)) {
            auto& r = rows[{p.owner, 1, p.loader, p.worker_id}];
            r.label = model::process_label(procs, pid) +
                      (loaders.size() > 1 && p.loader >= 0 ? fmt::format(" (DataLoader {})", p.loader) : "") + ": busy";
            r.pids.push_back(pid);
        }
    }
    if (rows.empty() || !tl.bins())
        return absent("No DataLoader batch or wait was seen while tracing.");
    double width_ns = static_cast<double>(tl.width_ns()), seconds = static_cast<double>(tl.end_ns()) / 1e9;
    const double L = 230, W = 700, rowh = 22;
    double height = rowh * static_cast<double>(rows.size()) + 30;
    std::string svg = fmt::format("<svg viewBox=\"0 0 960 {:.0f}\" role=\"img\" aria-label=\"busy share over time\">\n",
                                  height);
    double cell = W * width_ns / 1e9 / seconds;
    size_t i = 0;
    for (const auto& [key, r] : rows) {
        double y = rowh * static_cast<double>(i++);
        svg += fmt::format("<text class=\"label\" x=\"{:.0f}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", L - 8,
                           y + 15, html_escape(r.label));
        svg += fmt::format("<rect class=\"strip\" x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{}\"/>\n", L, y + 2, W,
                           rowh - 4);
        for (size_t b = 0; b < tl.bins(); b++) {
            double b0 = static_cast<double>(b) * width_ns, b1 = b0 + width_ns;
            double alive = 0, inside = 0;
            for (uint32_t pid : r.pids) {
                const auto& p = procs.at(pid);
                double first = p.first_ns > tl.t0_ns() ? static_cast<double>(p.first_ns - tl.t0_ns()) : 0;
                double last = p.last_ns > tl.t0_ns() ? static_cast<double>(p.last_ns - tl.t0_ns()) : 0;
                alive += std::max(0.0, std::min(b1, last) - std::max(b0, first));
                if (auto f = tl.folded_alive_ns().find(pid); f != tl.folded_alive_ns().end())
                    alive += static_cast<double>(f->second.at(b));
                inside += static_cast<double>((r.wait ? tl.wait_ns() : tl.busy_ns()).at(pid).at(b));
            }
            if (alive <= 0)
                continue;
            double f = std::min(1.0, inside / alive);
            svg += fmt::format("<rect class=\"{}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" "
                               "fill-opacity=\"{:.2f}\"><title>{}, {:.2f}–{:.2f} s: {:.0f} %</title></rect>\n",
                               r.wait ? "wait" : "busy", L + cell * static_cast<double>(b), y + 2, cell + 0.05, rowh - 4,
                               0.08 + 0.92 * f, html_escape(r.label), b0 / 1e9, b1 / 1e9, 100 * f);
        }
    }
    svg += time_axis(L, W, rowh * static_cast<double>(rows.size()) + 18, seconds);
    return svg + "</svg>\n";
}

// Per process role (a worker id stands for every process that played it), CPU % or RSS per bin, as lines.
std::string usage_lines(const Timeline& tl, const Processes& procs, bool memory)
{
    const auto& series = memory ? tl.rss_kb() : tl.cpu_ns();
    if (series.empty() || !tl.bins())
        return absent("No resource reading: the run was traced with --resources-interval 0, or by a version that "
                      "did not read them.");
    std::map<std::string, std::vector<double>> roles; // per bin: CPU % or MB; -1: no process of it was read
    std::vector<std::string> order;
    double width_ns = static_cast<double>(tl.width_ns()), top = 0;
    for (const auto& [pid, v] : series) {
        std::string role = model::process_label(procs, pid);
        auto [it, fresh] = roles.try_emplace(role, std::vector<double>(tl.bins(), -1));
        if (fresh)
            order.push_back(role);
        const auto& rss = tl.rss_kb().at(pid); // a reading covers its bins: a live process has resident pages
        for (size_t b = v.first; b < v.end() && b < tl.bins(); b++)
            if (rss.at(b))
                it->second[b] = std::max(0.0, it->second[b]) + (memory ? static_cast<double>(v.at(b)) / 1024
                                                                        : 100 * static_cast<double>(v.at(b)) / width_ns);
    }
    for (const auto& [role, v] : roles)
        top = std::max(top, *std::max_element(v.begin(), v.end()));
    if (top <= 0)
        top = 1;
    static const char* kColours[] = {"#1a56b0", "#d9480f", "#2b8a3e", "#862e9c", "#e67700", "#0b7285", "#5c940d",
                                     "#a61e4d"};
    double seconds = static_cast<double>(tl.end_ns()) / 1e9, bin_s = width_ns / 1e9;
    const double L = 70, W = 700, H = 170, y0 = 10;
    std::string svg = fmt::format("<svg viewBox=\"0 0 960 {}\" role=\"img\" aria-label=\"{} over time\">\n",
                                  std::max<size_t>(230, 30 + 18 * order.size()), memory ? "memory" : "CPU");
    for (int k = 0; k <= 4; k++) {
        double y = y0 + H - H * k / 4;
        svg += fmt::format("<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{:.1f}\" y2=\"{:.1f}\"/><text class=\"tick\" "
                           "x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.0f}{}</text>\n",
                           L, L + W, y, y, L - 6, y + 4, top * k / 4, memory ? " MB" : " %");
    }
    for (size_t i = 0; i < order.size(); i++) {
        const auto& v = roles[order[i]];
        const char* colour = kColours[i % std::size(kColours)];
        std::string pts; // one line per stretch of bins with readings: no line where none of its processes ran
        auto line = [&] {
            if (!pts.empty())
                svg += fmt::format("<polyline class=\"series\" stroke=\"{}\" points=\"{}\"><title>{}</title></polyline>\n",
                                   colour, pts, html_escape(order[i]));
            pts.clear();
        };
        for (size_t b = 0; b < v.size(); b++) {
            if (v[b] < 0) {
                line();
                continue;
            }
            double t = std::min(seconds, (static_cast<double>(b) + 0.5) * bin_s);
            pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", L + W * t / seconds, y0 + H - H * v[b] / top);
        }
        line();
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/><text class=\"label\" "
                           "x=\"{}\" y=\"{}\">{}</text>\n",
                           L + W + 14, y0 + 18 * i, colour, L + W + 28, y0 + 18 * i + 9, html_escape(order[i]));
    }
    svg += time_axis(L, W, y0 + H + 18, seconds);
    return svg + "</svg>\n";
}

std::string usage_table(const std::vector<UsageRow>& rows)
{
    std::string t = "<table class=\"numbers\"><thead><tr><th>role</th><th>processes</th><th>wall s</th><th>CPU s</th>"
                    "<th>avg CPU %</th><th>peak CPU %</th><th>avg RSS MB</th><th>peak RSS MB</th><th>peak PSS MB</th>"
                    "<th>read MB</th><th>write MB</th><th>net out MB</th><th>net in MB</th><th>context switches</th>"
                    "<th>CPU throttled s</th></tr></thead><tbody>\n";
    for (const auto& r : rows)
        t += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.2f}</td><td>{:.0f}</td><td>{:.0f}</td>"
                         "<td>{:.0f}</td><td>{:.0f}</td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td><td>{}</td><td>{}</td>"
                         "<td>{}</td><td>{}</td></tr>\n",
                         html_escape(r.role), r.processes, r.wall_s, r.user_s + r.system_s, r.cpu_avg_pct,
                         r.cpu_peak_pct, r.rss_avg_mb, r.rss_peak_mb,
                         r.pss_peak_mb < 0 ? "-" : fmt::format("{:.0f}", r.pss_peak_mb), r.read_mb, r.write_mb,
                         r.net_known ? fmt::format("{:.1f}", r.net_sent_mb) : "-",
                         r.net_known ? fmt::format("{:.1f}", r.net_recv_mb) : "-", r.voluntary_cs + r.involuntary_cs,
                         r.throttle_known ? fmt::format("{:.2f} ({} of {} periods)", r.throttled_s, r.throttled_periods,
                                                        r.periods)
                                          : "-");
    return t + "</tbody></table>\n";
}

// Per op, the native functions its CPU samples fell in, as bars of their share.
std::string native_bars(const std::vector<model::OpNativeMap>& map)
{
    if (map.empty())
        return absent("No native map: the run was not traced with --native-map (or --native), or took no sample.");
    const size_t kOps = 40, kFns = 6;
    const double L = 330, W = 460, rowh = 17;
    std::string body;
    double y = 0;
    for (size_t i = 0; i < map.size() && i < kOps; i++) {
        const auto& op = map[i];
        double n = static_cast<double>(op.samples);
        body += fmt::format("<text class=\"op\" x=\"0\" y=\"{:.0f}\">{} — {} samples, {:.0f} % named, {:.0f} % in the "
                            "kernel</text>\n",
                            y + 14, html_escape(op.op), op.samples, 100.0 * static_cast<double>(op.named) / n,
                            100.0 * static_cast<double>(op.in_kernel) / n);
        y += rowh + 4;
        for (size_t k = 0; k < op.functions.size() && k < kFns; k++) {
            const auto& f = op.functions[k];
            double pct = 100.0 * static_cast<double>(f.samples) / n;
            std::string name = f.function.size() > 44 ? f.function.substr(0, 41) + "..." : f.function;
            body += fmt::format("<g class=\"bar\"><title>{} ({}): {} samples, {:.1f} % of {}</title>"
                                "<text class=\"label\" x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{}</text>"
                                "<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"{:.0f}\"/>"
                                "<text class=\"value\" x=\"{:.1f}\" y=\"{:.0f}\">{:.1f} %</text></g>\n",
                                html_escape(f.function), html_escape(f.library), f.samples, pct, html_escape(op.op),
                                L - 8, y + 12, html_escape(name), L, y + 2, std::max(0.5, W * pct / 100), rowh - 3,
                                L + W * pct / 100 + 6, y + 12, pct);
            y += rowh;
        }
        y += 8;
    }
    std::string more = map.size() > kOps ? fmt::format("<p>{} more ops in --summary-json.</p>\n", map.size() - kOps) : "";
    return fmt::format("<svg viewBox=\"0 0 960 {:.0f}\" role=\"img\" aria-label=\"native functions per op\">\n{}</svg>\n",
                       y + 4, body) +
           more;
}

std::string counters_table(const std::vector<std::string>& names, const std::vector<CounterRow>& rows)
{
    if (rows.empty())
        return absent("No counters: the run was not traced with --counters.");
    std::string t = "<table class=\"numbers\"><thead><tr><th>op</th><th>count</th>";
    for (const auto& n : names)
        t += "<th>" + html_escape(clock_counter(n) ? n + " ms" : n) + "</th>";
    t += "<th>IPC</th><th>on-CPU %</th></tr></thead><tbody>\n";
    for (const auto& r : rows) {
        t += fmt::format("<tr><td>{}</td><td>{}</td>", html_escape(r.label()),
                         r.count);
        for (size_t k = 0; k < r.mean.size(); k++)
            t += clock_counter(names[k]) ? fmt::format("<td>{:.3f}</td>", r.mean[k] / 1e6)
                                         : fmt::format("<td>{:.1f}</td>", r.mean[k]);
        t += fmt::format("<td>{}</td><td>{}</td></tr>\n", r.ipc < 0 ? "-" : fmt::format("{:.2f}", r.ipc),
                         r.on_cpu_pct < 0 ? "-" : fmt::format("{:.0f}", r.on_cpu_pct));
    }
    return t + "</tbody></table>\n<p class=\"legend\">Means per call of the op. IPC: instructions per cycle, where "
               "the PMU counts both; on-CPU %: the thread's time on a CPU over the call's wall time.</p>\n";
}

std::string processes_table(const std::vector<ProcessEntry>& entries)
{
    // (a row that other exited processes of its role were folded into: theirs too)
    std::string t = "<table class=\"numbers\"><thead><tr><th>process</th><th>pid</th><th>DataLoader</th><th>samples"
                    "</th><th>batches</th><th>busy %</th><th>ended</th></tr></thead><tbody>\n";
    for (const auto& e : entries) {
        const auto& p = *e.info;
        bool worker = e.worker;
        double seen = static_cast<double>(p.seen_ns());
        std::string busy = worker && p.batches && seen > 0
                               ? fmt::format("{:.1f}", 100.0 * static_cast<double>(p.busy_ns) / seen)
                               : "-";
        std::string how = model::how_it_ended(p);
        t += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                         html_escape(e.label), model::pid_list(p),
                         worker ? (p.loader >= 0 ? std::to_string(p.loader) : "?") : "-", p.samples, p.batches, busy,
                         html_escape(how.empty() ? (p.exited ? "exited" : "-") : how));
    }
    return t + "</tbody></table>\n";
}

const char* kStyle = R"(body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1000px;color:#1d1d1f;padding:0 12px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
figure{margin:8px 0 16px}figcaption,.legend{color:#555;font-size:12.5px}svg{width:100%;height:auto;display:block}
.absent{color:#7a4b00;background:#fff6e0;padding:6px 10px;border-radius:4px}.run{color:#444}
table.numbers{border-collapse:collapse;font-size:12.5px;margin:6px 0}table.numbers td,table.numbers th{padding:2px 8px;
text-align:right;border-bottom:1px solid #eee}table.numbers td:first-child,table.numbers th:first-child{text-align:left}
.verdict{font-weight:600}.verdict[data-input-bound=highly]{color:#b3261e}.verdict[data-input-bound=moderately]{color:#8a5300}.pair{display:flex;gap:16px;flex-wrap:wrap}.pair figure{flex:1 1 420px}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .op{font-weight:600}.grid{stroke:#e4e4e4}.axis{stroke:#999}
.whisker{stroke:#555}.iqr{fill:#9ec5fe;stroke:#3d6fb6}.median{stroke:#0b2e6b;stroke-width:2.5}.mean{fill:#d9480f}
.series{fill:none;stroke-width:1.5}.bar rect{fill:#5b8def}.rate{fill:#cfe0fc;stroke:#3d6fb6}.strip{fill:#f3f3f3}.busy{fill:#1a56b0}.wait{fill:#d9480f}
)";

} // namespace

std::string html_report(const Report& r, const Timeline& timeline)
{
    const auto& run = r.run;
    const Processes& processes = *r.processes;
    std::string title = fmt::format("lotus-bpf report{}", run.target_pid ? fmt::format(": PID {}", run.target_pid) : "");
    std::string h = fmt::format("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n"
                                "<style>\n{}</style>\n</head>\n<body>\n<h1>{}</h1>\n",
                                html_escape(title), kStyle, html_escape(title));
    h += fmt::format("<p class=\"run\">{} · Python {} · stopped: {} · {} samples · {} events, {} lost{}{}</p>\n",
                     html_escape(run.tool), html_escape(run.python.empty() ? "?" : run.python),
                     html_escape(run.stop_reason), run.samples, run.events, run.lost_events,
                     run.job_cpus > 0 ? fmt::format(" · the job may use {:g} CPU(s) ({})", run.job_cpus,
                                                    html_escape(run.cpus_from))
                                      : "",
                     run.incomplete_spans ? fmt::format(" · {} span(s) left out (incomplete)", run.incomplete_spans) : "");
    if (run.lost_events)
        h += absent("Events were lost (ring buffer full): spans that lost an event are left out, never guessed.");

    h += "<h2 id=\"verdict\">Verdict</h2>\n";
    if (r.loops.empty())
        h += absent("No training loop consumed a DataLoader batch while tracing: no verdict (whether the job is "
                    "input-bound is not known).");
    for (const auto& l : r.loops) {
        // (its grade, where known, as an attribute: data-input-bound="not", "moderately", "highly")
        std::string grade = l.grade ? fmt::format(" data-input-bound=\"{}\"", input_bound_key(*l.grade)) : "";
        h += "<p class=\"verdict\"" + grade + ">" + html_escape(l.verdict) + "</p>\n";
        if (!l.advice.empty()) {
            h += "<ul class=\"advice\">\n";
            for (const auto& a : l.advice)
                h += "<li>" + html_escape(a) + "</li>\n";
            h += "</ul>\n";
        }
    }

    if (!r.ranks.empty()) { // several training processes: side by side, and the straggler
        h += "<h2 id=\"ranks\">Ranks</h2>\n";
        h += "<table class=\"numbers\"><thead><tr><th>training process</th><th>rank</th><th>local rank</th>"
             "<th>node</th><th>samples</th><th>samples/s</th><th>wait %</th><th>batch prep ms</th><th>verdict</th>"
             "</tr></thead><tbody>\n";
        auto num = [](int v) { return v >= 0 ? std::to_string(v) : std::string("-"); };
        for (const auto& k : r.ranks)
            h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td><td>{:.1f}</td>"
                             "<td>{:.2f}</td><td>{}</td></tr>\n",
                             html_escape(k.label), num(k.rank), num(k.local_rank),
                             html_escape(k.node.empty() ? "-" : k.node), k.samples, k.samples_per_s,
                             k.wait_share * 100, k.prepare_mean_ms,
                             !k.batches ? "no batch" : k.grade ? input_bound_text(*k.grade) : "not known");
        h += "</tbody></table>\n";
        h += fmt::format("<p class=\"legend\">Verdict: waiting {:g} % of its time or more, highly input-bound; "
                         "{:g}-{:g} %, moderately; under {:g} %, not.</p>\n",
                         kHighlyInputBound * 100, kModeratelyInputBound * 100, kHighlyInputBound * 100,
                         kModeratelyInputBound * 100);
        h += r.straggler ? "<p class=\"verdict\">" + html_escape(r.straggler->text) + "</p>\n"
                         : absent("No straggler: no rank's wait for data stands out from the others'.");
    }

    const auto& rows = r.ops;
    h += "<h2 id=\"ops\">Time per call</h2>\n";
    h += figure("op-durations",
                "Wall-clock time per call of each op, the sample's loading (loader: reading and decoding the file) and "
                "the batch's collation, over every DataLoader; log scale. Whiskers: min to max; box: p25 to p75; bar: "
                "median; dot: mean. Hover for the figures.",
                box_plots(rows));
    if (!rows.empty())
        h += ops_table(rows);
    // Which DataLoaders these are (what each loads), and what became of the pass in flight when tracing began.
    for (const auto& s : r.loaders)
        if (s.key.owner && (s.title.find(": ") != std::string::npos || !s.note.empty()))
            h += "<p class=\"loader\">" + html_escape(s.title) + (s.note.empty() ? "" : ". " + html_escape(s.note)) +
                 "</p>\n";

    h += "<h2 id=\"slow-samples\">Slow samples</h2>\n" + slow_samples_html(r.slow_samples);

    h += "<h2 id=\"waits\">The training loop's waits</h2>\n";
    if (r.loops.empty())
        h += figure("wait-histogram", "", absent("No training loop waited for a DataLoader batch while tracing.")) +
             figure("delay-histogram", "", absent("No batch was consumed while tracing."));
    for (size_t i = 0; i < r.loops.size(); i++) {
        const auto& l = r.loops[i];
        std::string who = r.loops.size() > 1 ? r.loop_labels[i] + ": " : "";
        const auto& b = l.all;
        h += "<div class=\"pair\">\n";
        h += figure("wait-histogram",
                    who + fmt::format("How long the training loop waited in next() for each of its {} batches, in the "
                                      "Lotus paper's buckets.",
                                      b.wait.count),
                    b.wait.count ? buckets("waits", b.wait_le_1ms, b.wait_1_500ms, b.wait_gt_500ms)
                                 : absent("No wait was seen."));
        h += figure("delay-histogram",
                    who + fmt::format("From a batch ready (its worker handed it over) to its use by the training loop, "
                                      "{} batches; out of order: {}.{}",
                                      b.delay.count, b.out_of_order,
                                      b.misnamed ? fmt::format(" {} wait(s), named before next() was seen returning "
                                                               "batches as they arrived (in_order=False), carry "
                                                               "another batch's delay.",
                                                               b.misnamed)
                                                 : ""),
                    b.delay.count ? buckets("delays", b.delay_le_1ms, b.delay_1_500ms, b.delay_gt_500ms)
                                  : absent("No delay is known: no consumed batch could be matched to the batch span "
                                           "that made it."));
        h += "</div>\n";
        h += wait_causes_table(who, b.causes);
    }
    h += longest_waits_table(r);

    h += "<h2 id=\"time\">Over time</h2>\n";
    h += figure("samples-per-second",
                fmt::format("Samples (pipeline calls) completed per second by the whole job, per {:g} ms.",
                            static_cast<double>(timeline.width_ns()) / 1e6),
                samples_rate(timeline));
    h += figure("busy-over-time",
                fmt::format("Per DataLoader worker id, the share of each {:g} ms preparing batches (blue); per training "
                            "loop, the share waiting in next() (orange). Darker is more; blank: no process of that role "
                            "was running. A worker id stands for every process that played it (one per epoch unless "
                            "persistent_workers).",
                            static_cast<double>(timeline.width_ns()) / 1e6),
                busy_strips(timeline, processes));

    h += "<h2 id=\"resources\">Resources</h2>\n";
    h += figure("cpu-over-time",
                "CPU per process role over time, in % of one CPU (a worker id stands for every process that played it; "
                "/proc counts in 10 ms clock ticks).",
                usage_lines(timeline, processes, false));
    h += figure("memory-over-time", "Resident memory (RSS) per process role over time, in MB (pages shared between "
                                    "processes count in each).",
                usage_lines(timeline, processes, true));
    if (!r.usage.empty())
        h += "<div data-chart=\"usage\">\n" + usage_table(r.usage) +
             fmt::format("<p class=\"legend\">Read from /proc every {} ms and from the kernel as each process exited. "
                         "Peaks over 1 s or more; the job's peaks are of the processes' sum; PSS splits shared pages "
                         "between the processes that share them.</p>\n</div>\n",
                         r.usage_interval_ms);
    if (r.worker_memory)
        h += worker_memory_html(*r.worker_memory);
    h += "<h2 id=\"native\">Native functions per op</h2>\n";
    h += figure("native-map",
                "Share of each op's CPU samples that fell in each native function (the top six; docs/native-map.md).",
                native_bars(r.native_map));
    h += "<h2 id=\"counters\">Counters per op</h2>\n";
    h += "<div data-chart=\"counters\">\n" + counters_table(r.counter_names, r.counters) + "</div>\n";
    if (!r.stuck.empty())
        h += "<h2 id=\"stuck\">Stuck processes</h2>\n" + stuck_table(r.stuck);
    h += "<h2 id=\"processes\">Processes</h2>\n" + processes_table(r.entries);
    if (!r.notes.empty()) {
        h += "<h2 id=\"notes\">Notes</h2>\n<ul>\n";
        for (const auto& n : r.notes) // (a printed one may open with a blank line)
            h += "<li>" + html_escape(n.substr(std::min(n.size(), n.find_first_not_of('\n')))) + "</li>\n";
        h += "</ul>\n";
    }
    h += "<p class=\"legend\">How to read this report: docs/trace-format.md and docs/html-report.md (installed under "
         "/usr/share/doc/lotus-bpf).</p>\n</body>\n</html>\n";
    return h;
}

} // namespace lotus::exporter
