#include "chrome_trace.h"

#include <fmt/format.h>

#include "common/json.h"

namespace lotus::exporter {

ChromeTraceWriter::ChromeTraceWriter(OutputFile& out, uint64_t t0_ns) : out_(out), t0_ns_(t0_ns)
{
    out_.write("{\"traceEvents\":[\n");
}

// Appends one event (an empty one: already appended, just flush when due).
void ChromeTraceWriter::event(const std::string& json)
{
    if (!json.empty()) {
        if (!first_)
            buf_ += ",\n";
        first_ = false;
        buf_ += json;
    }
    if (buf_.size() > (1 << 16)) {
        out_.write(buf_);
        buf_.clear();
    }
}

static double us(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

void ChromeTraceWriter::span(const model::Span& s)
{
    threads_.emplace(s.pid, s.tid);
    uint64_t start = s.start_ns > t0_ns_ ? s.start_ns - t0_ns_ : 0;
    uint64_t dur = s.end_ns > s.start_ns ? s.end_ns - s.start_ns : 0;
    // Built in place (this is the export's inner loop): keys known here are plain ASCII, written as they are.
    std::string args;
    args.reserve(256);
    auto out = std::back_inserter(args);
    auto key = [&](std::string_view k) {
        if (!args.empty())
            args += ',';
        args += '"';
        args.append(k);
        args += "\":";
    };
    if (s.sample >= 0)
        key("sample"), fmt::format_to(out, "{}", s.sample);
    if (s.sample_id)
        key("sample_id"), fmt::format_to(out, "{}", s.sample_id);
    for (const auto& [k, v] : s.args) {
        if (!args.empty())
            args += ',';
        args += json_string(k);
        args += ':';
        args += v;
    }
    if (s.has_counters) {
        key("cpu_ms"), fmt::format_to(out, "{:.4f}", static_cast<double>(s.counters.cpu_ns) / 1e6);
        key("minor_faults"), fmt::format_to(out, "{}", s.counters.minor_faults);
        key("major_faults"), fmt::format_to(out, "{}", s.counters.major_faults);
        key("voluntary_cs"), fmt::format_to(out, "{}", s.counters.voluntary_cs);
        key("involuntary_cs"), fmt::format_to(out, "{}", s.counters.involuntary_cs);
        for (size_t k = 0; k < counter_names_.size() && k < model::kMaxPerfCounters; k++) {
            if (!args.empty())
                args += ',';
            args += json_string(counter_names_[k]);
            fmt::format_to(out, ":{}", s.counters.perf[k]);
        }
    }
    const char* cat = model::category(s.kind);
    if (s.kind == model::SpanKind::Consumed) {
        event(fmt::format("{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"{}\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{:.3f},"
                          "\"args\":{{{}}}}}",
                          cat, json_string(s.name), s.pid, s.tid, us(start), args));
        return;
    }
    if (!first_)
        buf_ += ",\n";
    first_ = false;
    fmt::format_to(std::back_inserter(buf_),
                   "{{\"ph\":\"X\",\"cat\":\"{}\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},"
                   "\"args\":{{{}}}}}",
                   cat, json_string(s.name), s.pid, s.tid, us(start), us(dur), args);
    event("");
    // Counter tracks: each op's counter deltas, as a step at its start on a per-process track.
    if (s.kind == model::SpanKind::Op && s.has_counters && !counter_names_.empty()) {
        std::string values;
        for (size_t k = 0; k < counter_names_.size() && k < model::kMaxPerfCounters; k++)
            values += fmt::format("{}{}:{}", values.empty() ? "" : ",", json_string(counter_names_[k]), s.counters.perf[k]);
        event(fmt::format("{{\"ph\":\"C\",\"name\":\"op counters\",\"pid\":{},\"ts\":{:.3f},\"args\":{{{}}}}}", s.pid,
                          us(start), values));
    }
    // Flow arrows: from the end of the worker's batch span to the end of the wait that consumed it, placed
    // 1 ns inside each span so that viewers bind them to it.
    uint64_t inside_end = start + dur - (dur > 0 ? 1 : 0);
    if (s.flow_out)
        event(fmt::format("{{\"ph\":\"s\",\"cat\":\"flow\",\"name\":\"batch\",\"id\":{},\"pid\":{},\"tid\":{},\"ts\":{:.3f}}}",
                          s.flow_out, s.pid, s.tid, us(inside_end)));
    if (s.flow_in)
        event(fmt::format("{{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"flow\",\"name\":\"batch\",\"id\":{},\"pid\":{},\"tid\":{},"
                          "\"ts\":{:.3f}}}",
                          s.flow_in, s.pid, s.tid, us(inside_end)));
}

void ChromeTraceWriter::finish(const std::map<uint32_t, model::ProcessInfo>& processes,
                               const std::map<std::string, std::string>& other_data)
{
    for (const auto& [pid, p] : processes) {
        event(fmt::format("{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":{}}}}}",
                          pid, json_string(p.label())));
        int sort = p.root ? -1 : (p.worker_id >= 0 ? p.worker_id : 1000);
        event(fmt::format(
            "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}}}",
            pid, sort));
    }
    for (const auto& [pid, tid] : threads_)
        event(fmt::format("{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":{}}}}}",
                          pid, tid, json_string(pid == tid ? "main thread" : fmt::format("thread {}", tid))));
    buf_ += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{";
    bool first = true;
    for (const auto& [k, v] : other_data) {
        buf_ += fmt::format("{}{}:{}", first ? "" : ",", json_string(k), v);
        first = false;
    }
    buf_ += "}}\n";
    out_.write(buf_);
    buf_.clear();
}

} // namespace lotus::exporter
