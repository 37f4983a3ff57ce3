// What a live run's RunInfo says of the capture: the holds of new children, the job's limits (Session::run_info
// assembles the rest, in run_facts.cpp).
#pragma once
#include <vector>

#include "capture/guardian_cgroup.h"
#include "capture/probe.h"
#include "export/summary.h"
#include "launch/cgroup.h"

namespace lotus::cli {

// What the probe's holds were, for otherData and the summary.
exporter::RunInfo::Holds holds_info(const capture::HoldStats& h, unsigned deadline_ms,
                                    const std::vector<capture::GuardianCgroup>& guardian_cgroups);

// --cpus/--memory/--cpuset as the summary reports them, with what the kernel counted in the job's cgroup.
exporter::RunInfo::Limits limits_info(const launch::Limits& limits, const launch::JobCgroup& cgroup);

} // namespace lotus::cli
