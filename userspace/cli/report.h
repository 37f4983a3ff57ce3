// What the live and the replayed session share: which spans go to the trace file, the end of a run (trace
// metadata, summary, --summary-json), the rule lists, and the replay of a record file (--replay, export,
// report).
#pragma once
#include <map>
#include <memory>
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

// Exit status when the run went through but one of its output files could not be written (sysexits' EX_IOERR).
constexpr int kExitOutputFailed = 74;

// The run's output files, opened before anything is attached (so a bad destination stops the run before it
// starts) and each failing on its own: a failure is told on stderr when it happens, once, and kept for the
// summary and the exit status while the other outputs go on.
class Outputs {
public:
    explicit Outputs(const Options& opts); // throws std::runtime_error: one line naming the destination
    exporter::OutputFile& trace() { return *trace_; }        // discards when no trace file is wanted
    exporter::OutputFile* summary_json() { return summary_json_.get(); }
    exporter::OutputFailure sink();
    const std::vector<std::string>& failures() const { return failures_; }

private:
    std::vector<std::string> failures_;
    std::unique_ptr<exporter::OutputFile> trace_, summary_json_;
};

// calls_inlined: the capture could not see calls CPython ran inline (3.11+ without --all-calls).
// Writes the trace's end and prints the summary (live and replayed runs alike); false when an output failed.
// run: what the session knows of the run; the rest (samples, process ends, output failures...) is added here.
bool report(const Options& opts, Outputs& outputs, exporter::ChromeTraceWriter& trace, exporter::Summary& summary,
            model::Engine& engine, const model::Rules& rules, exporter::RunInfo run, bool calls_inlined);
// --pipeline/--span plus those of --rules FILE.
std::pair<std::vector<std::string>, std::vector<std::string>> rule_lists(const Options& opts);
// Reconstructs opts.replay (a record file). Throws; leaves no half-written trace behind.
int replay(const Options& opts);

} // namespace lotus::cli
