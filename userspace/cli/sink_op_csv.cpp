// --op-csv FILE: the summary's per-op figures (every DataLoader together, as the printed table and the summary
// JSON's `ops`), one row per op, --span function, loading, collation and whole sample. Nothing is computed here:
// the figures are the summary's own.
#include <fmt/format.h>

#include "common/csv.h"
#include "common/utf8.h"
#include "sink.h"

namespace lotus::cli {
namespace {

const char* part_name(exporter::Part p)
{
    switch (p) {
    case exporter::Part::Op: return "op";
    case exporter::Part::Loader: return "loader";
    case exporter::Part::Collate: return "collate";
    case exporter::Part::Sample: return "sample";
    }
    return "?";
}

class OpCsv : public Sink {
public:
    explicit OpCsv(SinkFile file) : file_(std::move(file)) {}
    void end_of_run(RunEnd& e) override
    {
        file_->write(op_csv_text(e.report.ops));
        file_->commit();
    }

private:
    SinkFile file_;
};

} // namespace

std::string op_csv_text(const exporter::Rows& rows)
{
    std::string out = "part,name,count,total_ms,mean_ms,p50_ms,p95_ms\n";
    for (const auto& r : rows) {
        const auto& s = r.stats;
        out += fmt::format("{},{},{},{:.4f},{:.4f},{:.4f},{:.4f}\n", part_name(r.part),
                           common::csv_field(common::valid_utf8(r.name)), s.count, s.total_ms, s.mean_ms, s.p50_ms,
                           s.p95_ms);
    }
    return out;
}

std::unique_ptr<Sink> make_op_csv(SinkFile file, const Options&) { return std::make_unique<OpCsv>(std::move(file)); }

} // namespace lotus::cli
