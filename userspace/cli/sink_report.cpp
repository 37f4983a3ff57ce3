// The renderings of the end-of-run report (export/report.h) as sinks: the printed summary, the summary JSON and
// the HTML report. The report's figures themselves are gathered by ReportFigures (report_figures.h).
#include <cstdio>

#include "export/html_report.h"
#include "sink.h"

namespace lotus::cli {
namespace {

class PrintedSummary : public Sink {
public:
    void end_of_run(RunEnd& e) override
    {
        exporter::print_report(stdout, e.report);
        fflush(stdout);
    }
};

class SummaryJson : public Sink {
public:
    explicit SummaryJson(SinkFile file) : file_(std::move(file)) {}
    void end_of_run(RunEnd& e) override
    {
        e.run.output_failures = e.failures; // (the outputs written so far: the trace's, the record's)
        if (file_->cuts())
            exporter::take_output_cuts(e.run, *file_->cuts(), e.t0_ns);
        e.report.run = e.run;
        file_->write(exporter::report_json(e.report));
        file_->commit();
    }

private:
    SinkFile file_;
};

class HtmlReport : public Sink {
public:
    explicit HtmlReport(SinkFile file) : file_(std::move(file)) {}
    void end_of_run(RunEnd& e) override
    {
        e.report.run = e.run;
        file_->write(exporter::html_report(e.report, e.timeline));
        file_->commit();
    }

private:
    SinkFile file_;
};

} // namespace

std::unique_ptr<Sink> make_printed_summary() { return std::make_unique<PrintedSummary>(); }

std::unique_ptr<Sink> make_summary_json(SinkFile file, const Options&)
{
    return std::make_unique<SummaryJson>(std::move(file));
}

std::unique_ptr<Sink> make_html_report(SinkFile file, const Options&)
{
    return std::make_unique<HtmlReport>(std::move(file));
}

} // namespace lotus::cli
