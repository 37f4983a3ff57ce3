// The run's outputs (README, "Outputs"): which sinks a run has, chosen here once, and what becomes of their files.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/output_file.h"
#include "options.h"
#include "sink.h"

namespace lotus::cli {

// Exit status when the run went through but one of its output files could not be written (sysexits' EX_IOERR).
constexpr int kExitOutputFailed = 74;

// The run's sinks, their files opened before anything is attached (so a bad destination stops the run before it
// starts) and each failing on its own: a failure is told on stderr when it happens, once, and kept for the
// summary and the exit status while the other outputs go on.
class Outputs {
public:
    explicit Outputs(const Options& opts); // throws std::runtime_error: one line naming the destination
    Outputs(const Outputs&) = delete;
    Outputs& operator=(const Outputs&) = delete;
    // In the order they end: the trace first (the summary speaks of it), then the summary and the files.
    const std::vector<std::unique_ptr<Sink>>& sinks() const { return sinks_; }
    bool trace_failed() const { return trace_file_->failed(); }
    common::OutputFailure sink(); // an output's failure reporter (the record file's too)
    const std::vector<std::string>& failures() const { return failures_; }
    // The run's outputs cut at the reserve (the record file's too: it is given this list).
    common::OutputCuts& cuts() { return cuts_; }

private:
    using Make = std::unique_ptr<Sink> (*)(SinkFile, const Options&);
    // A sink of its own file at `path`, where one is named. what: the option, as messages name it.
    void add(const Options& opts, const std::string& path, const char* what, bool gzip_by_name, Make make);

    std::vector<std::string> failures_;
    common::OutputCuts cuts_;
    const common::OutputFile* trace_file_ = nullptr; // (its sink's)
    std::vector<std::unique_ptr<Sink>> sinks_;
};

} // namespace lotus::cli
