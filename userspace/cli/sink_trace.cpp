// The Chrome trace as a sink, and the --coarse/--window filter around it.
#include <optional>

#include "export/chrome_trace.h"
#include "sink.h"

namespace lotus::cli {
namespace {

class TraceSink : public Sink {
public:
    explicit TraceSink(SinkFile file) : file_(std::move(file)) {}
    void begin(const RunStart& s) override
    {
        writer_.emplace(*file_, s.t0_ns);
        writer_->set_counter_names(s.counter_names);
    }
    void span(const model::Span& s) override { writer_->span(s); }
    void usage(const model::UsagePoint& p) override { writer_->usage(p); }
    void folded(const Fold& f) override { writer_->process_folded(f.processes, f.pid); }
    void end_of_stream(const exporter::RunInfo& run, const Processes& processes) override
    {
        writer_->finish(processes, run);
        file_->commit();
    }

private:
    SinkFile file_;
    std::optional<exporter::ChromeTraceWriter> writer_; // made at begin, when t0 is known
};

// --coarse keeps batches, waits and their arrows (no readings); --window keeps spans that start inside it, and
// readings taken inside it. The rest goes through whole.
class TraceWindow : public Sink {
public:
    TraceWindow(std::unique_ptr<Sink> inner, const Options& opts)
        : inner_(std::move(inner)), coarse_(opts.coarse), start_s_(opts.window_start_s), end_s_(opts.window_end_s)
    {
    }
    void begin(const RunStart& s) override
    {
        t0_ = s.t0_ns;
        inner_->begin(s);
    }
    void span(const model::Span& s) override
    {
        using K = model::SpanKind;
        if (coarse_ && s.kind != K::Batch && s.kind != K::Wait && s.kind != K::Consumed)
            return;
        if (in_window(s.start_ns))
            inner_->span(s);
    }
    void usage(const model::UsagePoint& p) override
    {
        if (!coarse_ && in_window(p.ts_ns))
            inner_->usage(p);
    }
    void folded(const Fold& f) override { inner_->folded(f); }
    void end_of_stream(const exporter::RunInfo& run, const Processes& p) override { inner_->end_of_stream(run, p); }
    void end_of_run(RunEnd& e) override { inner_->end_of_run(e); }

private:
    bool in_window(uint64_t ns) const
    {
        double at_s = ns > t0_ ? static_cast<double>(ns - t0_) / 1e9 : 0;
        return at_s >= start_s_ && (end_s_ <= 0 || at_s < end_s_);
    }
    std::unique_ptr<Sink> inner_;
    bool coarse_;
    double start_s_, end_s_;
    uint64_t t0_ = 0;
};

} // namespace

std::unique_ptr<Sink> make_trace(SinkFile file, const Options& opts)
{
    return std::make_unique<TraceWindow>(std::make_unique<TraceSink>(std::move(file)), opts);
}

} // namespace lotus::cli
