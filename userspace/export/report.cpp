// The report's model: every decision of what goes in, in which order and under which title.
#include "report.h"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

namespace lotus::exporter {

namespace {

// "DataLoader 0 of main: ImageFolder /data/train" (what it loads, where that was read).
std::string group_title(const GroupKey& k, const std::map<uint32_t, model::ProcessInfo>& processes,
                        const model::BatchTracker* tracker)
{
    if (!k.owner)
        return "Outside any DataLoader that was seen";
    std::string who = model::process_label(processes, k.owner);
    if (k.loader < 0)
        return fmt::format("DataLoader ? of {} (its iterator was made before tracing began)", who);
    std::string what;
    if (tracker)
        if (auto n = tracker->loader_names().find({k.owner, k.loader}); n != tracker->loader_names().end())
            what = ": " + n->second.dataset_class + (n->second.root.empty() ? "" : " " + n->second.root);
    return fmt::format("DataLoader {} of {}{}", k.loader, who, what);
}

// What became of the pass in flight when tracing began, said in the section it concerns.
std::string group_note(const GroupKey& k, const std::optional<BatchSummary>& b, const model::BatchTracker* tracker)
{
    if (!tracker || !k.owner)
        return "";
    auto j = tracker->joins().find(k.owner);
    if (j == tracker->joins().end())
        return "";
    if (k.loader < 0 && j->second.loader < 0)
        return fmt::format("Not joined to a DataLoader: {}.", j->second.reason);
    if (k.loader >= 0 && k.loader == j->second.loader)
        return fmt::format("Includes the pass that was in flight when tracing began ({} of its batches consumed while "
                           "traced): its iterator held this DataLoader's dataset and sampler.",
                           b ? b->partial_batches : 0);
    return "";
}

// One section per DataLoader of each training process: those whose samples were seen, in first-seen order, then
// those seen only through their batches.
std::vector<LoaderSection> loader_sections(const ReportInput& in)
{
    std::vector<LoaderSection> out;
    for (auto& [key, rows] : in.summary.groups())
        out.push_back({key, "", "", "", std::move(rows), std::nullopt});
    for (const auto& b : in.batches.loaders) {
        auto it = std::find_if(out.begin(), out.end(), [&](const LoaderSection& s) { return s.key == b.key; });
        if (it == out.end())
            it = out.insert(out.end(), LoaderSection{b.key, "", "", "", {}, std::nullopt});
        it->batches = b; // (the last of its key, as each rendering took it)
    }
    for (auto& s : out) {
        s.title = group_title(s.key, in.processes, in.batch_tracker);
        s.note = group_note(s.key, s.batches, in.batch_tracker);
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

// Each training loop's row, where there are two or more: its samples are its own and its workers'.
std::vector<RankRow> rank_rows(const ReportInput& in)
{
    std::vector<RankRow> out;
    if (in.batches.loops.size() < 2)
        return out;
    for (const auto& l : in.batches.loops) {
        RankRow row;
        row.pid = l.pid;
        row.label = model::process_label(in.processes, l.pid);
        if (auto it = in.processes.find(l.pid); it != in.processes.end()) {
            const auto& p = it->second;
            row.rank = p.global_rank();
            row.local_rank = p.local_rank >= 0 ? p.local_rank : p.rank;
        }
        row.node = in.node_of ? in.node_of(l.pid) : "";
        for (const auto& [pid, p] : in.processes)
            if (pid == l.pid || p.owner == l.pid)
                row.samples += p.samples;
        row.batches = l.batches;
        row.seconds = l.seconds;
        row.samples_per_s = l.seconds > 0 ? static_cast<double>(row.samples) / l.seconds : 0;
        row.wait_share = l.waiting_share;
        row.prepare_mean_ms = l.all.prepare.mean_ms;
        row.grade = l.grade;
        out.push_back(std::move(row));
    }
    return out;
}

} // namespace

std::optional<Straggler> find_straggler(const std::vector<RankRow>& ranks)
{
    std::vector<const RankRow*> with_batches;
    for (const auto& r : ranks)
        if (r.batches)
            with_batches.push_back(&r);
    if (with_batches.size() < 2)
        return std::nullopt;
    std::sort(with_batches.begin(), with_batches.end(),
              [](const RankRow* a, const RankRow* b) { return a->wait_share > b->wait_share; });
    std::vector<double> others;
    for (size_t i = 1; i < with_batches.size(); i++)
        others.push_back(with_batches[i]->wait_share);
    double median = others.size() % 2 ? others[others.size() / 2]
                                      : (others[others.size() / 2 - 1] + others[others.size() / 2]) / 2;
    const RankRow& top = *with_batches[0];
    if (top.wait_share - median < 0.1 || top.wait_share < 2 * median)
        return std::nullopt;
    Straggler s{top, median, ""};
    std::string where = top.node.empty() || top.label.find(" on ") != std::string::npos ? "" : " on " + top.node;
    s.text = fmt::format(
        "Straggler: {}{} waited for data {:.0f} % of its time, the other ranks {:.0f} % (their median). At each "
        "collective (the gradients' all-reduce) every rank waits for it, so its input pipeline holds back the whole "
        "job: give its DataLoader more workers or CPUs, or look at what is slower in its data (its shard, its "
        "storage, its node's load); its ops and batches are in its DataLoader section.",
        top.label, where, top.wait_share * 100, median * 100);
    return s;
}

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
    r.ranks = rank_rows(in);
    r.straggler = find_straggler(r.ranks);
    if (in.summary.samples_per_s() > 0)
        r.throughput = Throughput{in.summary.samples(), in.summary.sample_seconds(), in.summary.samples_per_s()};
    r.entries = process_entries(in.processes);
    r.roles = role_entries(r.entries);
    r.usage = in.usage;
    r.usage_interval_ms = in.usage_interval_ms;
    r.counter_names = in.summary.counter_names();
    r.counters = in.summary.counter_rows();
    r.native_map = in.summary.native_map();
    r.slow_samples = in.summary.slow_samples().analyze();
    for (auto& g : r.slow_samples)
        g.title = group_title({g.owner, g.loader}, in.processes, in.batch_tracker);
    r.notes = in.notes;
    if (in.wait_causes) {
        r.waits = in.wait_causes->rows();
        r.waits_seen = in.wait_causes->waits();
    }
    return r;
}

} // namespace lotus::exporter
