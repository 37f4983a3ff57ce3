// The HTML report (--html): one self-contained file, no script and nothing fetched, charts as inline SVG
// written here: per-op duration box plots, the training loops' wait and delay histograms in the Lotus paper's
// buckets, samples/s and per-worker busy share over time, CPU and memory per process role over time and the
// resource table, the native map per op as bars, counters per op, and
// the verdict with its advice. A chart whose data the run does not have is replaced by a line saying why.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "export/run_info.h"
#include "export/summary.h"
#include "export/timeline.h"
#include "export/usage_summary.h"
#include "model/spans.h"

namespace lotus::exporter {

struct HtmlReportInput {
    const Summary& summary;
    const DataLoaderReport& batches;
    const std::map<uint32_t, model::ProcessInfo>& processes;
    const RunInfo& run;
    const Timeline& timeline;
    std::vector<std::string> notes; // what the printed summary notes at its end
    std::vector<UsageRow> usage = {}; // resource use per role and for the job (usage_rows); empty: not read
    unsigned usage_interval_ms = 0;
};

std::string html_report(const HtmlReportInput& in);

// Text for HTML content and attribute values: & < > " ' escaped, invalid UTF-8 replaced.
std::string html_escape(std::string_view s);

} // namespace lotus::exporter
