#include <gtest/gtest.h>

#include <string>

#include "export/run_diff.h"

using namespace lotus;
using nlohmann::ordered_json;

namespace {

ordered_json run(double crop_mean, double samples_per_s, double waiting, bool resources)
{
    ordered_json j;
    j["run"] = {{"samples", 100}};
    j["ops"]["Crop"] = {{"count", 100}, {"mean_ms", crop_mean}, {"p50_ms", crop_mean}, {"p95_ms", 2 * crop_mean}};
    j["ops"]["loader"] = {{"count", 100}, {"mean_ms", 1.0}, {"p50_ms", 1.0}, {"p95_ms", 1.5}};
    j["ops"]["sample"] = {{"count", 100}, {"mean_ms", crop_mean + 0.1}, {"p50_ms", 1.0}, {"p95_ms", 3.0}};
    j["throughput"] = {{"samples", 100}, {"seconds", 100 / samples_per_s}, {"samples_per_s", samples_per_s}};
    j["batches"] = {{"waiting_share", waiting}, {"verdict", waiting > 0.2 ? "input-bound" : "keeps up"},
                    {"wait", {{"mean_ms", 10.0}}}};
    if (resources)
        j["resources"]["job"] = {{"wall_s", 4.0}, {"user_s", 3.0}, {"system_s", 1.0}, {"cpu_avg_pct", 100.0}};
    return j;
}

bool has(const std::string& text, const std::string& line) { return text.find(line) != std::string::npos; }

} // namespace

TEST(RunDiff, SideBySideWithAbsoluteAndRelativeChange)
{
    auto a = run(2.0, 400, 0.5, true), b = run(1.5, 500, 0.1, false);
    b["ops"]["Flip"] = {{"count", 100}, {"mean_ms", 0.1}, {"p50_ms", 0.1}, {"p95_ms", 0.2}}; // only in B
    std::string t = exporter::diff_runs(a, b, "a.json", "b.lbt");
    EXPECT_TRUE(has(t, "A: a.json\nB: b.lbt\n")) << t;
    EXPECT_TRUE(has(t, "samples/s                                 400.0        500.0  +100.0 (+25.0 %)")) << t;
    EXPECT_TRUE(has(t, "training loop waiting for data, %          50.0         10.0  -40.0 pts")) << t;
    EXPECT_TRUE(has(t, "verdict A: input-bound\nverdict B: keeps up\n")) << t;
    // ops in A's order, then B's own, then loader, collation and the whole pipeline; a missing side is "-"
    EXPECT_TRUE(has(t, "Crop                              100      100      2.000      1.500   -0.500 (-25.0 %)      4.000      "
                       "3.000   -1.000 (-25.0 %)"))
        << t;
    EXPECT_TRUE(has(t, "Flip                                -      100          -      0.100                  -")) << t;
    EXPECT_LT(t.find("\nCrop"), t.find("\nFlip"));
    EXPECT_LT(t.find("\nFlip"), t.find("\nloader"));
    EXPECT_LT(t.find("\nloader"), t.find("\nsample (whole pipeline)"));
    EXPECT_FALSE(has(t, "\ncollate")); // in neither run
    EXPECT_TRUE(has(t, "CPU s                                      4.00            -  -")) << t;
    // a zero on A's side: the change without a relative one
    auto z = run(0.0, 400, 0.5, false);
    std::string zt = exporter::diff_runs(z, b, "z", "b");
    std::string crop = zt.substr(zt.find("\nCrop"), zt.find('\n', zt.find("\nCrop") + 1) - zt.find("\nCrop"));
    EXPECT_TRUE(has(crop, " +1.500 ")) << crop;
    EXPECT_TRUE(has(crop, " +3.000")) << crop;
    EXPECT_FALSE(has(crop, "%")) << crop;
}

TEST(RunDiff, AsAnOfflinePageWithPairedBars)
{
    auto a = run(2.0, 400, 0.5, true), b = run(1.5, 500, 0.1, false);
    a["ops"]["<Crop&>"] = a["ops"]["Crop"];
    std::string h = exporter::diff_html(a, b, "a.json", "b.lbt");
    EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_EQ(h.find("http"), std::string::npos);
    EXPECT_EQ(h.find("<script"), std::string::npos);
    EXPECT_TRUE(has(h, "<title>A Crop: 2.000 ms per call</title>")) << h;
    EXPECT_TRUE(has(h, "<title>B Crop: 1.500 ms per call</title>"));
    EXPECT_TRUE(has(h, "&lt;Crop&amp;&gt;"));
    EXPECT_TRUE(has(h, "B: not in this run")); // the op only A has
    EXPECT_TRUE(has(h, "samples/s                                 400.0        500.0  +100.0 (+25.0 %)")); // the table
}
