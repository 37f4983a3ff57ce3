// The end-of-run report's figures, gathered from every span, reading and fold as they come (the report is built
// from them at the end: exporter::build_report); a sink ahead of the outputs, always there.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "export/summary.h"
#include "export/timeline.h"
#include "export/worker_memory.h"
#include "sink.h"

namespace lotus::cli {

class ReportFigures : public Sink {
public:
    ReportFigures(uint64_t t0_ns, const std::vector<std::string>& counter_names) : timeline(t0_ns)
    {
        summary.set_counter_names(counter_names);
    }
    void span(const model::Span& s) override
    {
        summary.add(s); // the summary, the HTML report and the speedscope file cover everything
        worker_memory.add(s);
        timeline.add(s);
    }
    void usage(const model::UsagePoint& p) override
    {
        timeline.usage(p);
        summary.usage(p);
    }
    void folded(const Fold& f) override
    {
        summary.folded(f.pid, f.into);
        const auto& p = f.processes.at(f.pid);
        timeline.fold(f.pid, f.into, p.first_ns, p.last_ns);
        worker_memory.fold(f.pid, f.processes, model::process_label(f.processes, f.pid));
    }

    exporter::Summary summary;
    exporter::Timeline timeline;
    exporter::WorkerMemory worker_memory; // also fed the stream's records (Reconstruction::consume)
};

// The live session's own views (the live table, the metrics, the stuck watch): callbacks on each span and reading,
// not sinks of their own. They exist only live, are made by the session from what capture learnt (the metrics'
// registry and job identity), read by its loop while the run goes on (the table's screen, the metrics' updates,
// the stuck lines), need the engine's processes at each span, and have no end of the run to write.
class Observers : public Sink {
public:
    void span(const model::Span& s) override
    {
        for (const auto& f : spans)
            f(s);
    }
    void usage(const model::UsagePoint& p) override
    {
        for (const auto& f : readings)
            f(p);
    }

    std::vector<std::function<void(const model::Span&)>> spans;
    std::vector<std::function<void(const model::UsagePoint&)>> readings;
};

} // namespace lotus::cli
