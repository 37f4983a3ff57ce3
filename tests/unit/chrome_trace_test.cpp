#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "export/chrome_trace.h"
#include "export/json.h"
#include "common/utf8.h"
#include "common/output_file.h"

using namespace lotus;
namespace fs = std::filesystem;

namespace {

fs::path temp_path(const std::string& name)
{
    return fs::temp_directory_path() / (std::to_string(getpid()) + "-" + name);
}

model::Span span(model::SpanKind k, const std::string& name, uint64_t start, uint64_t end, int64_t sample)
{
    model::Span s;
    s.kind = k;
    s.name = name;
    s.pid = 7;
    s.tid = 8;
    s.start_ns = start;
    s.end_ns = end;
    s.sample = sample;
    s.sample_id = 1;
    return s;
}

std::string write_trace(const fs::path& path)
{
    {
        common::OutputFile out(path.string());
        exporter::ChromeTraceWriter w(out, 1'000'000);
        w.span(span(model::SpanKind::Op, "Random\"Crop\n", 1'500'000, 1'502'500, 3));
        w.span(span(model::SpanKind::Sample, "sample", 1'400'000, 1'600'000, -1));
        std::map<uint32_t, model::ProcessInfo> procs;
        procs[7].pid = 7;
        procs[7].worker_id = 1;
        procs[7].thread_names[8] = "pt_autograd_0";
        exporter::RunInfo run;
        run.tool = "lotus-bpf test";
        run.python = "3.11.2";
        run.events = 12;
        run.events_delivered = 12;
        run.process_ends.push_back({7, "worker 1", "killed by SIGKILL", 9, -1, 0.5});
        run.output_failures.push_back("--record r.lbt: writing failed: No space left on device");
        w.finish(procs, run);
        EXPECT_TRUE(out.commit());
    }
    std::string text;
    gzFile f = gzopen(path.c_str(), "rb"); // reads plain files too
    char buf[4096];
    int n;
    while ((n = gzread(f, buf, sizeof(buf))) > 0)
        text.append(buf, static_cast<size_t>(n));
    gzclose(f);
    return text;
}

} // namespace

TEST(ChromeTrace, ValidJsonWithRelativeMicroseconds)
{
    auto path = temp_path("trace.json");
    auto doc = nlohmann::json::parse(write_trace(path));
    fs::remove(path);
    auto& ev = doc["traceEvents"];
    ASSERT_TRUE(ev.is_array());
    const auto& op = ev[0];
    EXPECT_EQ(op["ph"], "X");
    EXPECT_EQ(op["cat"], "op");
    EXPECT_EQ(op["name"], "Random\"Crop\n");
    EXPECT_DOUBLE_EQ(op["ts"].get<double>(), 500.0);
    EXPECT_EQ(op["dur"].get<double>(), 3.0); // whole µs: its end, 502.5 µs, rounded to the nearest
    EXPECT_EQ(op["args"]["sample"], 3);
    EXPECT_EQ(ev[1]["cat"], "sample");
    EXPECT_FALSE(ev[1]["args"].contains("sample")); // unknown index is left out, not -1
    bool named = false;
    for (const auto& e : ev)
        if (e["ph"] == "M" && e["name"] == "process_name")
            named = e["args"]["name"] == "worker 1";
    EXPECT_TRUE(named);
    std::map<std::pair<int, int>, std::string> threads;
    for (const auto& e : ev)
        if (e["ph"] == "M" && e["name"] == "thread_name")
            threads[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"];
    EXPECT_EQ(threads[std::make_pair(7, 8)], "thread 8 (pt_autograd_0)"); // its own name, from the kernel
    const auto& other = doc["otherData"];
    EXPECT_EQ(other["lost_events"], 0);
    EXPECT_EQ(other["events"], 12);
    EXPECT_EQ(other["events_delivered"], 12);
    EXPECT_EQ(other["tool"], "lotus-bpf test");
    EXPECT_EQ(other["python"], "3.11.2");
    EXPECT_FALSE(other.contains("evaluator_probe")); // absent where unknown (replays), not ""
    EXPECT_FALSE(other.contains("span_patterns"));
    EXPECT_EQ(other["process_ends"][0]["how"], "killed by SIGKILL");
    EXPECT_EQ(other["process_ends"][0]["signal"], 9);
    EXPECT_EQ(other["output_failures"].size(), 1u);
}

// What a viewer needs to draw the spans as they were (speedscope, Perfetto: they add ts and dur in floating
// point and take file order for parents at equal ts and dur): whole µs, touching spans still touching, a parent
// with its child's very extent (after rounding) written first, and no track for a process with nothing on it.
TEST(ChromeTrace, RendersAsNestedInViewers)
{
    auto path = temp_path("nesting.json");
    {
        common::OutputFile out(path.string());
        exporter::ChromeTraceWriter w(out, 0);
        // a loader touching its sample (1000.4-2000.6 µs, then 2000.6-9000.2 µs)
        w.span(span(model::SpanKind::Loader, "loader", 1'000'400, 2'000'600, 3));
        // the sample's only op, within 0.5 µs of each end of it: the same extent once rounded; ends first
        w.span(span(model::SpanKind::Op, "ToTensor", 2'000'900, 8'999'900, 3));
        w.span(span(model::SpanKind::Sample, "sample", 2'000'600, 9'000'200, 3));
        w.span(span(model::SpanKind::Loader, "loader", 9'000'200, 9'700'000, 4)); // touches the sample's end
        std::map<uint32_t, model::ProcessInfo> procs;
        procs[7].pid = 7;
        procs[9].pid = 9; // seen, nothing traced in it
        w.finish(procs, exporter::RunInfo{});
        EXPECT_TRUE(out.commit());
    }
    std::ifstream in(path);
    auto doc = nlohmann::json::parse(in);
    fs::remove(path);
    std::vector<nlohmann::json> x;
    for (const auto& e : doc["traceEvents"]) {
        if (e["ph"] == "X") {
            EXPECT_TRUE(e["ts"].is_number_integer() && e["dur"].is_number_integer()) << e;
            x.push_back(e);
        }
        if (e["ph"] == "M") {
            EXPECT_EQ(e["pid"], 7) << e; // no track for process 9
        }
    }
    ASSERT_EQ(x.size(), 4u);
    EXPECT_EQ(x[0]["name"], "loader");
    EXPECT_EQ(x[1]["name"], "sample"); // parent before its child of the same extent
    EXPECT_EQ(x[2]["name"], "ToTensor");
    EXPECT_EQ(x[1]["ts"], x[2]["ts"]);
    EXPECT_EQ(x[1]["dur"], x[2]["dur"]);
    // Touching in ns, touching in the viewer's arithmetic.
    EXPECT_EQ(x[0]["ts"].get<double>() + x[0]["dur"].get<double>(), x[1]["ts"].get<double>());
    EXPECT_EQ(x[1]["ts"].get<double>() + x[1]["dur"].get<double>(), x[3]["ts"].get<double>());
}

TEST(ChromeTrace, GzipWhenNameEndsInGz)
{
    auto path = temp_path("trace.json.gz");
    auto text = write_trace(path);
    std::ifstream raw(path, std::ios::binary);
    unsigned char magic[2] = {};
    raw.read(reinterpret_cast<char*>(magic), 2);
    fs::remove(path);
    EXPECT_EQ(magic[0], 0x1f);
    EXPECT_EQ(magic[1], 0x8b);
    EXPECT_TRUE(nlohmann::json::accept(text));
}

TEST(Utf8, CodePointsOfCompactStringsAreEncoded)
{
    std::string out;
    for (uint32_t cp : {0x63u, 0xe9u, 0x65e5u, 0x1f5bcu, 0xd800u, 0x110000u})
        common::append_code_point(out, cp);
    EXPECT_EQ(out, "c\xc3\xa9\xe6\x97\xa5\xf0\x9f\x96\xbc\xef\xbf\xbd\xef\xbf\xbd");
    EXPECT_EQ(common::valid_utf8(out), out);
}

TEST(Json, EscapesControlCharactersKeepsUtf8AndReplacesInvalidBytes)
{
    EXPECT_EQ(exporter::json_string("a\"b\\c\x01\xff"), "\"a\\\"b\\\\c\\u0001\\ufffd\"");
    const std::string path = "/data/caf\xc3\xa9/img_\xc3\xbc \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x96\xbc.jpg"; // café, ü, 日本, 🖼
    EXPECT_EQ(exporter::json_string(path), "\"" + path + "\"");
    EXPECT_EQ(nlohmann::json::parse(exporter::json_string(path)).get<std::string>(), path);
    // a lone continuation byte, a truncated sequence, an overlong form, a surrogate: each byte replaced alone
    EXPECT_EQ(exporter::json_string("x\x80y\xc3"), "\"x\\ufffdy\\ufffd\"");
    EXPECT_EQ(exporter::json_string("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
    EXPECT_EQ(exporter::json_string("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
}

// At the disk reserve the trace stops taking spans and is closed as valid JSON whose otherData says it was cut
// (when, why), without the large tables the summary has anyway.
TEST(ChromeTrace, CutAtTheDiskReserveIsValidJsonThatSaysSo)
{
    auto path = temp_path("cut.json");
    auto small_fs = [](int fd, common::FsSpace& s) { // 1 MiB free above a 5 % reserve
        struct stat st{};
        fstat(fd, &st);
        s = {(2 << 20) - static_cast<uint64_t>(st.st_size), 20 << 20};
        return true;
    };
    common::OutputCuts cuts; // the run's
    const int spans = 100000; // ~10 MB of JSON
    {
        common::OutputFile out(path.string(), {true, "-o", 0666, common::kDefaultDiskReserve, &cuts, small_fs});
        exporter::ChromeTraceWriter w(out, 1'000'000);
        for (int i = 0; i < spans; i++)
            w.span(span(model::SpanKind::Op, "RandomResizedCrop", 2'000'000 + i * 10'000ull, 2'005'000 + i * 10'000ull, i));
        EXPECT_TRUE(out.cut());
        std::map<uint32_t, model::ProcessInfo> procs;
        procs[7].pid = 7;
        exporter::RunInfo run;
        run.t0_monotonic_ns = 1'000'000;
        run.native_map_json = "{\"big\":1}";
        w.finish(procs, run);
        EXPECT_TRUE(out.commit());
    }
    EXPECT_LE(fs::file_size(path), 1u << 20);
    std::ifstream f(path);
    auto doc = nlohmann::json::parse(f);
    fs::remove(path);
    size_t x = 0;
    for (const auto& e : doc["traceEvents"])
        x += e["ph"] == "X";
    EXPECT_GT(x, 1000u);
    EXPECT_LT(x, static_cast<size_t>(spans));
    const auto& cut = doc["otherData"]["outputs_cut"]; // the run's own: this one
    ASSERT_EQ(cut.size(), 1u) << cut;
    EXPECT_EQ(cut[0]["output"], "-o");
    EXPECT_EQ(cut[0]["path"], path.string());
    EXPECT_GE(cut[0]["at_s"].get<double>(), 0);
    EXPECT_NE(cut[0]["why"].get<std::string>().find("would fall below 5 %"), std::string::npos);
    EXPECT_FALSE(doc["otherData"].contains("native_map"));
}
