#include "diff.h"

#include <unistd.h>

#include <fstream>
#include <memory>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/printable.h"
#include "common/output_file.h"
#include "export/run_diff.h"
#include "replay.h"

namespace lotus::cli {

namespace {

std::string read_all(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    if (!f)
        throw std::runtime_error(fmt::format("{}: cannot be read", path));
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

// A summary JSON as it is; anything else is taken for a record file and reconstructed (its summary JSON written
// to a temporary file, read back and removed).
nlohmann::ordered_json load(const std::string& path)
{
    auto text = read_all(path);
    auto j = nlohmann::ordered_json::parse(text, nullptr, false);
    if (j.is_object() && j.contains("ops") && j.contains("run"))
        return j;
    if (!j.is_discarded())
        throw std::runtime_error(fmt::format("{}: a JSON file but not a lotus-bpf summary (--summary-json)", path));
    char tmp[] = "/tmp/lotus-diff-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0)
        throw std::runtime_error("cannot create a temporary file in /tmp");
    close(fd);
    Options o;
    o.replay = path;
    o.output.clear();
    o.print_summary = false;
    o.summary_json = tmp;
    std::string summary, why;
    try {
        if (replay(o) == 0)
            summary = read_all(tmp);
    } catch (const std::exception& e) {
        why = e.what();
    }
    unlink(tmp);
    if (summary.empty())
        throw std::runtime_error(why.empty() ? fmt::format("{}: its record could not be reconstructed", path)
                                             : fmt::format("neither a summary JSON nor a record file: {}", why));
    return nlohmann::ordered_json::parse(summary);
}

} // namespace

int run_diff(const std::string& a, const std::string& b, const std::string& html)
{
    try {
        std::unique_ptr<common::OutputFile> page; // opened first: a bad destination is told before any work
        if (!html.empty())
            page = std::make_unique<common::OutputFile>(
                html, common::OutputOptions{false, "--html"},
                [](const std::string& line) { fmt::print(stderr, "lotus-bpf: {}\n", line); });
        auto ja = load(a), jb = load(b);
        fmt::print("{}", common::printable_lines(exporter::diff_runs(ja, jb, a, b))); // (op names from the runs)
        if (page) {
            page->write(exporter::diff_html(ja, jb, a, b));
            if (!page->commit())
                return 74;
        }
        return 0;
    } catch (const std::exception& e) {
        fmt::print(stderr, "lotus-bpf: {}\n", common::printable(e.what()));
        return 1;
    }
}

} // namespace lotus::cli
