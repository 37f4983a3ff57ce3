// Streams spans as Chrome Trace Event Format JSON (Perfetto UI, chrome://tracing). Schema:
// schemas/chrome-trace.schema.json; reading guide: docs/trace-format.md.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "model/spans.h"
#include "model/usage.h"
#include "common/output_file.h"
#include "run_info.h"

namespace lotus::exporter {

class ChromeTraceWriter {
public:
    // t0_ns: CLOCK_MONOTONIC time of the start of tracing; ts values are whole microseconds after it (each end
    // of a span rounded to the nearest µs, so that nesting and touching survive a viewer's float arithmetic).
    ChromeTraceWriter(common::OutputFile& out, uint64_t t0_ns);
    // Names of the perf-event counters in Span::counters.perf (--counters), in order.
    void set_counter_names(std::vector<std::string> names) { counter_names_ = std::move(names); }
    void span(const model::Span& s);
    // A process's resource use over one interval: counter tracks (CPU %, memory, storage I/O, context switches)
    // on its process, holding from the interval's start.
    void usage(const model::UsagePoint& p);
    uint64_t t0_ns() const { return t0_ns_; }
    // An exited process about to be folded into its role's row (Engine::FoldSink): its held events and its
    // process and thread metadata are written now, and what the writer kept of it goes.
    void process_folded(const std::map<uint32_t, model::ProcessInfo>& processes, uint32_t pid);
    // Writes how processes ended (instant events), process/thread metadata and otherData, closes the document.
    void finish(const std::map<uint32_t, model::ProcessInfo>& processes, const RunInfo& run);

private:
    void event(const std::string& json);
    // A thread's latest complete events that share one extent (ts, dur in whole µs): spans end before their
    // parents, so a parent with the child's very extent arrives after it; it is written first, as viewers
    // take file order for parents at equal ts and dur.
    struct SameExtent {
        uint64_t ts = 0, dur = 0;
        std::string events; // parent first, joined by ",\n"
    };
    void flush(SameExtent& held);
    void process_meta(const std::map<uint32_t, model::ProcessInfo>& processes, uint32_t pid);
    void thread_meta(const std::map<uint32_t, model::ProcessInfo>& processes, uint32_t pid, uint32_t tid);
    std::map<std::pair<uint32_t, uint32_t>, SameExtent> held_;
    common::OutputFile& out_;
    uint64_t t0_ns_;
    bool first_ = true;
    bool head_kept_ = true; // the document's opening reached the file before any cut
    std::set<std::pair<uint32_t, uint32_t>> threads_;
    std::set<uint32_t> counter_pids_; // processes with usage counters
    std::pair<uint32_t, uint32_t> last_thread_{0, 0};
    SameExtent* last_held_ = nullptr; // last_thread_'s
    std::string x_;                   // the span being written
    std::string buf_;
    std::string args_; // a span's args, reused
    std::vector<std::string> counter_names_;
};

} // namespace lotus::exporter
