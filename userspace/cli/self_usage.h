// The tracer's own resource use, for the trace's metadata and the benchmark.
#pragma once

#include <cstdint>
#include <optional>

#include "export/run_info.h"

namespace lotus::cli {

// The tracer's own peak resident memory (VmHWM) in kB, -1 if unknown.
long peak_rss_kb();
long cpu_ms(); // the tracer's own CPU time (user + system)

// A moment of the tracer's life: CLOCK_MONOTONIC, and its own CPU time so far (user + system, all its threads;
// -1: getrusage failed).
struct UsageMark {
    uint64_t wall_ns = 0;
    long long cpu_us = -1;
};
UsageMark usage_now();
// What the tracer spent between two marks; none where either CPU time is unknown or time ran backwards.
std::optional<exporter::RunInfo::AttachCost> usage_between(const UsageMark& from, const UsageMark& to);

} // namespace lotus::cli
