// The summary JSON (--summary-json): the report (report.h) as JSON, through nlohmann-json; schema:
// schemas/summary.schema.json.
#include "report.h"

#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "export/json.h"
#include "export/slow_samples_report.h"

namespace lotus::exporter {

namespace {

using J = nlohmann::ordered_json;

double busy_pct(const model::ProcessInfo& p)
{
    return p.seen_ns() ? 100.0 * static_cast<double>(p.busy_ns) / static_cast<double>(p.seen_ns()) : 0;
}


// A process other exited processes of its role were folded into: how many it stands for, and the first of their pids.
void add_folded(nlohmann::ordered_json& o, const model::ProcessInfo& p)
{
    if (!p.folded)
        return;
    auto pids = nlohmann::ordered_json::array();
    for (uint32_t pid : p.folded_pids)
        pids.push_back(pid);
    o["processes"] = p.processes();
    o["folded_pids"] = std::move(pids);
}

J stats_json(const DurationStats& s)
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

J rows_json(const Rows& rows)
{
    J ops = J::object();
    for (const auto& r : rows)
        ops[common::valid_utf8(r.name)] = stats_json(r.stats);
    return ops;
}

// The waiting by cause: each cause's seconds, its share of the waiting, the waits it was the largest part of.
J causes_json(const std::vector<model::CauseTotal>& causes)
{
    uint64_t all = 0;
    for (const auto& c : causes)
        all += c.ns;
    J out = J::array();
    for (const auto& c : causes) {
        J o = J::object();
        o["cause"] = model::wait_cause_key(c.cause);
        o["op"] = c.op.empty() ? J(nullptr) : json_text(c.op);
        o["seconds"] = json_fixed(static_cast<double>(c.ns) / 1e9, 6);
        o["share"] = json_fixed(all ? static_cast<double>(c.ns) / static_cast<double>(all) : 0, 4);
        o["waits"] = c.waits;
        out.push_back(std::move(o));
    }
    return out;
}

J batches_json(const BatchSummary& x)
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
    o["joined_partial_pass"] = x.joined_partial;
    o["partial_pass_batches"] = x.partial_batches;
    o["wait_causes"] = causes_json(x.causes);
    return o;
}

// One wait with its causes (model/wait_causes.h).
J wait_json(const model::WaitRow& w)
{
    auto ms = [](uint64_t ns) { return json_fixed(static_cast<double>(ns) / 1e6, 3); };
    J o = J::object();
    o["owner"] = w.owner;
    o["loader"] = w.loader;
    o["batch"] = w.batch >= 0 ? J(w.batch) : J(nullptr);
    o["epoch"] = w.epoch >= 0 ? J(w.epoch) : J(nullptr);
    o["ms"] = ms(w.ns());
    o["worker"] = w.worker_id >= 0 ? J(w.worker_id) : J(nullptr);
    o["worker_pid"] = w.worker_pid ? J(w.worker_pid) : J(nullptr);
    o["prepare_ms"] = w.worker_pid ? ms(w.prepare_ns) : J(nullptr);
    o["later_ready"] = w.later_ready;
    o["slowest_sample"] = w.slowest_sample >= 0 ? J(w.slowest_sample) : J(nullptr);
    o["slowest_path"] = w.slowest_path.empty() ? J(nullptr) : json_text(w.slowest_path);
    o["slowest_op"] = w.slowest_part.empty() ? J(nullptr) : json_text(w.slowest_part);
    o["slowest_ms"] = w.slowest_ns ? ms(w.slowest_ns) : J(nullptr);
    J parts = J::array();
    for (const auto& p : w.parts) {
        J c = J::object();
        c["cause"] = model::wait_cause_key(p.cause);
        c["op"] = p.op.empty() ? J(nullptr) : json_text(p.op);
        c["ms"] = ms(p.ns);
        parts.push_back(std::move(c));
    }
    o["causes"] = std::move(parts);
    return o;
}

// A training loop's graded verdict: "not", "moderately", "highly"; null where it is not known.
// The workers model (worker_model.h): its inputs, today's figures and its curve.
J estimate_json(const WorkerModel& m)
{
    const auto& in = m.in;
    J o = J::object();
    o["workers"] = in.workers;
    o["cpus"] = json_fixed(in.cpus, 2);
    o["others_cpus"] = in.others_cpus >= 0 ? json_fixed(in.others_cpus, 3) : J(nullptr);
    o["usable_cpus"] = json_fixed(in.usable_cpus(), 3);
    o["samples"] = in.samples;
    o["passes"] = in.passes;
    o["seconds"] = json_fixed(in.seconds, 4);
    o["samples_per_s"] = json_fixed(m.measured_per_s, 3);
    o["first_batch_s"] = json_fixed(in.first_batch_s, 4);
    o["gaps_s"] = json_fixed(in.gaps_s, 4);
    o["worker_ms"] = json_fixed(in.worker_s * 1e3, 4);
    o["worker_cpu_ms"] = json_fixed(in.worker_cpu_s * 1e3, 4);
    o["worker_cpu_read"] = in.worker_cpu_read;
    o["on_cpu_share"] = json_fixed(in.on_cpu_share, 4);
    o["main_cpu_ms"] = json_fixed(in.main_cpu_s * 1e3, 4);
    o["main_cpu_read"] = in.main_cpu_read;
    o["loop_ms"] = json_fixed(in.loop_s * 1e3, 4);
    o["suggested_workers"] = m.suggested ? J(m.suggested) : J(nullptr);
    J curve = J::array();
    for (const auto& p : m.curve) {
        J q = J::object();
        q["workers"] = p.workers;
        q["samples_per_s"] = json_fixed(p.samples_per_s, 3);
        q["steady_samples_per_s"] = json_fixed(p.steady_per_s, 3);
        q["bound"] = bound_name(p.bound);
        curve.push_back(std::move(q));
    }
    o["curve"] = std::move(curve);
    return o;
}

J grade_json(const std::optional<InputBound>& g) { return g ? J(input_bound_key(*g)) : J(nullptr); }

} // namespace

std::string report_json(const Report& r)
{
    J procs = J::array();
    for (const auto& e : r.entries) {
        const auto& p = *e.info;
        J o = J::object();
        o["pid"] = e.pid;
        o["label"] = json_text(e.label);
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
    for (const auto& s : r.loaders) {
        J o = J::object();
        o["owner"] = s.key.owner;
        o["owner_label"] = json_text(s.owner_label);
        o["loader"] = s.key.loader;
        o["title"] = json_text(s.title);
        o["note"] = s.note.empty() ? J(nullptr) : json_text(s.note);
        o["ops"] = rows_json(s.rows);
        o["batches"] = s.batches ? batches_json(*s.batches) : J(nullptr);
        loaders.push_back(std::move(o));
    }
    J loops = J::array();
    for (size_t i = 0; i < r.loops.size(); i++) {
        const auto& l = r.loops[i];
        J o = J::object();
        o["pid"] = l.pid;
        o["label"] = json_text(r.loop_labels[i]);
        o["batches"] = l.batches;
        o["waiting_share"] = json_fixed(l.waiting_share, 4);
        o["input_bound_grade"] = grade_json(l.grade);
        o["verdict"] = json_text(l.verdict);
        o["advice"] = json_texts(l.advice);
        o["estimate"] = l.estimate ? estimate_json(*l.estimate) : J(nullptr); // the workers model, where made
        o["all"] = batches_json(l.all);
        loops.push_back(std::move(o));
    }
    // Every DataLoader together, and the training loop's share: where there is one training process (else null).
    J merged = nullptr;
    if (r.loops.size() == 1) {
        const auto& l = r.loops[0];
        merged = batches_json(l.all);
        merged["waiting_share"] = json_fixed(l.waiting_share, 4);
        merged["input_bound_grade"] = grade_json(l.grade);
        merged["verdict"] = json_text(l.verdict);
        merged["advice"] = json_texts(l.advice);
    }
    J throughput = nullptr;
    if (r.throughput) {
        throughput = J::object();
        throughput["samples"] = r.throughput->samples;
        throughput["seconds"] = json_fixed(r.throughput->seconds, 4);
        throughput["samples_per_s"] = json_fixed(r.throughput->samples_per_s, 3);
    }
    // The ranks side by side, and the straggler (null: none stands out, or fewer than two ranks).
    auto rank_json = [](const RankRow& k) {
        J o = J::object();
        o["label"] = json_text(k.label);
        o["rank"] = k.rank >= 0 ? J(k.rank) : J(nullptr);
        o["local_rank"] = k.local_rank >= 0 ? J(k.local_rank) : J(nullptr);
        o["node"] = k.node.empty() ? J(nullptr) : json_text(k.node);
        o["pid"] = k.pid;
        o["samples"] = k.samples;
        o["batches"] = k.batches;
        o["seconds"] = json_fixed(k.seconds, 4);
        o["samples_per_s"] = json_fixed(k.samples_per_s, 3);
        o["wait_share"] = json_fixed(k.wait_share, 4);
        o["batch_prepare_mean_ms"] = json_fixed(k.prepare_mean_ms, 4);
        o["input_bound"] = k.grade == InputBound::Highly; // (the one grade of earlier versions: 20 % or more)
        o["input_bound_grade"] = grade_json(k.grade);
        return o;
    };
    J ranks = J::array();
    for (const auto& k : r.ranks)
        ranks.push_back(rank_json(k));
    J straggler = nullptr;
    if (r.straggler) {
        straggler = rank_json(r.straggler->rank);
        straggler["others"] = json_fixed(r.straggler->others_wait_share, 4);
        straggler["text"] = json_text(r.straggler->text);
    }
    J doc = J::object();
    doc["run"] = run_json(r.run);
    doc["ops"] = rows_json(r.ops);
    doc["batches"] = std::move(merged);
    doc["loaders"] = std::move(loaders);
    doc["training"] = std::move(loops);
    doc["processes"] = std::move(procs);
    doc["counters"] = counters_json_value(r.counter_names, r.counters);
    doc["native_map"] = native_map_json_value(r.native_map);
    doc["resources"] = r.usage.empty() ? J(nullptr) : usage_json_value(r.usage, r.usage_interval_ms);
    doc["worker_memory"] = r.worker_memory ? worker_memory_json(*r.worker_memory) : J(nullptr);
    doc["throughput"] = std::move(throughput);
    doc["ranks"] = std::move(ranks);
    doc["straggler"] = std::move(straggler);
    J waits = J::object(); // the longest waits, with their causes
    waits["seen"] = r.waits_seen;
    waits["rows"] = J::array();
    for (const auto& w : r.waits)
        waits["rows"].push_back(wait_json(w));
    doc["waits"] = std::move(waits);
    // The graded verdict's ladder: the waiting share at or above which a training loop is moderately, highly
    // input-bound.
    J ladder = J::object();
    ladder["moderately"] = json_fixed(kModeratelyInputBound, 4);
    ladder["highly"] = json_fixed(kHighlyInputBound, 4);
    doc["input_bound_thresholds"] = std::move(ladder);
    doc["slow_samples"] = slow_samples_json(r.slow_samples);
    J stuck = J::array(); // the processes the live watch named stuck
    for (const auto& x : r.stuck) {
        J o = J::object();
        o["pid"] = x.pid;
        o["label"] = json_text(x.label);
        o["since_s"] = json_fixed(x.since_s, 3);
        o["said_s"] = json_fixed(x.said_s, 3);
        o["end_s"] = x.end_s >= 0 ? json_fixed(x.end_s, 3) : J(nullptr);
        o["threshold_s"] = json_fixed(x.threshold_s, 3);
        o["sample"] = x.sample >= 0 ? J(x.sample) : J(nullptr);
        o["batch"] = x.batch >= 0 ? J(x.batch) : J(nullptr);
        o["op"] = x.op.empty() ? J(nullptr) : json_text(x.op);
        o["stack"] = json_text(x.stack);
        stuck.push_back(std::move(o));
    }
    doc["stuck"] = std::move(stuck);
    return json_dump(doc) + "\n";
}

} // namespace lotus::exporter
