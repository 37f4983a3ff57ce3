// --waits-csv FILE: the longest waits of the training loops, each with the batch it awaited and the causes its time
// splits into (the summary JSON's `waits.rows`, the same rows in the same order: longest first, 1,000 at most), one
// CSV row per wait. Nothing is computed here: the figures are the report's own (model/wait_causes.h).
#include <fmt/format.h>

#include "common/csv.h"
#include "common/utf8.h"
#include "model/wait_causes.h"
#include "sink.h"

namespace lotus::cli {
namespace {

std::string ms(uint64_t ns) { return fmt::format("{:.3f}", static_cast<double>(ns) / 1e6); }
// An unknown figure is an empty field (the JSON's null).
std::string known(int64_t v) { return v >= 0 ? std::to_string(v) : std::string(); }
std::string text(const std::string& s) { return common::csv_field(common::valid_utf8(s)); }

// A cause as `key` or `op:NAME` (the JSON's cause and op), with its ms: `late_start=12.000`.
std::string part(const model::CausePart& p)
{
    return fmt::format("{}{}={}", model::wait_cause_key(p.cause), p.op.empty() ? "" : ":" + p.op, ms(p.ns));
}

std::string waits_csv_text(const std::vector<model::WaitRow>& waits)
{
    std::string out = "owner,loader,batch,epoch,wait_ms,worker,worker_pid,prepare_ms,later_ready,slowest_sample,"
                      "slowest_path,slowest_op,slowest_ms,cause,cause_op,cause_ms,causes\n";
    for (const auto& w : waits) {
        // The largest part of its time first (parts are largest first), then every part, ';'-separated.
        std::string cause, cause_op, cause_ms, causes;
        if (!w.parts.empty()) {
            const auto& top = w.parts.front();
            cause = model::wait_cause_key(top.cause);
            cause_op = text(top.op);
            cause_ms = ms(top.ns);
        }
        for (const auto& p : w.parts)
            causes += (causes.empty() ? "" : ";") + part(p);
        out += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", w.owner, w.loader, known(w.batch),
                           known(w.epoch), ms(w.ns()), known(w.worker_id), w.worker_pid ? std::to_string(w.worker_pid) : "",
                           w.worker_pid ? ms(w.prepare_ns) : "", w.later_ready ? "true" : "false",
                           known(w.slowest_sample), text(w.slowest_path), text(w.slowest_part),
                           w.slowest_ns ? ms(w.slowest_ns) : "", cause, cause_op, cause_ms, text(causes));
    }
    return out;
}

class WaitsCsv : public Sink {
public:
    explicit WaitsCsv(SinkFile file) : file_(std::move(file)) {}
    void end_of_run(RunEnd& e) override
    {
        file_->write(waits_csv_text(e.report.waits));
        file_->commit();
    }

private:
    SinkFile file_;
};

} // namespace

std::unique_ptr<Sink> make_waits_csv(SinkFile file, const Options&) { return std::make_unique<WaitsCsv>(std::move(file)); }

} // namespace lotus::cli
