// A live run's facts (exporter::RunInfo): what the capture did and could not do, for the summary and otherData.
#include "run_facts.h"

#include <fmt/format.h>

#include "capture/bpf_failures.h"
#include "capture/native_capture.h"
#include "capture/perf_events.h"
#include "live_session.h"
#include "self_usage.h"

namespace lotus::cli {

exporter::RunInfo::Holds holds_info(const capture::HoldStats& h, unsigned deadline_ms,
                                    const std::vector<capture::GuardianCgroup>& guardian_cgroups)
{
    exporter::RunInfo::Holds r{h.children, h.total_ns / 1e6, h.max_ns / 1e6, h.attach_ns / 1e6};
    r.deadline_ms = deadline_ms;
    r.shared_memory = h.unheld_by[LOTUS_UNHELD_SHARED_MM];
    r.tracer_not_running = h.unheld_by[LOTUS_UNHELD_TRACER];
    r.guardian_not_running = h.unheld_by[LOTUS_UNHELD_GUARDIAN];
    r.refused = h.unheld_by[LOTUS_UNHELD_SIGNAL] + h.unheld_by[LOTUS_UNHELD_MAP];
    r.released_at_deadline = h.deadline_released;
    r.unseen = h.unseen_children;
    r.unseen_max_ms = h.unseen_max_ns / 1e6;
    r.unseen_total_ms = h.unseen_total_ns / 1e6;
    r.spawned_python = h.spawned_python;
    for (const auto& g : guardian_cgroups)
        r.guardian_cgroups.push_back({g.hierarchy, g.tracer, g.job, g.guardian, g.why, g.stuck});
    r.guardian_stuck = capture::stuck_note(guardian_cgroups).value_or("");
    return r;
}

exporter::RunInfo::Limits limits_info(const launch::Limits& limits, const launch::JobCgroup& cgroup)
{
    auto st = cgroup.stats();
    exporter::RunInfo::Limits l;
    l.cpus = limits.cpus;
    l.memory_bytes = limits.memory_bytes;
    l.cpuset = limits.cpuset;
    for (const auto& r : limits.read_bps)
        l.read_bps.emplace_back(r.device, r.bytes_per_s);
    for (const auto& r : limits.write_bps)
        l.write_bps.emplace_back(r.device, r.bytes_per_s);
    l.have_io = st.have_io;
    l.io_read_bytes = st.io_read_bytes;
    l.io_write_bytes = st.io_write_bytes;
    l.cgroup = cgroup.version();
    l.have_cpu = st.have_cpu;
    l.have_memory = st.have_memory;
    l.periods = st.periods;
    l.throttled_periods = st.throttled_periods;
    l.throttled_ns = st.throttled_ns;
    l.memory_peak_bytes = st.memory_peak_bytes;
    l.memory_limit_hits = st.memory_limit_hits;
    l.oom_kills = st.oom_kills;
    l.left_running = cgroup.members().size();
    return l;
}

exporter::RunInfo Session::run_info()
{
    exporter::RunInfo run;
    run.tool = "lotus-bpf " LOTUS_VERSION;
    run.target_pid = static_cast<uint32_t>(root_);
    run.t0_monotonic_ns = t0_;
    run.python = interp_.version.str();
    run.interpreter = interp_.target_path;
    run.layout = interp_.layout_source;
    run.cpus = cpus_;
    run.resources_interval_ms = opts_.resources_interval_ms;
    if (cgroup_)
        run.limits = limits_info(opts_.limits, *cgroup_);
    run.evaluator_probe = evaluator_probe_;
    run.python_probes = python_probes_;
    run.python_probes_scope = python_scope_;
    if (probe_) {
        run.kernel = probe_->kernel().release;
        run.kernel_lacks = kernel_lacks_;
    }
    run.trainer_calls = model::trainer_calls_name(opts_.trainer_calls);
    run.trainer_calls_unavailable = trainer_calls_unavailable_;
    run.syscall_programs = syscall_programs_;
    run.holds = holds_;
    run.events = stats_.submitted;
    run.events_delivered = delivered_;
    run.lost_events = stats_.lost;
    for (const auto& f : capture::kBpfFailures)
        run.bpf_failures.push_back({std::string(f.name), stats_.failures[f.slot], std::string(f.meaning)});
    run.stop_reason = stop_reason_;
    run.tracer_peak_rss_kb = peak_rss_kb();
    run.tracer_cpu_ms = cpu_ms();
    run.attach = attach_cost_;
    if (native_) {
        exporter::RunInfo::Native n{native_->functions(), native_links_, native_->attach_seconds(),
                                    opts_.sample_freq ? capture::sampling_event().name : "none",
                                    opts_.sample_freq ? opts_.sample_stack : 0, probe_->sampling_scope(),
                                    stats_.sampled_elsewhere, {}};
        n.sampling_unwind = !opts_.sample_freq || opts_.sample_stack <= 1 ? "none" : sample_unwind_name(opts_.sample_unwind);
        n.unwound_samples = native_->unwound_samples();
        n.unwound_callers = native_->unwound_callers();
        n.without_returns = native_->without_returns();
        // A --native spec that selected nothing is said, not silently dropped.
        size_t first_user = native_specs_.size() - opts_.native.size();
        for (size_t i = first_user; i < native_specs_.size(); i++) {
            if (native_->matched()[i])
                continue;
            fmt::print(stderr, "lotus-bpf: --native '{}' matched no function in the libraries the traced "
                               "processes mapped\n", opts_.native[i - first_user]);
            n.specs_unmatched.push_back(opts_.native[i - first_user]);
        }
        run.native = std::move(n);
    }
    return run;
}

} // namespace lotus::cli
