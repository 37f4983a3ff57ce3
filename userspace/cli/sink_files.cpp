// The files of spans and readings kept whole until the end: the resource readings' CSV and the speedscope file.
#include <fmt/format.h>

#include "export/speedscope.h"
#include "export/usage_summary.h"
#include "sink.h"

namespace lotus::cli {
namespace {

class UsageCsvSink : public Sink {
public:
    explicit UsageCsvSink(SinkFile file) : file_(std::move(file)) {}
    void usage(const model::UsagePoint& p) override { csv_.add(p); }
    void folded(const Fold& f) override { csv_.name(f.pid, model::process_label(f.processes, f.pid)); }
    void end_of_run(RunEnd& e) override
    {
        file_->write(csv_.text(e.processes, e.t0_ns));
        file_->commit();
    }

private:
    SinkFile file_;
    exporter::UsageCsv csv_;
};

class SpeedscopeSink : public Sink {
public:
    SpeedscopeSink(SinkFile file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}
    void span(const model::Span& s) override { writer_.add(s); }
    void folded(const Fold& f) override { writer_.folded(f.pid, f.into); }
    void end_of_run(RunEnd& e) override
    {
        if (uint64_t n = writer_.write(*file_, e.processes, e.run.tool, e.t0_ns))
            fmt::print(stderr, "lotus-bpf: {} span(s) left out of {} (the file's name says why)\n", n, path_);
        file_->commit();
    }

private:
    SinkFile file_;
    std::string path_;
    exporter::SpeedscopeWriter writer_;
};

} // namespace

std::unique_ptr<Sink> make_usage_csv(SinkFile file, const Options&)
{
    return std::make_unique<UsageCsvSink>(std::move(file));
}

std::unique_ptr<Sink> make_speedscope(SinkFile file, const Options& opts)
{
    return std::make_unique<SpeedscopeSink>(std::move(file), opts.speedscope);
}

} // namespace lotus::cli
