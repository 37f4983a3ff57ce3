#include "chrome_trace.h"

#include <fmt/format.h>

#include "export/json.h"

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

// The export's inner loop writes numbers without format strings: integers as they are, nanoseconds as
// microseconds with 3 decimals and CPU time as milliseconds with 4, exactly as "{:.3f}" / "{:.4f}" print them.
static void put_uint(std::string& b, uint64_t v)
{
    fmt::format_int f(v);
    b.append(f.data(), f.size());
}

static void put_int(std::string& b, int64_t v)
{
    fmt::format_int f(v);
    b.append(f.data(), f.size());
}

static void put_fixed(std::string& b, uint64_t units, uint64_t per, int decimals)
{
    put_uint(b, units / per);
    b += '.';
    char frac[8];
    uint64_t r = units % per;
    for (int i = decimals - 1; i >= 0; i--, r /= 10)
        frac[i] = static_cast<char>('0' + r % 10);
    b.append(frac, static_cast<size_t>(decimals));
}

static void put_us(std::string& b, uint64_t ns) { put_fixed(b, ns, 1000, 3); }

void ChromeTraceWriter::span(const model::Span& s)
{
    if (s.pid != last_thread_.first || s.tid != last_thread_.second) { // runs of one thread's spans are common
        last_thread_ = {s.pid, s.tid};
        threads_.emplace(s.pid, s.tid);
    }
    uint64_t start = s.start_ns > t0_ns_ ? s.start_ns - t0_ns_ : 0;
    uint64_t dur = s.end_ns > s.start_ns ? s.end_ns - s.start_ns : 0;
    // Built in place (this is the export's inner loop): keys known here are plain ASCII, written as they are.
    std::string& args = args_;
    args.clear();
    auto key = [&](std::string_view k) {
        if (!args.empty())
            args += ',';
        args += '"';
        args.append(k);
        args += "\":";
    };
    if (s.sample >= 0)
        key("sample"), put_int(args, s.sample);
    if (s.sample_id)
        key("sample_id"), put_uint(args, s.sample_id);
    using K = model::SpanKind;
    if (s.loader >= 0 && (s.kind == K::Sample || s.kind == K::Op || s.kind == K::Loader))
        key("loader"), put_int(args, s.loader);
    if (!s.container.empty())
        key("container"), append_json_string(args, s.container);
    if (s.owner && s.owner != s.pid) // a worker's span: the training process its data is for
        key("trainer"), put_uint(args, s.owner);
    for (const auto& [k, v] : s.args) {
        if (!args.empty())
            args += ',';
        append_json_string(args, k);
        args += ':';
        std::visit(
            [&](const auto& x) {
                using T = std::decay_t<decltype(x)>;
                if constexpr (std::is_same_v<T, int64_t>)
                    put_int(args, x);
                else if constexpr (std::is_same_v<T, bool>)
                    args += x ? "true" : "false";
                else if constexpr (std::is_same_v<T, std::string>)
                    append_json_string(args, x);
                else // a duration, written in ms with 3 decimals (rounded)
                    put_fixed(args, (x.ns + 500) / 1000, 1000, 3);
            },
            v);
    }
    if (s.has_counters) {
        key("cpu_ms"), put_fixed(args, (s.counters.cpu_ns + 50) / 100, 10000, 4);
        key("minor_faults"), put_uint(args, s.counters.minor_faults);
        key("major_faults"), put_uint(args, s.counters.major_faults);
        key("voluntary_cs"), put_uint(args, s.counters.voluntary_cs);
        key("involuntary_cs"), put_uint(args, s.counters.involuntary_cs);
        for (size_t k = 0; k < counter_names_.size() && k < model::kMaxPerfCounters; k++) {
            if (!args.empty())
                args += ',';
            append_json_string(args, counter_names_[k]);
            args += ':';
            put_uint(args, s.counters.perf[k]);
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
    buf_ += "{\"ph\":\"X\",\"cat\":\"";
    buf_ += cat;
    buf_ += "\",\"name\":";
    append_json_string(buf_, s.name);
    buf_ += ",\"pid\":";
    put_uint(buf_, s.pid);
    buf_ += ",\"tid\":";
    put_uint(buf_, s.tid);
    buf_ += ",\"ts\":";
    put_us(buf_, start);
    buf_ += ",\"dur\":";
    put_us(buf_, dur);
    buf_ += ",\"args\":{";
    buf_ += args;
    buf_ += "}}";
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

void ChromeTraceWriter::finish(const std::map<uint32_t, model::ProcessInfo>& processes, const RunInfo& run)
{
    for (const auto& [pid, p] : processes) {
        event(fmt::format("{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":{}}}}}",
                          pid, json_string(model::process_label(processes, pid))));
        // training processes first (by rank), then workers (by worker id), then the rest
        int sort = p.root ? -1 : p.consumer ? (p.known_rank() >= 0 ? p.known_rank() : 100) : (p.worker_id >= 0 ? 1000 + p.worker_id : 10000);
        event(fmt::format(
            "{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}}}",
            pid, sort));
    }
    // How a process ended, where that was not a clean exit: the job's fate, at the moment it happened.
    for (const auto& [pid, p] : processes) {
        std::string how = model::how_it_ended(p);
        if (how.empty())
            continue;
        int sig = model::exit_signal(p);
        std::string args = sig ? fmt::format("\"signal\":{},\"core_dumped\":{}", sig, (p.exit_status & 0x80) != 0)
                               : fmt::format("\"status\":{}", model::exit_code(p));
        event(fmt::format("{{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"process\",\"name\":{},\"pid\":{},\"tid\":{},"
                          "\"ts\":{:.3f},\"args\":{{{}}}}}",
                          json_string(how), pid, pid, us(p.exit_ns > t0_ns_ ? p.exit_ns - t0_ns_ : 0), args));
    }
    for (const auto& [pid, tid] : threads_)
        event(fmt::format("{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":{}}}}}",
                          pid, tid, json_string(pid == tid ? "main thread" : fmt::format("thread {}", tid))));
    buf_ += "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{";
    buf_ += run_json_members(run);
    buf_ += "}}\n";
    out_.write(buf_);
    buf_.clear();
}

} // namespace lotus::exporter
