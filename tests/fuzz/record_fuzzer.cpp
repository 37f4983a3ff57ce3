// libFuzzer target: any bytes as a record file, through the reader, the engine and the exporters, as
// `lotus-bpf export/report` would run them. Must never crash, hang or leak; RecordError (CodecError for the
// streams) is the expected way out for bad input. The first byte picks what the rest is:
//   0: a record file;
//   2: a record file whose header checksum (format 4) is set right first, so that mutations reach the header's
//      fields and the blocks behind it;
//   1: one block's inflated streams (u32 records, then per stream u32 size + bytes), so that mutations reach
//      the block decoder behind zlib's checksums.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <zlib.h>
#include <vector>

#include "record/record_codec.h"

#include "export/chrome_trace.h"
#include "record/record_file.h"
#include "export/html_report.h"
#include "export/report.h"
#include "export/speedscope.h"
#include "export/summary.h"
#include "model/engine.h"

namespace {

// Runs records through the engine and every exporter.
template <typename Next> void reconstruct(uint64_t t0_ns, Next next)
{
    lotus::model::Rules rules({"Pipeline"}, {"*work*"});
    lotus::common::OutputFile out(""); // keeps nothing
    lotus::exporter::ChromeTraceWriter trace(out, t0_ns);
    trace.set_counter_names({"task-clock", "page-faults"});
    lotus::exporter::Summary summary;
    summary.set_counter_names({"task-clock", "page-faults"});
    lotus::exporter::SpeedscopeWriter flame;
    lotus::model::Engine engine(rules, [&](const lotus::model::Span& s) {
        summary.add(s);
        trace.span(s);
        flame.add(s);
    });
    lotus::exporter::UsageCsv csv;
    lotus::model::UsageTracker usage([&](const lotus::model::UsagePoint& p) {
        trace.usage(p);
        csv.add(p);
    });
    std::vector<uint8_t> rec;
    while (next(rec)) {
        engine.consume(rec.data(), rec.size());
        usage.consume(rec.data(), rec.size());
    }
    engine.finish();
    usage.finish();
    auto usage_rows = lotus::exporter::usage_rows(usage, engine.processes());
    csv.text(engine.processes(), t0_ns);
    summary.set_native_map(engine.native_map().table());
    trace.finish(engine.processes(), {});
    auto batches = lotus::exporter::summarize_batches(engine.batches(), engine.processes(), summary, 0);
    auto report = lotus::exporter::build_report({summary, batches, engine.processes(), {}, {}, usage_rows, 100});
    lotus::exporter::report_json(report);
    FILE* sink = fopen("/dev/null", "w");
    lotus::exporter::print_report(sink, report);
    fclose(sink);
    lotus::exporter::Timeline timeline(t0_ns);
    lotus::exporter::html_report(report, timeline);
    lotus::common::OutputFile flame_out(""); // keeps nothing
    flame.write(flame_out, engine.processes(), "fuzz", t0_ns);
    out.commit();
}

void streams(const uint8_t* data, size_t size)
{
    uint32_t format = size % 2 ? 2 : lotus::record::kBlockFormat; // both block formats a file may hold
    auto u32 = [&](uint32_t& v) {
        if (size < 4)
            return false;
        memcpy(&v, data, 4);
        data += 4, size -= 4;
        return true;
    };
    uint32_t n = 0;
    if (!u32(n) || n > lotus::record::kMaxBlockRecords)
        return;
    lotus::record::Streams s;
    for (auto& st : s) {
        uint32_t len = 0;
        if (!u32(len) || len > size)
            return;
        st.assign(reinterpret_cast<const char*>(data), len);
        data += len, size -= len;
    }
    try {
        auto recs = lotus::record::decode_streams(s, n, format);
        size_t i = 0;
        reconstruct(0, [&](std::vector<uint8_t>& rec) {
            if (i == recs.size())
                return false;
            rec = recs.record(i++);
            return true;
        });
    } catch (const lotus::record::CodecError&) {
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] == 1) {
        streams(data + 1, size - 1);
        return 0;
    }
    std::vector<uint8_t> file(data + 1, data + size);
    uint32_t meta = 0;
    if (data[0] == 2 && file.size() >= 36 && (memcpy(&meta, file.data() + 28, 4), meta <= file.size() - 36)) {
        // Past the header's checksum (format 4), so that mutations reach the header's fields and the blocks.
        uint32_t crc = static_cast<uint32_t>(crc32(0, file.data(), 32 + meta));
        memcpy(file.data() + 32 + meta, &crc, 4);
    }
    FILE* f = fmemopen(file.data(), file.size(), "rb");
    if (!f)
        return 0;
    try {
        lotus::record::RecordReader in(f, "fuzz-input");
        reconstruct(in.header().t0_ns, [&](std::vector<uint8_t>& rec) { return in.next(rec); });
    } catch (const lotus::record::RecordError&) {
    }
    return 0;
}
