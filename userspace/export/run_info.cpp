#include "run_info.h"

#include <fmt/format.h>

#include <map>

#include "export/json.h"
#include "export/output_file.h"

namespace lotus::exporter {

void take_output_cuts(RunInfo& r, uint64_t t0_ns)
{
    r.outputs_cut.clear();
    for (const auto& c : output_cuts())
        r.outputs_cut.push_back({c.what, c.path, c.why, c.at_ns > t0_ns ? static_cast<double>(c.at_ns - t0_ns) / 1e9 : 0});
}

std::string run_json_members(const RunInfo& r)
{
    std::map<std::string, std::string> m; // key -> encoded value, written in key order
    m["tool"] = json_string(r.tool);
    m["target_pid"] = std::to_string(r.target_pid);
    m["t0_monotonic_ns"] = std::to_string(r.t0_monotonic_ns);
    m["python"] = json_string(r.python);
    m["interpreter"] = json_string(r.interpreter);
    m["layout"] = json_string(r.layout);
    if (!r.evaluator_probe.empty())
        m["evaluator_probe"] = json_string(r.evaluator_probe);
    if (!r.python_probes.empty())
        m["python_probes"] = json_string(r.python_probes);
    if (!r.python_probes_scope.empty())
        m["python_probes_scope"] = json_string(r.python_probes_scope);
    if (!r.syscall_programs.empty())
        m["syscall_programs"] = json_string(r.syscall_programs);
    if (r.holds)
        m["held_children"] = fmt::format(
            "{{\"count\":{},\"total_ms\":{:.3f},\"max_ms\":{:.3f},\"attach_ms\":{:.3f},\"deadline_ms\":{:.0f},"
            "\"released_at_deadline\":{},\"not_held\":{{\"shared_memory\":{},\"tracer_not_running\":{},"
            "\"guardian_not_running\":{},\"refused\":{}}},\"unseen\":{{\"count\":{},\"max_ms\":{:.3f},"
            "\"total_ms\":{:.3f}}},\"spawned_python\":{}}}",
            r.holds->children, r.holds->total_ms, r.holds->max_ms, r.holds->attach_ms, r.holds->deadline_ms,
            r.holds->released_at_deadline, r.holds->shared_memory, r.holds->tracer_not_running,
            r.holds->guardian_not_running, r.holds->refused, r.holds->unseen, r.holds->unseen_max_ms,
            r.holds->unseen_total_ms, r.holds->spawned_python);
    m["stop_reason"] = json_string(r.stop_reason);
    m["events"] = std::to_string(r.events);
    m["lost_events"] = std::to_string(r.lost_events);
    if (r.events_delivered)
        m["events_delivered"] = std::to_string(*r.events_delivered);
    m["tracer_peak_rss_kb"] = std::to_string(r.tracer_peak_rss_kb);
    m["tracer_cpu_ms"] = std::to_string(r.tracer_cpu_ms);
    m["samples"] = std::to_string(r.samples);
    if (r.cpus)
        m["cpus"] = std::to_string(r.cpus);
    m["incomplete_spans"] = std::to_string(r.incomplete_spans);
    if (!r.span_patterns.empty()) {
        std::string list;
        for (const auto& p : r.span_patterns)
            list += fmt::format("{}{{\"pattern\":{},\"calls\":{},\"complete\":{}}}", list.empty() ? "" : ",",
                                json_string(p.pattern), p.calls, p.complete);
        m["span_patterns"] = "[" + list + "]";
    }
    std::string ends;
    for (const auto& e : r.process_ends)
        ends += fmt::format("{}{{\"pid\":{},\"label\":{},\"how\":{},\"signal\":{},\"status\":{},\"at_s\":{:.3f}}}",
                            ends.empty() ? "" : ",", e.pid, json_string(e.label), json_string(e.how), e.signal,
                            e.status, e.at_s);
    m["process_ends"] = "[" + ends + "]";
    m["output_failures"] = json_strings(r.output_failures);
    std::string cuts;
    for (const auto& c : r.outputs_cut)
        cuts += fmt::format("{}{{\"output\":{},\"path\":{},\"at_s\":{:.3f},\"why\":{}}}", cuts.empty() ? "" : ",",
                            json_string(c.output), json_string(c.path), c.at_s, json_string(c.why));
    m["outputs_cut"] = "[" + cuts + "]";
    if (r.native) {
        m["native_functions_probed"] = std::to_string(r.native->functions_probed);
        m["native_attach_s"] = fmt::format("{:.3f}", r.native->attach_s);
        m["native_probe_links"] = std::to_string(r.native->probe_links);
        m["sampling_event"] = json_string(r.native->sampling_event);
        m["sampling_stack_frames"] = std::to_string(r.native->sampling_stack_frames);
        m["sampling_scope"] = json_string(r.native->sampling_scope);
        m["sampled_elsewhere"] = std::to_string(r.native->sampled_elsewhere);
        m["native_specs_unmatched"] = json_strings(r.native->specs_unmatched);
    }
    if (!r.bpf_failures.empty()) {
        std::string f;
        for (const auto& x : r.bpf_failures)
            f += fmt::format("{}{}:{}", f.empty() ? "" : ",", json_string(x.name), x.count);
        m["bpf_failures"] = "{" + f + "}";
    }
    if (r.native || !r.native_late.empty()) {
        std::string late;
        for (const auto& l : r.native_late)
            late += fmt::format("{}{{\"pid\":{},\"label\":{},\"library\":{},\"loaded_s\":{:.6f},"
                                "\"probed_after_ms\":{:.3f},\"during_work\":{}}}",
                                late.empty() ? "" : ",", l.pid, json_string(l.label), json_string(l.library),
                                l.loaded_s, l.probed_after_ms, l.during_work);
        m["native_probed_late"] = "[" + late + "]";
    }
    // Python processes no probe saw: [{"pid":..,"<name_key>":..,"interpreter":..}], only when there is one.
    auto unseen = [&](const char* key, const char* name_key, const auto& list, auto name) {
        std::string items;
        for (const auto& p : list)
            items += fmt::format("{}{{\"pid\":{},\"{}\":{},\"interpreter\":{}}}", items.empty() ? "" : ",", p.pid,
                                 name_key, json_string(name(p)), json_string(p.interpreter));
        if (!items.empty())
            m[key] = "[" + items + "]";
    };
    unseen("unprobed_interpreters", "label", r.other_interpreters, [](const auto& o) { return o.label; });
    unseen("untraced_python_processes", "comm", r.untraced_pythons, [](const auto& u) { return u.comm; });
    if (r.limits) {
        const auto& l = *r.limits;
        std::string o = fmt::format("\"cgroup\":{},\"cpus\":{},\"memory_bytes\":{},\"cpuset\":{},\"left_running\":{}",
                                    json_string(l.cgroup), l.cpus > 0 ? fmt::format("{:g}", l.cpus) : "null",
                                    l.memory_bytes ? std::to_string(l.memory_bytes) : "null",
                                    l.cpuset.empty() ? "null" : json_string(l.cpuset), l.left_running);
        if (l.have_cpu)
            o += fmt::format(",\"periods\":{},\"throttled_periods\":{},\"throttled_s\":{:.3f}", l.periods,
                             l.throttled_periods, static_cast<double>(l.throttled_ns) / 1e9);
        if (l.have_memory)
            o += fmt::format(",\"memory_peak_bytes\":{},\"memory_limit_hits\":{},\"oom_kills\":{}", l.memory_peak_bytes,
                             l.memory_limit_hits, l.oom_kills);
        for (auto [key, rates] : {std::pair{"device_read_bps", &l.read_bps}, std::pair{"device_write_bps", &l.write_bps}}) {
            std::string a;
            for (const auto& [dev, bps] : *rates)
                a += fmt::format("{}{{\"device\":{},\"bytes_per_s\":{}}}", a.empty() ? "" : ",", json_string(dev), bps);
            o += fmt::format(",\"{}\":[{}]", key, a);
        }
        if (l.have_io)
            o += fmt::format(",\"io_read_bytes\":{},\"io_write_bytes\":{}", l.io_read_bytes, l.io_write_bytes);
        m["limits"] = "{" + o + "}";
    }
    if (!r.native_map_json.empty())
        m["native_map"] = r.native_map_json;
    if (!r.counters_json.empty())
        m["counters"] = r.counters_json;
    std::string out;
    for (const auto& [k, v] : m)
        out += fmt::format("{}{}:{}", out.empty() ? "" : ",", json_string(k), v);
    return out;
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
    return note;
}

} // namespace lotus::exporter
