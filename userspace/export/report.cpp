// The report's model: every decision of what goes in, in which order and under which title.
#include "report.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

namespace lotus::exporter {

namespace {

std::string group_title(const GroupKey& k, const std::map<uint32_t, model::ProcessInfo>& processes)
{
    if (!k.owner)
        return "Outside any DataLoader that was seen";
    std::string who = model::process_label(processes, k.owner);
    if (k.loader < 0)
        return fmt::format("DataLoader ? of {} (its iterator was made before tracing began)", who);
    return fmt::format("DataLoader {} of {}", k.loader, who);
}

// One section per DataLoader of each training process: those whose samples were seen, in first-seen order, then
// those seen only through their batches.
std::vector<LoaderSection> loader_sections(const ReportInput& in)
{
    std::vector<LoaderSection> out;
    for (auto& [key, rows] : in.summary.groups())
        out.push_back({key, "", "", std::move(rows), std::nullopt});
    for (const auto& b : in.batches.loaders) {
        auto it = std::find_if(out.begin(), out.end(), [&](const LoaderSection& s) { return s.key == b.key; });
        if (it == out.end())
            it = out.insert(out.end(), LoaderSection{b.key, "", "", {}, std::nullopt});
        it->batches = b; // (the last of its key, as each rendering took it)
    }
    for (auto& s : out) {
        s.title = group_title(s.key, in.processes);
        s.owner_label = s.key.owner ? model::process_label(in.processes, s.key.owner) : "";
    }
    return out;
}

// The processes the report lists: training processes, DataLoader workers, and any that ran samples.
std::vector<ProcessEntry> process_entries(const std::map<uint32_t, model::ProcessInfo>& processes)
{
    std::vector<ProcessEntry> out;
    for (const auto& [pid, p] : processes) {
        bool worker = p.worker || p.worker_id >= 0;
        if (p.root || p.consumer || p.samples > 0 || worker)
            out.push_back({pid, &p, model::process_label(processes, pid), worker});
    }
    return out;
}

// One row per role: a DataLoader worker id stands for every process that played it (non-persistent workers are
// new processes each epoch); the training processes first, then their workers by DataLoader and id.
std::vector<RoleEntry> role_entries(const std::vector<ProcessEntry>& entries)
{
    std::map<std::tuple<uint32_t, int, int, int, std::string>, RoleEntry> rows;
    for (const auto& e : entries) {
        const auto& p = *e.info;
        uint32_t group = e.worker && p.owner ? p.owner : e.pid;
        auto& r = rows[{p.root ? 0 : group, e.worker ? 1 : 0, e.worker ? p.loader : -1,
                        p.worker_id < 0 ? 1 << 30 : p.worker_id, e.label}];
        r.label = e.label;
        r.loader = e.worker ? (p.loader >= 0 ? std::to_string(p.loader) : "?") : "-";
        r.pids += (r.pids.empty() ? "" : ",") + model::pid_list(p);
        r.processes += p.processes();
        r.samples += p.samples;
        r.batches += p.batches;
        r.busy_ns += p.busy_ns;
        r.seen_ns += p.seen_ns();
    }
    std::vector<RoleEntry> out;
    for (auto& [key, r] : rows)
        out.push_back(std::move(r));
    return out;
}

} // namespace

Report build_report(const ReportInput& in)
{
    Report r;
    r.run = in.run;
    r.processes = &in.processes;
    r.ops = in.summary.rows();
    r.loaders = loader_sections(in);
    r.loops = in.batches.loops;
    for (const auto& l : r.loops)
        r.loop_labels.push_back(model::process_label(in.processes, l.pid));
    if (in.summary.samples_per_s() > 0)
        r.throughput = Throughput{in.summary.samples(), in.summary.sample_seconds(), in.summary.samples_per_s()};
    r.entries = process_entries(in.processes);
    r.roles = role_entries(r.entries);
    r.usage = in.usage;
    r.usage_interval_ms = in.usage_interval_ms;
    r.counter_names = in.summary.counter_names();
    r.counters = in.summary.counter_rows();
    r.native_map = in.summary.native_map();
    r.notes = in.notes;
    return r;
}

} // namespace lotus::exporter
