// The HTML report (--html), a rendering of the report (report.h): one self-contained file, no script and nothing
// fetched, charts as inline SVG written here: per-op duration box plots, the training loops' wait and delay
// histograms in the Lotus paper's buckets, samples/s and per-worker busy share over time, CPU and memory per
// process role over time and the resource table, the native map per op as bars, counters per op, and the verdict
// with its advice. A chart whose data the run does not have is replaced by a line saying why.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "export/report.h"
#include "export/timeline.h"
#include "export/usage_summary.h"
#include "model/spans.h"

namespace lotus::exporter {

std::string html_report(const Report& r, const Timeline& timeline);

// Text for HTML content and attribute values: & < > " ' escaped, invalid UTF-8 replaced.
std::string html_escape(std::string_view s);

} // namespace lotus::exporter
