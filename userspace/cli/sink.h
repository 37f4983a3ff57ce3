// A sink: one of the run's outputs, fed by Reconstruction (reconstruction.h) with what it has, in this order:
// begin, then spans, resource readings and processes folded into their role's row as they come, then the end of
// the run in two steps: end_of_stream (before the report is built: the trace, whose end the report speaks of) and
// end_of_run (the report, built once, for those that render it). Each method has a do-nothing default: a sink
// overrides those it uses. Which sinks a run has is chosen in one place, Outputs (outputs.cpp).
//
// Adding an output file: one new file and one line. The file, cli/sink_NAME.cpp (CMake takes every cli/sink_*.cpp),
// defines a Sink that writes its SinkFile (write, then commit once complete) and its factory
//     std::unique_ptr<Sink> make_NAME(SinkFile file, const Options& opts);
// The line, in sinks.def, names its option and help: LOTUS_FILE_SINK(NAME, "--FLAG", GZIP_BY_NAME, "HELP"). From
// it the one-step command, export and report take --FLAG FILE, and Outputs declares the factory, opens FILE and
// adds the sink. sink_waits_csv.cpp is one such (its commit: that file and that line).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/output_file.h"
#include "export/report.h"
#include "export/run_info.h"
#include "export/timeline.h"
#include "model/spans.h"
#include "model/usage.h"
#include "options.h"

namespace lotus::cli {

using Processes = std::map<uint32_t, model::ProcessInfo>;

struct RunStart {
    uint64_t t0_ns; // the run's start (CLOCK_MONOTONIC)
    const std::vector<std::string>& counter_names; // --counters' events, in slot order
};

// An exited process folded into its role's row (model::Engine's fold sink): its figures follow it.
struct Fold {
    uint32_t pid, into;
    const Processes& processes;
};

// The end of the run, once the report is built. run: the run's facts so far; a sink may bring them up to date
// (the summary JSON adds the failures of the outputs written so far) for the sinks after it.
struct RunEnd {
    exporter::RunInfo& run;
    exporter::Report& report;
    const exporter::Timeline& timeline;   // the HTML report's charts
    const Processes& processes;
    const std::vector<std::string>& failures; // the outputs that failed so far
    uint64_t t0_ns;
};

class Sink {
public:
    virtual ~Sink() = default;
    virtual void begin(const RunStart&) {}
    virtual void span(const model::Span&) {}
    virtual void usage(const model::UsagePoint&) {}
    virtual void folded(const Fold&) {}
    virtual void end_of_stream(const exporter::RunInfo&, const Processes&) {}
    virtual void end_of_run(RunEnd&) {}
};

using SinkFile = std::unique_ptr<common::OutputFile>;

// The sinks, each writing to the file Outputs opened for it (the printed summary: stdout).
std::unique_ptr<Sink> make_trace(SinkFile file, const Options& opts);   // sink_trace.cpp (--coarse, --window)
std::unique_ptr<Sink> make_printed_summary();                           // sink_report.cpp
std::unique_ptr<Sink> make_summary_json(SinkFile file, const Options& opts);
std::unique_ptr<Sink> make_html_report(SinkFile file, const Options& opts);
std::unique_ptr<Sink> make_usage_csv(SinkFile file, const Options& opts); // sink_files.cpp
std::unique_ptr<Sink> make_speedscope(SinkFile file, const Options& opts);
// The table's (sinks.def), each make_NAME in its sink_NAME.cpp, are declared where they are chosen (outputs.cpp):
// a new line there builds outputs.cpp and the command line again, not every file that includes this one.
std::string op_csv_text(const exporter::Rows& rows); // --op-csv's text, from the summary's rows (sink_op_csv.cpp)

} // namespace lotus::cli
