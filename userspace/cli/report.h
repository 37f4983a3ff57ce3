// What the live and the replayed session share: which spans go to the trace file, the end of a run (trace
// metadata, summary, --summary-json) and the rule lists.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "export/chrome_trace.h"
#include "export/run_info.h"
#include "export/summary.h"
#include "model/engine.h"
#include "outputs.h"
#include "session.h"

namespace lotus::cli {

// --coarse keeps batches, waits and their arrows; --window keeps spans that start inside it.
bool in_trace(const model::Span& s, const Options& opts, uint64_t t0);

// calls_inlined: the capture could not see calls CPython ran inline (3.11+ without --all-calls).
// Writes the trace's end and prints the summary (live and replayed runs alike); false when an output failed.
// run: what the session knows of the run; the rest (samples, process ends, output failures...) is added here.
bool report(const Options& opts, Outputs& outputs, exporter::ChromeTraceWriter& trace, exporter::Summary& summary,
            model::Engine& engine, const model::Rules& rules, exporter::RunInfo run, bool calls_inlined);
// --pipeline/--span plus those of --rules FILE.
std::pair<std::vector<std::string>, std::vector<std::string>> rule_lists(const Options& opts);

} // namespace lotus::cli
