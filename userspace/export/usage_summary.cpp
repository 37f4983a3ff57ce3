#include "usage_summary.h"

#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "export/json.h"
#include "export/summary.h"

namespace lotus::exporter {

std::vector<UsageRow> usage_rows(const model::UsageTracker& usage,
                                 const std::map<uint32_t, model::ProcessInfo>& processes)
{
    std::vector<UsageRow> out;
    if (usage.processes().empty())
        return out;
    // Rows keyed like the summary's process table: training processes, then their workers by id.
    using Key = std::tuple<uint32_t, int, int, int, std::string>; // owner, worker, loader, worker id, label
    std::set<int> seen_loaders; // workers of more than one DataLoader (or of one not known): each row says which
    for (const auto& [pid, u] : usage.processes())
        if (auto p = processes.find(pid); p != processes.end() && (p->second.worker || p->second.worker_id >= 0))
            seen_loaders.insert(p->second.loader);
    bool loaders = seen_loaders.size() > 1;
    std::map<Key, UsageRow> roles;
    std::map<Key, double> rss_covered_s; // the time its RSS readings cover, for their mean
    std::set<Key> unthrottled;           // a process of it whose cgroup's throttling was not read at both ends
    UsageRow job;
    job.role = "job";
    uint64_t first = UINT64_MAX, last = 0;
    for (const auto& [pid, u] : usage.processes()) {
        auto p = processes.find(pid);
        bool worker = p != processes.end() && (p->second.worker || p->second.worker_id >= 0);
        std::string label = model::process_label(processes, pid);
        uint32_t group = p == processes.end() ? pid : worker && p->second.owner ? p->second.owner : pid;
        int loader = worker ? p->second.loader : -1;
        if (worker && loaders)
            label += loader >= 0 ? fmt::format(" (DataLoader {})", loader) : " (DataLoader ?)";
        Key key{p != processes.end() && p->second.root ? 0 : group, worker ? 1 : 0, loader,
                worker ? p->second.worker_id : -1, label};
        auto& r = roles[key];
        rss_covered_s[key] += u.rss_s;
        r.role = label;
        for (UsageRow* row : {&r, &job}) {
            row->processes += u.processes;
            row->user_s += static_cast<double>(u.user_ns) / 1e9;
            row->system_s += static_cast<double>(u.system_ns) / 1e9;
            row->read_mb += static_cast<double>(u.read_bytes) / 1e6;
            row->write_mb += static_cast<double>(u.write_bytes) / 1e6;
            row->net_sent_mb += static_cast<double>(u.net_sent) / 1e6;
            row->net_recv_mb += static_cast<double>(u.net_recv) / 1e6;
            row->net_known &= u.net_known();
            row->voluntary_cs += u.nvcsw;
            row->involuntary_cs += u.nivcsw;
            row->exact &= u.exact_end;
        }
        if (!u.throttle_known)
            unthrottled.insert(key);
        r.throttle_known = true;
        r.periods += u.periods;
        r.throttled_periods += u.throttled_periods;
        r.throttled_s += static_cast<double>(u.throttled_ns) / 1e9;
        r.wall_s += static_cast<double>(u.wall_ns()) / 1e9;
        r.cpu_peak_pct = std::max(r.cpu_peak_pct, u.peak_cpu_pct);
        r.rss_avg_mb += u.rss_kb_s / 1024; // divided by the time below
        r.rss_peak_mb = std::max(r.rss_peak_mb, static_cast<double>(u.peak_rss_kb) / 1024);
        if (u.peak_pss_kb)
            r.pss_peak_mb = std::max(r.pss_peak_mb, static_cast<double>(u.peak_pss_kb) / 1024);
        first = std::min(first, u.first_ns);
        last = std::max(last, u.last_ns);
    }
    for (auto& [key, r] : roles) {
        r.throttle_known &= !unthrottled.count(key);
        double covered = rss_covered_s[key];
        r.rss_avg_mb = covered > 0 ? r.rss_avg_mb / covered : 0;
        r.cpu_avg_pct = r.wall_s > 0 ? 100 * (r.user_s + r.system_s) / r.wall_s : 0;
        out.push_back(r);
    }
    const auto& j = usage.job();
    job.wall_s = last > first ? static_cast<double>(last - first) / 1e9 : 0;
    job.cpu_avg_pct = job.wall_s > 0 ? 100 * (job.user_s + job.system_s) / job.wall_s : 0;
    job.cpu_peak_pct = j.peak_cpu_pct;
    job.rss_peak_mb = static_cast<double>(j.peak_rss_sum_kb) / 1024;
    job.pss_peak_mb = j.peak_pss_sum_kb ? static_cast<double>(j.peak_pss_sum_kb) / 1024 : -1;
    double rss_kb_s = 0;
    for (const auto& [pid, u] : usage.processes())
        rss_kb_s += u.rss_kb_s;
    job.rss_avg_mb = job.wall_s > 0 ? rss_kb_s / 1024 / job.wall_s : 0;
    if (auto l = usage.limits(); l.have_throttle) { // the cgroups' own (each process's would count it again)
        job.throttle_known = true;
        job.periods = l.periods;
        job.throttled_periods = l.throttled_periods;
        job.throttled_s = static_cast<double>(l.throttled_ns) / 1e9;
    }
    out.push_back(job);
    return out;
}

void print_usage(FILE* out, const std::vector<UsageRow>& rows, unsigned interval_ms)
{
    if (rows.empty())
        return;
    bool net = rows.back().net_known;
    auto net_mb = [](const UsageRow& r, double mb) { return r.net_known ? fmt::format("{:.1f}", mb) : std::string("-"); };
    fmt::print(out, "\n{:<26} {:>5} {:>8} {:>8} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>10}\n",
               "resources", "procs", "wall s", "CPU s", "avg CPU%", "peak CPU%", "avg RSS", "peak RSS", "peak PSS",
               "read MB", "write MB", "net out", "net in", "ctx sw");
    bool running = false;
    for (const auto& r : rows) {
        running |= !r.exact;
        fmt::print(out, "{:<26} {:>5} {:>8.1f} {:>8.2f} {:>9.0f} {:>8.0f} {:>8.0f} {:>9.0f} {:>9} {:>9.1f} {:>9.1f} {:>8} {:>8} "
                        "{:>10}{}\n",
                   r.role, r.processes, r.wall_s, r.user_s + r.system_s, r.cpu_avg_pct, r.cpu_peak_pct, r.rss_avg_mb,
                   r.rss_peak_mb, r.pss_peak_mb < 0 ? "-" : fmt::format("{:.0f}", r.pss_peak_mb), r.read_mb, r.write_mb,
                   net_mb(r, r.net_sent_mb), net_mb(r, r.net_recv_mb), r.voluntary_cs + r.involuntary_cs,
                   r.exact ? "" : " *");
    }
    print_wrapped(out, fmt::format("(read from /proc every {} ms and from the kernel as each process exited; CPU % of one CPU, "
                                   "peaks over 1 s or more; memory in MB: RSS counts pages shared between processes "
                                   "once in each, PSS splits them; read/write: storage I/O the processes caused; net "
                                   "out/in: MB its internet sockets sent and received (payload, from the kernel's socket "
                                   "tracepoints){}; the job's peaks are of the processes' sum{})",
                                   interval_ms, net ? "" : ", - where not counted: with --net, on kernels 6.3+",
                                   running ? "; *: still running at the end, its totals up to its last reading" : ""));
    // CPU throttling, where the cgroup's cpu.stat was read and a quota throttled it
    bool throttled = false;
    for (const auto& r : rows)
        throttled |= r.throttle_known && r.throttled_periods;
    if (!throttled)
        return;
    std::string list;
    for (const auto& r : rows)
        list += fmt::format("{}{} {}", list.empty() ? "" : "; ", r.role,
                            r.throttle_known ? fmt::format("{:.2f} s in {} of {} periods", r.throttled_s,
                                                           r.throttled_periods, r.periods)
                                             : std::string("not read"));
    print_wrapped(out, fmt::format("CPU throttled (its cgroup's cpu.stat while the role's processes lived: the kernel "
                                   "throttles every thread of a cgroup at once; the job: its cgroups' over the run): "
                                   "{}.",
                                   list));
}

nlohmann::ordered_json usage_json_value(const std::vector<UsageRow>& rows, unsigned interval_ms)
{
    using J = nlohmann::ordered_json;
    J roles = J::array(), job = nullptr;
    for (const auto& r : rows) {
        J o = J::object();
        o["role"] = json_text(r.role);
        o["processes"] = r.processes;
        o["wall_s"] = json_fixed(r.wall_s, 3);
        o["user_s"] = json_fixed(r.user_s, 3);
        o["system_s"] = json_fixed(r.system_s, 3);
        o["cpu_avg_pct"] = json_fixed(r.cpu_avg_pct, 2);
        o["cpu_peak_pct"] = json_fixed(r.cpu_peak_pct, 2);
        o["rss_avg_mb"] = json_fixed(r.rss_avg_mb, 2);
        o["rss_peak_mb"] = json_fixed(r.rss_peak_mb, 2);
        o["pss_peak_mb"] = r.pss_peak_mb < 0 ? J(nullptr) : json_fixed(r.pss_peak_mb, 2);
        o["read_mb"] = json_fixed(r.read_mb, 3);
        o["write_mb"] = json_fixed(r.write_mb, 3);
        o["net_sent_mb"] = r.net_known ? json_fixed(r.net_sent_mb, 6) : J(nullptr);
        o["net_recv_mb"] = r.net_known ? json_fixed(r.net_recv_mb, 6) : J(nullptr);
        o["voluntary_cs"] = r.voluntary_cs;
        o["involuntary_cs"] = r.involuntary_cs;
        o["exact"] = r.exact;
        o["periods"] = r.throttle_known ? J(r.periods) : J(nullptr);
        o["throttled_periods"] = r.throttle_known ? J(r.throttled_periods) : J(nullptr);
        o["throttled_s"] = r.throttle_known ? json_fixed(r.throttled_s, 3) : J(nullptr);
        if (&r == &rows.back())
            job = std::move(o);
        else
            roles.push_back(std::move(o));
    }
    J out = J::object();
    out["interval_ms"] = interval_ms;
    out["roles"] = std::move(roles);
    out["job"] = std::move(job);
    out["network"] = !rows.empty() && rows.back().net_known;
    return out;
}

std::string usage_json(const std::vector<UsageRow>& rows, unsigned interval_ms)
{
    return json_dump(usage_json_value(rows, interval_ms));
}

void UsageCsv::add(const model::UsagePoint& p)
{
    if (points_.size() < kMaxPoints)
        points_.push_back(p);
    else
        dropped_++;
}

void UsageCsv::name(uint32_t pid, std::string label)
{
    folded_names_[pid] = std::move(label); // (kept with the points: the CSV's rows grow with the run anyway)
}

std::string UsageCsv::text(const std::map<uint32_t, model::ProcessInfo>& processes, uint64_t t0_ns) const
{
    std::string out = "time_s,interval_s,pid,process,cpu_user_pct,cpu_system_pct,rss_mb,pss_mb,read_bytes_per_s,"
                      "write_bytes_per_s,voluntary_cs_per_s,involuntary_cs_per_s,net_sent_bytes_per_s,net_recv_bytes_per_s\n";
    std::map<uint32_t, std::string> labels;
    for (const auto& p : points_) {
        auto [it, fresh] = labels.try_emplace(p.pid);
        if (fresh) { // a CSV field: quoted where it holds a comma or a quote
            auto folded = folded_names_.find(p.pid);
            std::string l = folded != folded_names_.end() ? folded->second : model::process_label(processes, p.pid);
            if (l.find_first_of(",\"") != std::string::npos) {
                std::string q = "\"";
                for (char c : l)
                    q += c == '"' ? std::string("\"\"") : std::string(1, c);
                l = q + "\"";
            }
            it->second = l;
        }
        auto rate = [](double bps) { return bps < 0 ? std::string() : fmt::format("{:.0f}", bps); };
        out += fmt::format("{:.3f},{:.3f},{},{},{:.1f},{:.1f},{:.2f},{},{:.0f},{:.0f},{:.1f},{:.1f},{},{}\n",
                           static_cast<double>(p.ts_ns > t0_ns ? p.ts_ns - t0_ns : 0) / 1e9, p.interval_s, p.pid,
                           it->second, p.user_pct, p.system_pct, p.rss_mb, p.pss_mb < 0 ? "" : fmt::format("{:.2f}", p.pss_mb),
                           p.read_bps, p.write_bps, p.voluntary_cs_ps, p.involuntary_cs_ps, rate(p.sent_bps),
                           rate(p.recv_bps));
    }
    return out;
}

} // namespace lotus::exporter
