// The printed summary: the report (report.h) as text.
#include "report.h"

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "common/printable.h"
#include "common/quantile_sketch.h"
#include "export/slow_samples_report.h"

namespace lotus::exporter {

namespace {

// The names the target chose (ops, DataLoaders' datasets, processes, native functions and libraries), escaped
// where a table or title formats them (common/printable.h); print_report escapes the whole text again (its own
// line breaks kept), so that no control character of any name reaches the terminal.
using common::printable;

void print_rows(FILE* out, const Rows& r)
{
    fmt::print(out, "{:<28} {:>8} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>9} {:>12}\n", "op", "count", "mean ms",
               "p50 ms", "p95 ms", "p99 ms", "total ms", "on-CPU ms", "on-CPU %", "faults/call");
    bool measured = false;
    for (const auto& row : r) {
        const DurationStats& s = row.stats;
        std::string cpu = s.cpu_ms < 0 ? "-" : fmt::format("{:.3f}", s.cpu_ms);
        std::string pct = s.on_cpu_pct < 0 ? "-" : fmt::format("{:.0f}", s.on_cpu_pct);
        std::string flt = s.minor_faults < 0 ? "-" : fmt::format("{:.1f}", s.minor_faults);
        measured |= s.cpu_ms >= 0;
        fmt::print(out, "{:<28} {:>8} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>12.1f} {:>10} {:>9} {:>12}\n",
                   printable(row.label()), s.count, s.mean_ms, s.p50_ms, s.p95_ms, s.p99_ms, s.total_ms, cpu, pct, flt);
    }
    print_wrapped(out, fmt::format("(wall-clock time per call; p50/p95/p99 exact up to {} calls, within 1 % beyond; loader: from "
                    "the previous sample's end to its pipeline call, the dataset's work such as reading and decoding "
                    "the file; collate: the last sample's end to the batch's end{})",
               common::QuantileSketch::kExactLimit,
               measured ? "; on-CPU: the thread's time on a CPU during the call, low % = it waited for a CPU or for "
                          "I/O; faults/call: minor page faults"
                        : ""));
}

// The loop's waiting by cause (model/wait_causes.h): each cause's time, its share of the waiting, the waits it was
// the largest part of.
void print_causes(FILE* out, const BatchSummary& b)
{
    uint64_t all = 0;
    for (const auto& c : b.causes)
        all += c.ns;
    if (!all)
        return;
    std::string line;
    size_t small = 0;
    for (const auto& c : b.causes) {
        if (static_cast<double>(c.ns) < 0.005 * static_cast<double>(all)) {
            small++;
            continue;
        }
        line += fmt::format("{}{} {:.2f} s ({:.0f} %{})", line.empty() ? "" : ", ",
                            common::printable(model::wait_cause_text(c.cause, c.op)), static_cast<double>(c.ns) / 1e9,
                            100.0 * static_cast<double>(c.ns) / static_cast<double>(all),
                            c.waits ? fmt::format(", the most of {} wait(s)", c.waits) : "");
    }
    if (small)
        line += fmt::format(" and {} more under 0.5 % each", small);
    print_wrapped(out, "its waiting by cause: " + line + " (docs/wait-causes.md)");
}

void print_batches(FILE* out, const BatchSummary& b)
{
    if (b.prepare.count)
        print_wrapped(out, fmt::format("batches prepared by the workers: {}; time to prepare one, ms: mean {:.2f}, std {:.2f} "
                        "({:.0f} % of the mean), min {:.2f}, p25 {:.2f}, median {:.2f}, p75 {:.2f}, max {:.2f} "
                        "(interquartile range {:.2f}), total {:.1f}",
                   b.prepare.count, b.prepare.mean_ms, b.prepare.std_ms,
                   b.prepare.mean_ms > 0 ? 100 * b.prepare.std_ms / b.prepare.mean_ms : 0, b.prepare.min_ms,
                   b.prepare.p25_ms, b.prepare.p50_ms, b.prepare.p75_ms, b.prepare.max_ms,
                   b.prepare.p75_ms - b.prepare.p25_ms, b.prepare.total_ms));
    else
        fmt::print(out, "batches prepared by the workers: 0\n");
    if (!b.wait.count)
        return;
    // Arrival order and delay are known only for the batches whose hand-over was seen (the delay's count).
    std::string seen = b.delay.count < b.wait.count ? fmt::format(" (of the {} whose hand-over was seen)", b.delay.count)
                                                    : std::string();
    print_wrapped(out, fmt::format("batches consumed by the training loop: {}; its wait in next(), ms: mean {:.2f}, p50 {:.2f}, p99 "
                    "{:.2f}; waits of at most 1 ms {:.0f} %, 1-500 ms {:.0f} %, over 500 ms {:.0f} % (the Lotus "
                    "paper's buckets){}",
               b.wait.count, b.wait.mean_ms, b.wait.p50_ms, b.wait.p99_ms, share(b.wait_le_1ms, b.wait.count),
               share(b.wait_1_500ms, b.wait.count), share(b.wait_gt_500ms, b.wait.count),
               b.delay.count ? fmt::format("; arrived out of order {:.0f} %{}", share(b.out_of_order, b.delay.count), seen)
                             : std::string()));
    print_causes(out, b);
    if (b.delay.count)
        print_wrapped(out, fmt::format("from a batch ready to its use, ms: mean {:.2f}, p50 {:.2f}, p99 {:.2f}; over 500 ms {:.0f} %{}",
                   b.delay.mean_ms, b.delay.p50_ms, b.delay.p99_ms, share(b.delay_gt_500ms, b.delay.count), seen));
    if (b.unnamed)
        print_wrapped(out, fmt::format("{} batch(es) consumed before their index could be known (tracing began mid-epoch): their waits "
                        "carry no batch id and no arrow.",
                   b.unnamed));
    if (b.unmatched)
        print_wrapped(out, fmt::format("{} consumed batch(es) have no batch span to point to (prepared before tracing began, or by a "
                        "worker whose epoch is unknown): no arrow, no delay.",
                   b.unmatched));
    if (b.arrival_order)
        print_wrapped(out, fmt::format("next() returned batches as they arrived (DataLoader(in_order=False)), handed over by a "
                        "pin-memory thread: seen when one returned before the batch next in index order had reached it, "
                        "or when a task went to a worker out of turn; from then on each wait is named in arrival "
                        "order.{}{}",
                   b.misnamed ? fmt::format(" {} wait(s) of that pass before then carry another batch's id, delay and "
                                            "arrow.", b.misnamed)
                              : "",
                   b.passes_before ? fmt::format(" Its {} earlier pass(es) were named in index order: their waits may "
                                                 "carry other batches' ids.", b.passes_before)
                                   : ""));
}

void print_counters(FILE* out, const std::vector<std::string>& names, const std::vector<CounterRow>& rows)
{
    if (rows.empty())
        return;
    std::string head = fmt::format("\n{:<28} {:>8}", "counters per call (mean)", "count");
    for (const auto& n : names)
        head += fmt::format(" {:>16}", clock_counter(n) ? n + " ms" : n);
    head += fmt::format(" {:>6} {:>8}", "IPC", "on-CPU %");
    fmt::print(out, "{}\n", head);
    for (const auto& r : rows) {
        std::string line = fmt::format("{:<28} {:>8}", printable(r.label()), r.count);
        for (size_t k = 0; k < r.mean.size(); k++)
            line += clock_counter(names[k]) ? fmt::format(" {:>16.3f}", r.mean[k] / 1e6)
                                                     : fmt::format(" {:>16.1f}", r.mean[k]);
        line += fmt::format(" {:>6} {:>8}", r.ipc < 0 ? "-" : fmt::format("{:.2f}", r.ipc),
                            r.on_cpu_pct < 0 ? "-" : fmt::format("{:.0f}", r.on_cpu_pct));
        fmt::print(out, "{}\n", line);
    }
    print_wrapped(out, "(counts are per call of the op; IPC: instructions per cycle, where the PMU counts both; "
                       "on-CPU %: the thread's time on a CPU over the call's wall time)");
}

void print_native_map(FILE* out, const std::vector<model::OpNativeMap>& map)
{
    if (map.empty())
        return;
    fmt::print(out, "\n");
    print_wrapped(out, "native map: in which native functions each op's time went (share of the CPU samples taken "
                       "inside it; docs/native-map.md)");
    for (const auto& op : map) {
        double n = static_cast<double>(op.samples);
        fmt::print(out, "  {}: {} samples, {:.0f} % named, {:.0f} % in the kernel\n", printable(op.op), op.samples,
                   100.0 * static_cast<double>(op.named) / n, 100.0 * static_cast<double>(op.in_kernel) / n);
        size_t shown = 0;
        for (const auto& f : op.functions) {
            if (shown++ == 6)
                break;
            std::string function = printable(f.function);
            fmt::print(out, "    {:>5.1f} %  {:<56} {}\n", 100.0 * static_cast<double>(f.samples) / n,
                       function.size() > 56 ? function.substr(0, 53) + "..." : function, printable(f.library));
        }
    }
}

} // namespace

// The ranks side by side (two or more training loops), and the straggler where one stands out.
static void print_ranks(FILE* out, const Report& r)
{
    if (r.ranks.empty())
        return;
    auto num = [](int v) { return v >= 0 ? std::to_string(v) : std::string("-"); };
    fmt::print(out, "\n{:<28} {:>5} {:>6} {:<16} {:>8} {:>10} {:>7} {:>14}  {}\n", "training process", "rank", "local",
               "node", "samples", "samples/s", "wait %", "batch prep ms", "verdict");
    for (const auto& k : r.ranks)
        fmt::print(out, "{:<28} {:>5} {:>6} {:<16} {:>8} {:>10.1f} {:>7.1f} {:>14.2f}  {}\n", printable(k.label),
                   num(k.rank), num(k.local_rank), k.node.empty() ? "-" : printable(k.node), k.samples, k.samples_per_s, k.wait_share * 100,
                   k.prepare_mean_ms, !k.batches ? "no batch" : k.grade ? input_bound_text(*k.grade) : "not known");
    print_wrapped(out, fmt::format("(samples: its own and its workers'; samples/s and wait %: over its first next() to "
                                   "its last; batch prep: the mean time a batch took its workers; verdict: wait {:g} % "
                                   "or more highly input-bound, {:g}-{:g} % moderately, under {:g} % not)",
                                   kHighlyInputBound * 100, kModeratelyInputBound * 100, kHighlyInputBound * 100,
                                   kModeratelyInputBound * 100));
    if (r.straggler)
        print_wrapped(out, r.straggler->text);
    else
        print_wrapped(out, "No straggler: no rank's wait for data stands out from the others' (by 10 points and "
                           "twice their median).");
}

static void print_report_text(FILE* out, const Report& r)
{
    // One section per DataLoader of each training process (just the table where there is only one).
    if (r.loaders.empty())
        fmt::print(out, "No pipeline was seen: no Compose-like call ran in the traced processes.\n");
    bool titled = r.loaders.size() > 1;
    for (size_t i = 0; i < r.loaders.size(); i++) {
        const auto& s = r.loaders[i];
        if (titled || s.title.find(": ") != std::string::npos || !s.note.empty())
            fmt::print(out, "{}{}\n", i ? "\n" : "", printable(s.title));
        if (!s.note.empty())
            print_wrapped(out, s.note);
        if (!s.rows.empty())
            print_rows(out, s.rows);
        if (s.batches && (s.batches->prepare.count || s.batches->wait.count)) {
            fmt::print(out, "\n");
            print_batches(out, *s.batches);
        }
    }
    if (r.throughput)
        fmt::print(out, "\nsamples/s: {:.1f} ({} samples from the first one's start to the last one's end, {:.2f} s)\n",
                   r.throughput->samples_per_s, r.throughput->samples, r.throughput->seconds);
    if (!r.loops.empty())
        fmt::print(out, "\n");
    else if (!r.loaders.empty()) { // samples were seen, but no training loop's next()
        fmt::print(out, "\n");
        print_wrapped(out, "No training loop was seen taking a batch (its next() calls): whether the job is "
                           "input-bound is not known.", 0);
    }
    for (const auto& l : r.loops) {
        print_wrapped(out, l.verdict, 0);
        for (const auto& a : l.advice)
            print_wrapped(out, "  - " + a, 4);
    }
    print_ranks(out, r);
    print_slow_samples(out, r.slow_samples);
    // One row per role (the JSON keeps one entry per process, but for those folded into their role's row).
    fmt::print(out, "\n{:<20} {:>6} {:>10} {:>8} {:>8} {:>7} {:>7}  pids\n", "process", "loader", "processes", "samples",
               "batches", "busy %", "idle %");
    bool any_busy = false;
    for (const auto& role : r.roles) {
        std::string pids = role.pids.size() > 40 ? role.pids.substr(0, 37) + "..." : role.pids;
        if (!role.has_busy()) {
            fmt::print(out, "{:<20} {:>6} {:>10} {:>8} {:>8} {:>7} {:>7}  {}\n", printable(role.label), role.loader,
                       role.processes, role.samples, role.batches, "-", "-", pids);
            continue;
        }
        any_busy = true;
        double busy = 100.0 * static_cast<double>(role.busy_ns) / static_cast<double>(role.seen_ns);
        fmt::print(out, "{:<20} {:>6} {:>10} {:>8} {:>8} {:>7.1f} {:>7.1f}  {}\n", printable(role.label), role.loader,
                   role.processes, role.samples, role.batches, busy, 100.0 - busy, pids);
    }
    if (any_busy)
        print_wrapped(out, fmt::format("(busy %: time a worker spent preparing batches, from its first event to its last; a worker id "
                        "stands for every process that played it, one per epoch unless persistent_workers)"));
    print_usage(out, r.usage, r.usage_interval_ms);
    if (r.worker_memory)
        for (const auto& line : worker_memory_lines(*r.worker_memory))
            print_wrapped(out, line, line.rfind("  ", 0) == 0 ? 4 : 2);
    print_counters(out, r.counter_names, r.counters);
    print_native_map(out, r.native_map);
    for (const auto& n : r.notes)
        fmt::print(out, "{}\n", n);
    fmt::print(out, "How to read this summary: docs/trace-format.md (installed under /usr/share/doc/lotus-bpf).\n");
}

// The text composed whole, then written with every control character but its line breaks escaped: the notes,
// verdicts and advice quote names too.
void print_report(FILE* out, const Report& r)
{
    char* buf = nullptr;
    size_t len = 0;
    FILE* text = open_memstream(&buf, &len);
    if (!text)
        throw std::runtime_error("cannot compose the summary: out of memory");
    print_report_text(text, r);
    fclose(text);
    std::string safe = common::printable_lines(std::string_view(buf, len));
    free(buf);
    fwrite(safe.data(), 1, safe.size(), out);
}

} // namespace lotus::exporter
