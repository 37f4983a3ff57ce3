#include "outputs.h"

#include <unistd.h>

#include <fmt/format.h>

#include "common/printable.h"

namespace lotus::cli {

Outputs::Outputs(const Options& opts)
{
    exporter::set_disk_reserve(opts.disk_reserve_pct); // for every output of the run, the record file's too
    // No trace file wanted: the writer still runs (same code path) into a file that keeps nothing.
    trace_ = std::make_unique<exporter::OutputFile>(opts.output, exporter::OutputOptions{true, "-o"}, sink());
    if (!opts.summary_json.empty())
        summary_json_ = std::make_unique<exporter::OutputFile>(
            opts.summary_json, exporter::OutputOptions{true, "--summary-json"}, sink());
    if (!opts.resources_csv.empty())
        resources_csv_ = std::make_unique<exporter::OutputFile>(opts.resources_csv,
                                                                exporter::OutputOptions{true, "--resources-csv"}, sink());
    if (!opts.html.empty())
        html_ = std::make_unique<exporter::OutputFile>(opts.html, exporter::OutputOptions{false, "--html"}, sink());
    if (!opts.speedscope.empty())
        speedscope_ = std::make_unique<exporter::OutputFile>(opts.speedscope,
                                                             exporter::OutputOptions{false, "--speedscope"}, sink());
}

exporter::OutputFailure Outputs::sink()
{
    return [this](const std::string& line) {
        fmt::print(stderr, "{}lotus-bpf: {}\n", isatty(STDERR_FILENO) ? "\r\033[K" : "", common::printable(line));
        failures_.push_back(line);
    };
}

} // namespace lotus::cli
