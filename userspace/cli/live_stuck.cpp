#include "live_stuck.h"

#include <cstring>
#include <fmt/format.h>

#include "common/printable.h"
#include "process_dump.h"

namespace lotus::cli {

namespace {

// The process's Python stack to name it by: its main thread's, else the first thread's with frames; and the
// native stack of that thread where it was read.
std::pair<std::string, std::string> stacks_of(uint32_t pid)
{
    auto d = dump_process(static_cast<int>(pid), true);
    if (!d.error.empty())
        return {fmt::format("    (its stack could not be read: {})\n", common::printable(d.error)), ""};
    const ThreadDump* pick = nullptr;
    for (const auto& t : d.threads)
        if (t.tid == pid || (!pick && t.python && !t.python->frames.empty()))
            pick = &t;
    std::string py, native;
    if (pick) {
        py = format_python_stack(*pick->python, "    ");
        for (const auto& f : pick->native)
            native += fmt::format("      {}\n", common::printable(f));
        if (pick->native.empty() && !pick->native_missing.empty())
            native = fmt::format("      not read ({})\n", pick->native_missing);
        if (!pick->syscall.empty())
            native = fmt::format("    native (in {}):\n", pick->syscall) + native;
        else if (!native.empty())
            native = "    native:\n" + native;
    } else if (!d.unmatched.empty()) { // 3.10: threads by their pthread id
        py = format_python_stack(d.unmatched.front(), "    ");
    }
    return {py, native};
}

} // namespace

void LiveStuck::check(uint64_t now, const model::Engine& engine, bool silent, bool clear_line, bool force)
{
    if (!force && now - last_ < kIntervalNs)
        return;
    last_ = now;
    std::vector<uint32_t> live;
    for (const auto& [pid, p] : engine.processes())
        if (!p.exited)
            live.push_back(pid);
    auto changes = watch_.check(now, live, [&](uint32_t pid) { return engine.open_work(pid); });
    auto at = [&](uint64_t ns) { return ns > t0_ ? static_cast<double>(ns - t0_) / 1e9 : 0.0; };
    for (const auto& c : changes) {
        std::string who = fmt::format("{} (PID {})", model::process_label(engine.processes(), c.pid), c.pid);
        model::RecordStuck r{};
        r.type = model::kRecordStuck;
        r.tgid = r.tid = c.pid;
        r.ts_ns = c.at_ns;
        r.since_ns = c.since_ns;
        r.threshold_ns = c.threshold_ns;
        r.sample = c.work.sample;
        r.batch = c.work.batch;
        r.resumed = !c.stuck;
        memcpy(r.op, c.work.op.data(), std::min(c.work.op.size(), sizeof(r.op) - 1));
        std::string text;
        if (c.stuck) {
            auto [py, native] = stacks_of(c.pid);
            std::string where;
            if (c.work.batch >= 0)
                where += fmt::format(", in batch {}", c.work.batch);
            if (c.work.sample >= 0)
                where += fmt::format(", sample {}", c.work.sample);
            if (!c.work.op.empty())
                where += fmt::format(", op {}", common::printable(c.work.op));
            text = fmt::format("lotus-bpf: {} stuck: no span ended for {:.1f} s, since {:.2f} s (threshold {:.1f} s: "
                               "{}){}; its Python stack, innermost first:\n{}{}",
                               who, static_cast<double>(c.at_ns - c.since_ns) / 1e9, at(c.since_ns),
                               static_cast<double>(c.threshold_ns) / 1e9, watch_.threshold_why(c.pid), where, py,
                               native);
            memcpy(r.stack, py.data(), std::min(py.size(), sizeof(r.stack) - 1));
        } else {
            text = fmt::format("lotus-bpf: {} resumed at {:.2f} s, after {:.1f} s without ending a span\n", who,
                               at(c.at_ns), static_cast<double>(c.at_ns - c.since_ns) / 1e9);
        }
        if (!silent)
            fmt::print(stderr, "{}{}", clear_line ? "\r\033[K" : "", text);
        feed_(&r, sizeof(r));
    }
}

} // namespace lotus::cli
