// libFuzzer target: any bytes as a record file, through the reader, the engine and the exporters, as
// `lotus-bpf export/report` would run them. Must never crash, hang or leak; RecordError is the expected way
// out for bad input.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "export/chrome_trace.h"
#include "export/record_file.h"
#include "export/summary.h"
#include "model/engine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    FILE* f = fmemopen(const_cast<uint8_t*>(data), size, "rb");
    if (!f)
        return 0;
    try {
        lotus::exporter::RecordReader in(f, "fuzz-input");
        lotus::model::Rules rules({"Pipeline"}, {"*work*"});
        lotus::exporter::OutputFile out("/dev/null");
        lotus::exporter::ChromeTraceWriter trace(out, in.header().t0_ns);
        trace.set_counter_names({"task-clock", "page-faults"});
        lotus::exporter::Summary summary;
        summary.set_counter_names({"task-clock", "page-faults"});
        lotus::model::Engine engine(rules, [&](const lotus::model::Span& s) {
            summary.add(s);
            trace.span(s);
        });
        std::vector<uint8_t> rec;
        while (in.next(rec))
            engine.consume(rec.data(), rec.size());
        engine.finish();
        summary.set_native_map(engine.native_map().table());
        trace.finish(engine.processes(), {});
        summary.json(engine.processes(), nullptr, {});
        out.close();
    } catch (const lotus::exporter::RecordError&) {
    }
    return 0;
}
