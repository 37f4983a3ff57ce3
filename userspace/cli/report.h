// What the live and the replayed session share: which spans go to the trace file, the end of a run (trace
// metadata, summary, --summary-json), the rule lists, and the replay of a record file (--replay, export,
// report).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "export/chrome_trace.h"
#include "export/output_file.h"
#include "export/summary.h"
#include "model/engine.h"
#include "session.h"

namespace lotus::cli {

// --coarse keeps batches, waits and their arrows; --window keeps spans that start inside it.
bool in_trace(const model::Span& s, const Options& opts, uint64_t t0);
// The tracer's own peak resident memory (VmHWM) in kB, -1 if unknown.
long peak_rss_kb();
long cpu_ms(); // the tracer's own CPU time (user + system)
// The trace file to write: /dev/null when none is wanted (the writer still runs, same code path).
std::string trace_path(const Options& opts);
// calls_inlined: the capture could not see calls CPython ran inline (3.11+ without --all-calls).
// Writes the trace's end and prints the summary (live and replayed runs alike).
void report(const Options& opts, exporter::OutputFile& out, exporter::ChromeTraceWriter& trace,
            exporter::Summary& summary, model::Engine& engine, const model::Rules& rules,
            std::map<std::string, std::string> other, uint64_t lost,
            bool calls_inlined);
// --pipeline/--span plus those of --rules FILE.
std::pair<std::vector<std::string>, std::vector<std::string>> rule_lists(const Options& opts);
// Reconstructs opts.replay (a record file). Throws; leaves no half-written trace behind.
int replay(const Options& opts);

} // namespace lotus::cli
