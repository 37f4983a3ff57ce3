#include "outputs.h"

#include <unistd.h>

#include <fmt/format.h>

#include "common/printable.h"

namespace lotus::cli {

// The factories of the table's sinks (sinks.def), each in its sink_NAME.cpp.
#define LOTUS_FILE_SINK(name, flag, gzip_by_name, help)                                                               \
    std::unique_ptr<Sink> make_##name(SinkFile file, const Options& opts);
#include "sinks.def"
#undef LOTUS_FILE_SINK

Outputs::Outputs(const Options& opts)
{
    // No trace file wanted: the writer still runs (same code path) into a file that keeps nothing.
    common::OutputOptions trace_how{true, "-o", 0666, opts.disk_reserve_pct, &cuts_};
    auto trace = std::make_unique<common::OutputFile>(opts.output, trace_how, sink());
    trace_file_ = trace.get();
    sinks_.push_back(make_trace(std::move(trace), opts));
    if (opts.print_summary)
        sinks_.push_back(make_printed_summary());
    // One line per output file: the option that names it, whether .gz compresses it, its sink.
    add(opts, opts.summary_json, "--summary-json", true, make_summary_json);
    add(opts, opts.resources_csv, "--resources-csv", true, make_usage_csv);
    add(opts, opts.speedscope, "--speedscope", false, make_speedscope);
    add(opts, opts.html, "--html", false, make_html_report);
    // The table's: each whose file was given.
#define LOTUS_FILE_SINK(name, flag, gzip_by_name, help)                                                               \
    if (auto it = opts.file_sinks.find(flag); it != opts.file_sinks.end())                                            \
        add(opts, it->second, flag, gzip_by_name, make_##name);
#include "sinks.def"
#undef LOTUS_FILE_SINK
}

void Outputs::add(const Options& opts, const std::string& path, const char* what, bool gzip_by_name, Make make)
{
    if (!path.empty())
        // Each file keeps the run's --disk-reserve (the record file too: session.cpp).
        sinks_.push_back(make(std::make_unique<common::OutputFile>(
                                  path, common::OutputOptions{gzip_by_name, what, 0666, opts.disk_reserve_pct, &cuts_}, sink()),
                              opts));
}

common::OutputFailure Outputs::sink()
{
    return [this](const std::string& line) {
        fmt::print(stderr, "{}lotus-bpf: {}\n", isatty(STDERR_FILENO) ? "\r\033[K" : "", common::printable(line));
        failures_.push_back(line);
    };
}

} // namespace lotus::cli
