// The tracer's own resource use, for the trace's metadata and the benchmark.
#pragma once

namespace lotus::cli {

// The tracer's own peak resident memory (VmHWM) in kB, -1 if unknown.
long peak_rss_kb();
long cpu_ms(); // the tracer's own CPU time (user + system)

} // namespace lotus::cli
