#include "run_info.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "common/utf8.h"
#include "export/json.h"
#include "common/output_file.h"
#include "model/node_streams.h"

namespace lotus::exporter {

void take_output_cuts(RunInfo& r, const common::OutputCuts& cuts, uint64_t t0_ns)
{
    r.outputs_cut.clear();
    for (const auto& c : cuts.list())
        r.outputs_cut.push_back({c.what, c.path, c.why, c.at_ns > t0_ns ? static_cast<double>(c.at_ns - t0_ns) / 1e9 : 0});
}

namespace {

using J = nlohmann::ordered_json;

J holds_json(const RunInfo::Holds& h)
{
    J o = J::object(), not_held = J::object(), unseen = J::object();
    o["count"] = h.children;
    o["total_ms"] = json_fixed(h.total_ms, 3);
    o["max_ms"] = json_fixed(h.max_ms, 3);
    o["attach_ms"] = json_fixed(h.attach_ms, 3);
    o["deadline_ms"] = json_fixed(h.deadline_ms, 0);
    o["released_at_deadline"] = h.released_at_deadline;
    not_held["shared_memory"] = h.shared_memory;
    not_held["tracer_not_running"] = h.tracer_not_running;
    not_held["guardian_not_running"] = h.guardian_not_running;
    not_held["refused"] = h.refused;
    o["not_held"] = std::move(not_held);
    unseen["count"] = h.unseen;
    unseen["max_ms"] = json_fixed(h.unseen_max_ms, 3);
    unseen["total_ms"] = json_fixed(h.unseen_total_ms, 3);
    o["unseen"] = std::move(unseen);
    o["spawned_python"] = h.spawned_python;
    J cgroups = J::array();
    for (const auto& g : h.guardian_cgroups)
        cgroups.push_back(J{{"hierarchy", json_text(g.hierarchy)}, {"tracer", json_text(g.tracer)},
                            {"job", json_text(g.job)}, {"guardian", json_text(g.guardian)}, {"stuck", g.stuck},
                            {"why", json_text(g.why)}});
    o["guardian_cgroups"] = std::move(cgroups);
    return o;
}

J process_ends_json(const std::vector<RunInfo::ProcessEnd>& list)
{
    J ends = J::array();
    for (const auto& e : list) {
        J o = J::object();
        o["pid"] = e.pid;
        o["label"] = json_text(e.label);
        o["how"] = json_text(e.how);
        o["signal"] = e.signal;
        o["status"] = e.status;
        o["at_s"] = json_fixed(e.at_s, 3);
        ends.push_back(std::move(o));
    }
    return ends;
}

J outputs_cut_json(const std::vector<RunInfo::Cut>& list)
{
    J cuts = J::array();
    for (const auto& c : list) {
        J o = J::object();
        o["output"] = json_text(c.output);
        o["path"] = json_text(c.path);
        o["at_s"] = json_fixed(c.at_s, 3);
        o["why"] = json_text(c.why);
        cuts.push_back(std::move(o));
    }
    return cuts;
}

J native_late_json(const std::vector<RunInfo::NativeLate>& list)
{
    J late = J::array();
    for (const auto& l : list) {
        J o = J::object();
        o["pid"] = l.pid;
        o["label"] = json_text(l.label);
        o["library"] = json_text(l.library);
        o["loaded_s"] = json_fixed(l.loaded_s, 6);
        o["probed_after_ms"] = json_fixed(l.probed_after_ms, 3);
        o["during_work"] = l.during_work;
        late.push_back(std::move(o));
    }
    return late;
}

J calls_unprobed_json(const std::vector<RunInfo::CallsUnprobed>& list)
{
    J out = J::array();
    for (const auto& c : list) {
        J o = J::object();
        o["pid"] = c.pid;
        o["label"] = json_text(c.label);
        o["from_s"] = json_fixed(c.from_s, 6);
        o["until_s"] = c.until_s >= 0 ? json_fixed(c.until_s, 6) : J(nullptr);
        o["batches_unprobed"] = c.batches_unprobed;
        o["calls_cut"] = c.calls_cut;
        out.push_back(std::move(o));
    }
    return out;
}

J limits_json(const RunInfo::Limits& l)
{
    J o = J::object();
    o["cgroup"] = json_text(l.cgroup);
    o["cpus"] = l.cpus > 0 ? json_general(l.cpus) : J(nullptr);
    o["memory_bytes"] = l.memory_bytes ? J(l.memory_bytes) : J(nullptr);
    o["cpuset"] = l.cpuset.empty() ? J(nullptr) : json_text(l.cpuset);
    o["left_running"] = l.left_running;
    if (l.have_cpu) {
        o["periods"] = l.periods;
        o["throttled_periods"] = l.throttled_periods;
        o["throttled_s"] = json_fixed(static_cast<double>(l.throttled_ns) / 1e9, 3);
    }
    if (l.have_memory) {
        o["memory_peak_bytes"] = l.memory_peak_bytes;
        o["memory_limit_hits"] = l.memory_limit_hits;
        o["oom_kills"] = l.oom_kills;
    }
    for (auto [key, rates] : {std::pair{"device_read_bps", &l.read_bps}, std::pair{"device_write_bps", &l.write_bps}}) {
        J a = J::array();
        for (const auto& [dev, bps] : *rates) {
            J d = J::object();
            d["device"] = json_text(dev);
            d["bytes_per_s"] = bps;
            a.push_back(std::move(d));
        }
        o[key] = std::move(a);
    }
    if (l.have_io) {
        o["io_read_bytes"] = l.io_read_bytes;
        o["io_write_bytes"] = l.io_write_bytes;
    }
    return o;
}

} // namespace

nlohmann::ordered_json run_json(const RunInfo& r)
{
    std::map<std::string, J> m; // written in key order
    m["tool"] = json_text(r.tool);
    m["target_pid"] = r.target_pid;
    m["t0_monotonic_ns"] = r.t0_monotonic_ns;
    m["python"] = json_text(r.python);
    m["interpreter"] = json_text(r.interpreter);
    m["layout"] = json_text(r.layout);
    if (!r.evaluator_probe.empty())
        m["evaluator_probe"] = json_text(r.evaluator_probe);
    if (!r.python_probes.empty())
        m["python_probes"] = json_text(r.python_probes);
    if (!r.python_probes_scope.empty())
        m["python_probes_scope"] = json_text(r.python_probes_scope);
    if (!r.syscall_programs.empty())
        m["syscall_programs"] = json_text(r.syscall_programs);
    if (!r.kernel.empty()) {
        m["kernel"] = json_text(r.kernel);
        J lacks = J::array();
        for (const auto& l : r.kernel_lacks)
            lacks.push_back(json_text(l));
        m["kernel_lacks"] = std::move(lacks);
    }
    if (!r.trainer_calls.empty()) {
        m["trainer_calls"] = json_text(r.trainer_calls);
        m["trainer_calls_unavailable"] =
            r.trainer_calls_unavailable.empty() ? J(nullptr) : json_text(r.trainer_calls_unavailable);
    }
    if (!r.trainer_calls.empty() || !r.object_calls_unprobed.empty())
        m["object_calls_unprobed"] = calls_unprobed_json(r.object_calls_unprobed);
    if (r.holds)
        m["held_children"] = holds_json(*r.holds);
    m["stop_reason"] = json_text(r.stop_reason);
    if (!r.nodes.empty()) {
        J nodes = J::array();
        for (const auto& n : r.nodes) {
            J o = J::object();
            o["name"] = json_text(n.name);
            o["record"] = json_text(n.record);
            o["clock_offset_ms"] = json_fixed(n.clock_offset_ms, 3);
            o["ids_moved_by"] = static_cast<uint64_t>(n.ids_moved) * model::kNodeIdStride;
            nodes.push_back(std::move(o));
        }
        m["nodes"] = std::move(nodes);
    }
    m["events"] = r.events;
    m["lost_events"] = r.lost_events;
    if (r.events_delivered)
        m["events_delivered"] = *r.events_delivered;
    m["tracer_peak_rss_kb"] = r.tracer_peak_rss_kb;
    m["tracer_cpu_ms"] = r.tracer_cpu_ms;
    if (r.attach) {
        m["attach_wall_ms"] = json_fixed(r.attach->wall_ms, 3);
        m["attach_cpu_ms"] = json_fixed(r.attach->cpu_ms, 3);
    }
    m["samples"] = r.samples;
    if (r.cpus)
        m["cpus"] = r.cpus;
    m["incomplete_spans"] = r.incomplete_spans;
    if (!r.span_patterns.empty()) {
        J list = J::array();
        for (const auto& p : r.span_patterns) {
            J o = J::object();
            o["pattern"] = json_text(p.pattern);
            o["calls"] = p.calls;
            o["complete"] = p.complete;
            list.push_back(std::move(o));
        }
        m["span_patterns"] = std::move(list);
    }
    m["process_ends"] = process_ends_json(r.process_ends);
    m["output_failures"] = json_texts(r.output_failures);
    m["outputs_cut"] = outputs_cut_json(r.outputs_cut);
    if (r.native) {
        m["native_functions_probed"] = r.native->functions_probed;
        m["native_attach_s"] = json_fixed(r.native->attach_s, 3);
        m["native_probe_links"] = r.native->probe_links;
        m["sampling_event"] = json_text(r.native->sampling_event);
        m["sampling_stack_frames"] = r.native->sampling_stack_frames;
        m["sampling_unwind"] = json_text(r.native->sampling_unwind);
        if (r.native->sampling_unwind == "cfi") {
            m["sampling_unwound_samples"] = r.native->unwound_samples;
            m["sampling_unwound_callers"] = r.native->unwound_callers;
        }
        m["sampling_scope"] = json_text(r.native->sampling_scope);
        m["sampled_elsewhere"] = r.native->sampled_elsewhere;
        m["native_specs_unmatched"] = json_texts(r.native->specs_unmatched);
        m["native_functions_without_returns"] = json_texts(r.native->without_returns);
    }
    if (r.native || r.native_calls_unended)
        m["native_calls_unended"] = r.native_calls_unended;
    if (!r.bpf_failures.empty()) {
        J f = J::object();
        for (const auto& x : r.bpf_failures)
            f[common::valid_utf8(x.name)] = x.count;
        m["bpf_failures"] = std::move(f);
    }
    if (r.native || !r.native_late.empty())
        m["native_probed_late"] = native_late_json(r.native_late);
    // Python processes no probe saw: [{"pid":..,"<name_key>":..,"interpreter":..}], only when there is one.
    auto unseen = [&](const char* key, const char* name_key, const auto& list, auto name) {
        J items = J::array();
        for (const auto& p : list) {
            J o = J::object();
            o["pid"] = p.pid;
            o[name_key] = json_text(name(p));
            o["interpreter"] = json_text(p.interpreter);
            items.push_back(std::move(o));
        }
        if (!items.empty())
            m[key] = std::move(items);
    };
    unseen("unprobed_interpreters", "label", r.other_interpreters, [](const auto& o) { return o.label; });
    unseen("untraced_python_processes", "comm", r.untraced_pythons, [](const auto& u) { return u.comm; });
    if (r.limits)
        m["limits"] = limits_json(*r.limits);
    if (r.cgroup) {
        const auto& c = *r.cgroup;
        J o = J::object();
        o["path"] = json_text(c.path);
        o["version"] = json_text(c.version);
        o["cgroups"] = c.cgroups;
        o["cpu_quota_known"] = c.have_quota;
        o["cpu_quota_cpus"] = c.have_quota && c.quota_cpus > 0 ? json_general(c.quota_cpus) : J(nullptr);
        o["cpu_quota_us"] = c.have_quota && c.quota_us > 0 ? J(c.quota_us) : J(nullptr);
        o["cpu_period_us"] = c.have_quota && c.period_us ? J(c.period_us) : J(nullptr);
        o["cpuset"] = c.have_cpuset ? json_text(c.cpuset) : J(nullptr);
        o["cpuset_cpus"] = c.have_cpuset ? J(c.cpuset_cpus) : J(nullptr);
        o["memory_limit_known"] = c.have_memory;
        o["memory_limit_bytes"] = c.have_memory && c.memory_limit ? J(c.memory_limit) : J(nullptr);
        o["periods"] = c.have_throttle ? J(c.periods) : J(nullptr);
        o["throttled_periods"] = c.have_throttle ? J(c.throttled_periods) : J(nullptr);
        o["throttled_s"] = c.have_throttle ? json_fixed(c.throttled_s, 3) : J(nullptr);
        m["cgroup"] = std::move(o);
    }
    if (!r.containers.empty()) {
        J a = J::array();
        for (const auto& c : r.containers) {
            J o = J::object();
            o["op"] = json_text(c.op);
            J callees = J::array();
            for (const auto& n : c.callees)
                callees.push_back(json_text(n));
            o["callees"] = std::move(callees);
            o["calls_seen"] = c.calls_seen;
            o["pid"] = c.pid;
            o["in_pipeline"] = c.in_pipeline;
            o["flag"] = json_text("--pipeline " + c.op);
            a.push_back(std::move(o));
        }
        m["containers"] = std::move(a);
    }
    if (r.job_cpus > 0) {
        m["job_cpus"] = json_general(r.job_cpus);
        m["job_cpus_from"] = json_text(r.cpus_from);
    }
    // The summary's tables, encoded there (Summary::native_map_json(), counters_json()).
    for (auto [key, text] : {std::pair{"native_map", &r.native_map_json}, std::pair{"counters", &r.counters_json}})
        if (!text->empty())
            if (J v = J::parse(*text, nullptr, false); !v.is_discarded())
                m[key] = std::move(v);
    J out = J::object();
    for (auto& [k, v] : m)
        out[k] = std::move(v);
    return out;
}

std::string run_json_members(const RunInfo& r)
{
    std::string text = json_dump(run_json(r)); // "{...}"
    return text.substr(1, text.size() - 2);
}

std::string holds_note(const RunInfo::Holds& h)
{
    std::string note;
    uint64_t others = h.released_at_deadline + h.tracer_not_running + h.guardian_not_running + h.refused;
    if (others) {
        std::vector<std::string> why;
        if (h.released_at_deadline)
            why.push_back(fmt::format("{} continued at the hold's deadline ({:.0f} ms) while lotus-bpf was slow",
                                      h.released_at_deadline, h.deadline_ms));
        if (h.tracer_not_running)
            why.push_back(fmt::format("{} started while lotus-bpf was stopped or exiting", h.tracer_not_running));
        if (h.guardian_not_running)
            why.push_back(fmt::format("{} started while its guardian process was gone", h.guardian_not_running));
        if (h.refused)
            why.push_back(fmt::format("{} the kernel would not hold", h.refused));
        std::string list;
        for (size_t i = 0; i < why.size(); i++)
            list += (i ? "; " : "") + why[i];
        note = fmt::format("\n{} new process(es) of the job ran before their probes were in place ({}).", others, list);
    }
    if (h.shared_memory)
        note += fmt::format("{}{} child process(es) that share their parent's memory until they exec (vfork, "
                            "posix_spawn, Python's subprocess) were not held at their fork; {} of them exec'd the "
                            "traced interpreter and were held at that exec until their probes were in.",
                            note.empty() ? "\n" : " ", h.shared_memory, h.spawned_python);
    if (h.unseen)
        note += fmt::format(" Of these, {} ran Python before their probes were in: their calls in the first {:.1f} ms "
                            "at most (from the fork to the probes; {:.1f} ms in all) are not in the trace.",
                            h.unseen, h.unseen_max_ms, h.unseen_total_ms);
    if (!h.guardian_stuck.empty())
        note += fmt::format("\nHolds: {}.", h.guardian_stuck);
    return note;
}

} // namespace lotus::exporter
