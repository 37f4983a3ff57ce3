#include "chrome_trace.h"

#include <fmt/format.h>

#include "json.h"

namespace lotus::exporter {

ChromeTraceWriter::ChromeTraceWriter(OutputFile& out, uint64_t t0_ns) : out_(out), t0_ns_(t0_ns)
{
    out_.write("{\"traceEvents\":[\n");
}

void ChromeTraceWriter::event(const std::string& json)
{
    if (!first_)
        buf_ += ",\n";
    first_ = false;
    buf_ += json;
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
    const char* cat = s.kind == model::SpanKind::Sample ? "sample" : "op";
    std::string args = fmt::format("\"sample_id\":{}", s.sample_id);
    if (s.sample >= 0)
        args = fmt::format("\"sample\":{},{}", s.sample, args);
    event(fmt::format("{{\"ph\":\"X\",\"cat\":\"{}\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f},"
                      "\"args\":{{{}}}}}",
                      cat, json_string(s.name), s.pid, s.tid, us(start), us(dur), args));
}

void ChromeTraceWriter::finish(const std::map<uint32_t, model::ProcessInfo>& processes,
                               const std::map<std::string, std::string>& other_data)
{
    for (const auto& [pid, p] : processes) {
        event(fmt::format("{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":{}}}}}",
                          pid, json_string(fmt::format("{} (pid {})", p.label(), pid))));
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
