#include "live_table.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/printable.h"
#include "export/summary.h"

namespace lotus::exporter {

using model::SpanKind;

uint32_t LiveTable::name_id(const std::string& name)
{
    auto [it, fresh] = ids_.try_emplace(name, static_cast<uint32_t>(names_.size()));
    if (fresh) {
        names_.push_back(name);
        totals_.emplace_back();
    }
    return it->second;
}

void LiveTable::add(const model::Span& s)
{
    std::string name;
    switch (s.kind) {
    case SpanKind::Op:
    case SpanKind::Py: name = common::printable(row_name(s)); break; // (escaped here: the columns stay aligned)
    case SpanKind::Loader: name = "loader"; break;
    case SpanKind::Collate: name = "collate"; break;
    case SpanKind::Sample: name = "sample (whole pipeline)"; samples_++; break;
    case SpanKind::Batch: name = "batch"; break;
    case SpanKind::Wait: name = "wait"; break;
    default: return; // native spans and instants: the summary's business
    }
    uint32_t id = name_id(name);
    uint64_t dur = s.end_ns > s.start_ns ? s.end_ns - s.start_ns : 0;
    totals_[id].count++;
    totals_[id].ns += static_cast<double>(dur);
    recent_.push_back({s.start_ns, s.end_ns, s.pid, id, s.kind});
}

namespace {

// Each line escaped whole (common/printable.h): no control character of a name the target chose reaches the
// terminal, whatever part of the frame quotes it.
std::string fit(const std::string& raw, size_t width)
{
    std::string line = common::printable(raw);
    if (line.size() > width)
        line.resize(width);
    return line;
}

double overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
    uint64_t lo = std::max(a0, b0), hi = std::min(a1, b1);
    return hi > lo ? static_cast<double>(hi - lo) : 0;
}

} // namespace

std::string LiveTable::frame(uint64_t now, const LiveHeader& h, const std::map<uint32_t, model::ProcessInfo>& procs,
                             size_t width, size_t height)
{
    uint64_t from = std::max(h.t0_ns, now > kWindowNs ? now - kWindowNs : 0);
    while (!recent_.empty() && recent_.front().end < from)
        recent_.pop_front();
    double window_ns = now > from ? static_cast<double>(now - from) : 1, window_s = window_ns / 1e9;
    std::string label = fmt::format("last {:.0f} s", window_s < 1.95 ? window_s : 2.0);

    struct Row {
        uint64_t calls = 0;
        double ns = 0;
    };
    std::map<uint32_t, Row> rows;
    struct Proc {
        double busy = 0, wait = 0;
        uint64_t batches = 0;
    };
    std::map<uint32_t, Proc> per_pid;
    uint64_t samples = 0;
    double op_ns = 0;
    for (const auto& r : recent_) {
        if (r.end > now)
            continue;
        auto& row = rows[r.name];
        row.calls++;
        row.ns += static_cast<double>(r.end - r.start);
        auto& p = per_pid[r.pid];
        switch (r.kind) {
        case SpanKind::Sample: samples++; [[fallthrough]];
        case SpanKind::Loader:
        case SpanKind::Collate: p.busy += overlap(r.start, r.end, from, now); break; // these tile a batch
        case SpanKind::Wait: p.wait += overlap(r.start, r.end, from, now); break;
        case SpanKind::Batch: p.batches++; break;
        default: break;
        }
        if (r.kind == SpanKind::Op || r.kind == SpanKind::Loader || r.kind == SpanKind::Collate)
            op_ns += static_cast<double>(r.end - r.start);
    }

    std::vector<std::string> out;
    out.push_back(fmt::format("lotus-bpf top   PID {}   CPython {}   {:.1f} s   events {} (lost {})   q or Ctrl-C: quit",
                              h.pid, h.python, static_cast<double>(now - h.t0_ns) / 1e9, h.events, h.lost));
    std::string waiting;
    for (const auto& [pid, p] : procs)
        if (p.consumer && !p.exited)
            waiting += fmt::format("   {} waiting for data {:.0f} %", common::printable(model::process_label(procs, pid)),
                                   100 * per_pid[pid].wait / window_ns);
    out.push_back(fmt::format("samples/s {:.1f} ({})   samples {}{}", static_cast<double>(samples) / window_s, label,
                              samples_, waiting));
    out.push_back("");
    out.push_back(fmt::format("{:<32} {:>9} {:>10} {:>10} {:>10} {:>7}", "op", "calls/s", "mean ms", "mean ms",
                              "calls", "time %"));
    out.push_back(fmt::format("{:<32} {:>9} {:>10} {:>10} {:>10} {:>7}", "", "(" + label + ")", "(" + label + ")",
                              "(all)", "(all)", "(" + label.substr(5) + ")"));
    // Ops, the loader, the collation and --span functions, most time in the window first; the whole pipeline last.
    std::vector<uint32_t> order;
    for (uint32_t id = 0; id < names_.size(); id++)
        if (names_[id] != "batch" && names_[id] != "wait" && names_[id] != "sample (whole pipeline)")
            order.push_back(id);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        double ta = rows.count(a) ? rows[a].ns : 0, tb = rows.count(b) ? rows[b].ns : 0;
        return ta > tb;
    });
    if (auto it = ids_.find("sample (whole pipeline)"); it != ids_.end())
        order.push_back(it->second);
    size_t room = height > 16 ? height - 16 : 4;
    for (size_t i = 0; i < order.size() && i < room; i++) {
        uint32_t id = order[i];
        const auto& w = rows[id];
        const auto& t = totals_[id];
        bool whole = names_[id] == "sample (whole pipeline)";
        out.push_back(fmt::format("{:<32} {:>9.1f} {:>10} {:>10.3f} {:>10} {:>7}", names_[id].substr(0, 32),
                                  static_cast<double>(w.calls) / window_s,
                                  w.calls ? fmt::format("{:.3f}", w.ns / static_cast<double>(w.calls) / 1e6) : "-",
                                  t.count ? t.ns / static_cast<double>(t.count) / 1e6 : 0.0, t.count,
                                  whole || op_ns <= 0 ? "" : fmt::format("{:.1f}", 100 * w.ns / op_ns)));
    }
    if (order.empty())
        out.push_back("(no pipeline call seen yet)");
    out.push_back("");
    out.push_back(fmt::format("{:<24} {:>8} {:>8} {:>10} {:>9}", "process", "pid", "busy %", "batches/s", "samples"));
    size_t shown = 0;
    for (const auto& [pid, p] : procs) {
        bool worker = p.worker || p.worker_id >= 0;
        if (p.exited || (!worker && !p.consumer && !p.root))
            continue;
        if (shown++ == 16)
            break;
        const auto& pp = per_pid[pid];
        // busy: over the part of the window this process was seen alive
        double alive = overlap(std::max(p.first_ns, from), now, from, now);
        std::string busy = worker && alive > 0 ? fmt::format("{:.0f}", std::min(100.0, 100 * pp.busy / alive)) : "-";
        out.push_back(fmt::format("{:<24} {:>8} {:>8} {:>10} {:>9}",
                                  common::printable(model::process_label(procs, pid)).substr(0, 24), pid,
                                  busy, worker ? fmt::format("{:.1f}", static_cast<double>(pp.batches) / window_s) : "-",
                                  p.samples));
    }
    out.push_back("");
    out.push_back(fmt::format("Rates and shares over the {} of spans that ended: a call still running counts when it "
                              "returns.", label));
    out.push_back("busy %: a worker's time in its samples' loading, pipeline and collation over its time alive.");
    std::string text;
    for (size_t i = 0; i < out.size() && i < height; i++)
        text += fit(out[i], width) + "\n";
    return text;
}

} // namespace lotus::exporter
