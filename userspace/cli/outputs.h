// The run's output files and what becomes of them (README, "Outputs").
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "export/output_file.h"
#include "session.h"

namespace lotus::cli {

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
    exporter::OutputFile* html() { return html_.get(); }
    exporter::OutputFile* speedscope() { return speedscope_.get(); }
    exporter::OutputFile* resources_csv() { return resources_csv_.get(); }
    exporter::OutputFailure sink();
    const std::vector<std::string>& failures() const { return failures_; }

private:
    std::vector<std::string> failures_;
    std::unique_ptr<exporter::OutputFile> trace_, summary_json_, html_, resources_csv_, speedscope_;
};

} // namespace lotus::cli
