#include "chrome_trace.h"

#include <fmt/format.h>

#include "export/json.h"

namespace lotus::exporter {

// Room kept for the document's closing (otherData) should the disk reserve cut the trace: a cut one's otherData
// leaves out the native map and counters tables (they are in the summary) and is a few kB.
constexpr uint64_t kTailBytes = 64 << 10;
constexpr const char* kHead = "{\"traceEvents\":[\n";

ChromeTraceWriter::ChromeTraceWriter(common::OutputFile& out, uint64_t t0_ns) : out_(out), t0_ns_(t0_ns)
{
    out_.allow_cut(kTailBytes);
    out_.write(kHead);
    out_.flush(); // in the file at once: a cut later keeps it (else the tail brings it)
    head_kept_ = !out_.cut();
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

// Times in the trace are whole microseconds: each end of a span rounded to the nearest µs (the same rounding for
// every time, so what nests or touches in ns still does), and dur the difference of the rounded ends. Viewers add
// ts and dur in floating point; with fractional µs, a span ending where the next begins could overlap it there.
static uint64_t us(uint64_t ns) { return (ns + 500) / 1000; }

// The export's inner loop writes numbers without format strings: integers as they are, durations in args as ms
// with 3 decimals and CPU time as milliseconds with 4, exactly as "{:.3f}" / "{:.4f}" print them.
void ChromeTraceWriter::usage(const model::UsagePoint& p)
{
    if (out_.cut())
        return;
    uint64_t start_ns = p.ts_ns - std::min<uint64_t>(p.ts_ns, static_cast<uint64_t>(p.interval_s * 1e9));
    if (start_ns < t0_ns_)
        start_ns = t0_ns_;
    uint64_t ts = us(start_ns - t0_ns_);
    counter_pids_.insert(p.pid);
    std::string pss = p.pss_mb < 0 ? "" : fmt::format(",\"pss\":{:.2f}", p.pss_mb);
    event(fmt::format("{{\"ph\":\"C\",\"name\":\"CPU %\",\"pid\":{0},\"ts\":{1},\"args\":{{\"user\":{2:.1f},"
                      "\"system\":{3:.1f}}}}},\n{{\"ph\":\"C\",\"name\":\"memory MB\",\"pid\":{0},\"ts\":{1},"
                      "\"args\":{{\"rss\":{4:.2f}{5}}}}},\n{{\"ph\":\"C\",\"name\":\"storage I/O MB/s\",\"pid\":{0},"
                      "\"ts\":{1},\"args\":{{\"read\":{6:.3f},\"write\":{7:.3f}}}}},\n{{\"ph\":\"C\",\"name\":"
                      "\"context switches/s\",\"pid\":{0},\"ts\":{1},\"args\":{{\"voluntary\":{8:.0f},"
                      "\"involuntary\":{9:.0f}}}}}",
                      p.pid, ts, p.user_pct, p.system_pct, p.rss_mb, pss, p.read_bps / 1e6, p.write_bps / 1e6,
                      p.voluntary_cs_ps, p.involuntary_cs_ps));
    if (p.sent_bps >= 0 && p.recv_bps >= 0)
        event(fmt::format("{{\"ph\":\"C\",\"name\":\"network MB/s\",\"pid\":{},\"ts\":{},\"args\":{{\"sent\":{:.3f},"
                          "\"received\":{:.3f}}}}}",
                          p.pid, ts, p.sent_bps / 1e6, p.recv_bps / 1e6));
}

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

// An event's place: ,"pid":P,"tid":T,"ts":TS
static void put_where(std::string& b, uint32_t pid, uint32_t tid, uint64_t ts)
{
    b += ",\"pid\":";
    put_uint(b, pid);
    b += ",\"tid\":";
    put_uint(b, tid);
    b += ",\"ts\":";
    put_uint(b, ts);
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

void ChromeTraceWriter::span(const model::Span& s)
{
    if (out_.cut()) // at the disk reserve: the trace keeps what it had
        return;
    if (!last_held_ || s.pid != last_thread_.first || s.tid != last_thread_.second) { // runs of one thread's spans
        last_thread_ = {s.pid, s.tid};                                                  // are common
        threads_.emplace(s.pid, s.tid);
        last_held_ = &held_[{s.pid, s.tid}]; // (a map's nodes stay where they are)
    }
    uint64_t start_ns = s.start_ns > t0_ns_ ? s.start_ns - t0_ns_ : 0;
    uint64_t end_ns = s.end_ns > s.start_ns ? start_ns + (s.end_ns - s.start_ns) : start_ns;
    uint64_t start = us(start_ns), dur = us(end_ns) - start;
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
        event(fmt::format("{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"{}\",\"name\":{},\"pid\":{},\"tid\":{},\"ts\":{},"
                          "\"args\":{{{}}}}}",
                          cat, json_string(s.name), s.pid, s.tid, start, args));
        return;
    }
    std::string& x = x_; // its buffer goes round with the held events': no allocation once they are large enough
    x.clear();
    x += "{\"ph\":\"X\",\"cat\":\"";
    x += cat;
    x += "\",\"name\":";
    append_json_string(x, s.name);
    put_where(x, s.pid, s.tid, start);
    x += ",\"dur\":";
    put_uint(x, dur);
    x += ",\"args\":{";
    x += args;
    x += "}}";
    // Counter tracks: each op's counter deltas, as a step at its start on a per-process track.
    if (s.kind == model::SpanKind::Op && s.has_counters && !counter_names_.empty()) {
        x += ",\n{\"ph\":\"C\",\"name\":\"op counters\",\"pid\":";
        put_uint(x, s.pid);
        x += ",\"ts\":";
        put_uint(x, start);
        x += ",\"args\":{";
        for (size_t k = 0; k < counter_names_.size() && k < model::kMaxPerfCounters; k++) {
            if (k)
                x += ',';
            append_json_string(x, counter_names_[k]);
            x += ':';
            put_uint(x, s.counters.perf[k]);
        }
        x += "}}";
    }
    // Flow arrows: from the end of the worker's batch span to the end of the wait that consumed it, placed
    // 1 µs inside each span (when it is that long) so that viewers bind them to it.
    uint64_t inside_end = start + dur - (dur > 0 ? 1 : 0);
    auto flow = [&](const char* head, uint64_t id) {
        x += head;
        put_uint(x, id);
        put_where(x, s.pid, s.tid, inside_end);
        x += '}';
    };
    if (s.flow_out)
        flow(",\n{\"ph\":\"s\",\"cat\":\"flow\",\"name\":\"batch\",\"id\":", s.flow_out);
    if (s.flow_in)
        flow(",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"flow\",\"name\":\"batch\",\"id\":", s.flow_in);
    SameExtent& held = *last_held_;
    if (!held.events.empty() && held.ts == start && held.dur == dur) {
        x += ",\n"; // its parent: before it
        x += held.events;
        held.events.swap(x);
        return;
    }
    flush(held);
    held.ts = start;
    held.dur = dur;
    held.events.swap(x);
}

void ChromeTraceWriter::flush(SameExtent& held)
{
    if (!held.events.empty())
        event(held.events);
    held.events.clear();
}

// Training processes first (by rank), then workers (by worker id), then the rest.
static int sort_index(const model::ProcessInfo& p)
{
    return p.root ? -1 : p.consumer ? (p.known_rank() >= 0 ? p.known_rank() : 100) : (p.worker_id >= 0 ? 1000 + p.worker_id : 10000);
}

void ChromeTraceWriter::process_meta(const std::map<uint32_t, model::ProcessInfo>& processes, uint32_t pid)
{
    event(fmt::format("{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{},\"tid\":0,\"args\":{{\"name\":{}}}}}",
                      pid, json_string(model::process_label(processes, pid))));
    event(fmt::format("{{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":{},\"tid\":0,\"args\":{{\"sort_index\":{}}}}}",
                      pid, sort_index(processes.at(pid))));
}

// A thread named by what it was seen doing: a DataLoader queue's feeder thread (it wrote batches or tasks to a
// queue's pipe), else by its id.
void ChromeTraceWriter::thread_meta(const std::map<uint32_t, model::ProcessInfo>& processes, uint32_t pid, uint32_t tid)
{
    auto p = processes.find(pid);
    bool feeder = p != processes.end() && p->second.feeder_threads.count(tid);
    std::string name = pid == tid ? "main thread" : feeder ? "queue feeder thread" : fmt::format("thread {}", tid);
    if (p != processes.end()) // its own name, where the kernel told it (ABI 5 and later)
        if (auto n = p->second.thread_names.find(tid); n != p->second.thread_names.end() && !n->second.empty())
            name += " (" + n->second + ")";
    event(fmt::format("{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":{}}}}}",
                      pid, tid, json_string(name)));
}

void ChromeTraceWriter::process_folded(const std::map<uint32_t, model::ProcessInfo>& processes, uint32_t pid)
{
    for (auto h = held_.lower_bound({pid, 0}); h != held_.end() && h->first.first == pid; h = held_.erase(h)) {
        if (!out_.cut())
            flush(h->second);
        if (last_held_ == &h->second)
            last_held_ = nullptr;
    }
    bool shown = counter_pids_.erase(pid) > 0;
    auto t = threads_.lower_bound({pid, 0});
    shown |= t != threads_.end() && t->first == pid;
    if (shown && !out_.cut())
        process_meta(processes, pid);
    for (; t != threads_.end() && t->first == pid; t = threads_.erase(t))
        if (!out_.cut())
            thread_meta(processes, pid, t->second);
}

void ChromeTraceWriter::finish(const std::map<uint32_t, model::ProcessInfo>& processes, const RunInfo& run)
{
    for (auto& [thread, held] : held_)
        flush(held);
    // Tracks only for processes with something on them (a span, or how they ended).
    std::set<uint32_t> shown;
    for (const auto& [pid, tid] : threads_)
        shown.insert(pid);
    shown.insert(counter_pids_.begin(), counter_pids_.end());
    for (const auto& [pid, p] : processes)
        if (!model::how_it_ended(p).empty()) {
            shown.insert(pid);
            threads_.emplace(pid, pid); // its end is marked on its main thread
        }
    for (const auto& [pid, p] : processes)
        if (shown.count(pid))
            process_meta(processes, pid);
    // How a process ended, where that was not a clean exit: the job's fate, at the moment it happened.
    for (const auto& [pid, p] : processes) {
        std::string how = model::how_it_ended(p);
        if (how.empty())
            continue;
        int sig = model::exit_signal(p);
        std::string args = sig ? fmt::format("\"signal\":{},\"core_dumped\":{}", sig, (p.exit_status & 0x80) != 0)
                               : fmt::format("\"status\":{}", model::exit_code(p));
        event(fmt::format("{{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"process\",\"name\":{},\"pid\":{},\"tid\":{},"
                          "\"ts\":{},\"args\":{{{}}}}}",
                          json_string(how), pid, pid, us(p.exit_ns > t0_ns_ ? p.exit_ns - t0_ns_ : 0), args));
    }
    for (const auto& [pid, tid] : threads_)
        thread_meta(processes, pid, tid);
    // Events are written whole and each after its comma: a cut leaves the array ready for its closing.
    out_.write(buf_);
    buf_.clear();
    out_.flush();
    RunInfo r = run;
    if (out_.cuts())
        take_output_cuts(r, *out_.cuts(), t0_ns_); // this one's too, where it was cut by the events above
    auto tail = [&] {
        return std::string(head_kept_ ? "" : kHead) + "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{" +
               run_json_members(r) + "}}\n";
    };
    // The native map and counters tables can outgrow the room kept for the tail: they are the summary's too.
    std::string closing = tail();
    if (out_.cut() || (closing.size() > kTailBytes && !out_.tail_fits(closing.size()))) {
        r.native_map_json.clear(), r.counters_json.clear();
        closing = tail();
    }
    out_.write_tail(closing);
}

} // namespace lotus::exporter
