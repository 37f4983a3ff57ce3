#include "sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "export/json.h"
#include "export/output_file.h"

namespace lotus::cli {

namespace {

std::atomic<bool> g_interrupted{false};
void on_interrupt(int) { g_interrupted = true; }

struct Row {
    std::string name, cpus, memory;
    int status = -1;
    std::optional<double> samples_per_s, waiting_pct, cpu_avg, cpu_peak, memory_peak_mb, throttled_s;
    std::optional<uint64_t> oom_kills;
    std::string verdict = "-", top_op = "-", memory_kind = "";
};

std::optional<double> at(const nlohmann::json& j, std::initializer_list<const char*> path)
{
    const nlohmann::json* p = &j;
    for (const char* k : path) {
        if (!p->is_object() || !p->contains(k))
            return std::nullopt;
        p = &(*p)[k];
    }
    return p->is_number() ? std::optional<double>(p->get<double>()) : std::nullopt;
}

// The run's figures from its summary JSON.
void fill(Row& r, const nlohmann::json& s)
{
    r.samples_per_s = at(s, {"throughput", "samples_per_s"});
    if (auto w = at(s, {"batches", "waiting_share"})) {
        r.waiting_pct = *w * 100;
        r.verdict = *r.waiting_pct >= 20 ? "input-bound" : "keeps up";
    }
    r.cpu_avg = at(s, {"resources", "job", "cpu_avg_pct"});
    r.cpu_peak = at(s, {"resources", "job", "cpu_peak_pct"});
    r.memory_peak_mb = at(s, {"resources", "job", "pss_peak_mb"});
    r.memory_kind = "PSS";
    if (!r.memory_peak_mb) {
        r.memory_peak_mb = at(s, {"resources", "job", "rss_peak_mb"});
        r.memory_kind = "RSS";
    }
    r.throttled_s = at(s, {"run", "limits", "throttled_s"});
    if (auto k = at(s, {"run", "limits", "oom_kills"}))
        r.oom_kills = static_cast<uint64_t>(*k);
    // the op (or the loading, or the collation) with the most time per sample, as the advice names it
    double best = 0;
    if (s.contains("ops") && s["ops"].is_object())
        for (const auto& [name, st] : s["ops"].items())
            if (name != "sample" && st.contains("total_ms") && st["total_ms"].is_number() &&
                st["total_ms"].get<double>() > best)
                best = st["total_ms"].get<double>(), r.top_op = name;
}

std::string num(std::optional<double> v, int decimals) { return v ? fmt::format("{:.{}f}", *v, decimals) : "-"; }

// Runs one configuration: this binary, its stdout (the summary) into NAME.txt. Returns its exit status.
int run_one(const std::vector<std::string>& args, const std::string& stdout_path)
{
    pid_t pid = fork();
    if (pid < 0)
        throw std::runtime_error(fmt::format("sweep: cannot fork: {}", strerror(errno)));
    if (pid == 0) {
        int fd = open(stdout_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0)
            dup2(fd, STDOUT_FILENO);
        std::vector<char*> argv;
        for (const auto& a : args)
            argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        execv("/proc/self/exe", argv.data());
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace

int run_sweep(const SweepOptions& o)
{
    if (mkdir(o.dir.c_str(), 0755) != 0 && errno != EEXIST) {
        fmt::print(stderr, "lotus-bpf: sweep: cannot create {}: {}\n", o.dir, strerror(errno));
        return 1;
    }
    std::unique_ptr<exporter::OutputFile> table; // opened first: a bad destination stops the sweep before it runs
    if (!o.summary_json.empty()) {
        try {
            table = std::make_unique<exporter::OutputFile>(
                o.summary_json, exporter::OutputOptions{true, "--summary-json"},
                [](const std::string& line) { fmt::print(stderr, "lotus-bpf: {}\n", line); });
        } catch (const std::exception& e) {
            fmt::print(stderr, "lotus-bpf: {}\n", e.what());
            return 1;
        }
    }
    struct sigaction sa = {};
    sa.sa_handler = on_interrupt; // the run in progress stops on the same Ctrl-C; no further one starts
    sigaction(SIGINT, &sa, nullptr);
    std::vector<std::string> cpus = o.cpus.empty() ? std::vector<std::string>{""} : o.cpus;
    std::vector<std::string> memory = o.memory.empty() ? std::vector<std::string>{""} : o.memory;
    std::vector<Row> rows;
    int failed = 0;
    size_t total = cpus.size() * memory.size(), n = 0;
    for (const auto& c : cpus)
        for (const auto& m : memory) {
            if (g_interrupted)
                break;
            Row r;
            r.cpus = c;
            r.memory = m;
            r.name = (c.empty() ? "" : "cpus-" + c) + (c.empty() || m.empty() ? "" : "_") + (m.empty() ? "" : "memory-" + m);
            if (r.name.empty())
                r.name = "unlimited";
            std::string base = o.dir + "/" + r.name;
            std::vector<std::string> args{"lotus-bpf", "-q", "-o", base + ".json", "--summary-json", base + ".summary.json",
                                          "--html", base + ".html"};
            if (!c.empty())
                args.insert(args.end(), {"--cpus", c});
            if (!m.empty())
                args.insert(args.end(), {"--memory", m});
            args.insert(args.end(), o.pass.begin(), o.pass.end());
            args.push_back("--");
            args.insert(args.end(), o.command.begin(), o.command.end());
            fmt::print(stderr, "lotus-bpf: sweep {}/{}: {} ...\n", ++n, total, r.name);
            unlink((base + ".summary.json").c_str()); // a summary left by an earlier sweep is not this run's
            r.status = run_one(args, base + ".txt");
            std::ifstream f(base + ".summary.json");
            auto s = nlohmann::json::parse(f, nullptr, false);
            if (f && !s.is_discarded())
                fill(r, s);
            else if (!failed)
                failed = r.status ? r.status : 1;
            fmt::print(stderr, "lotus-bpf: sweep {}/{}: {}: exit status {}{}\n", n, total, r.name, r.status,
                       f ? "" : " (no summary: see " + base + ".txt)");
            rows.push_back(r);
        }
    sa.sa_handler = SIG_DFL;
    sigaction(SIGINT, &sa, nullptr);

    fmt::print("{:<24} {:>6} {:>10} {:>9} {:<12} {:>8} {:>9} {:>10} {:>11} {:>5}  {}\n", "configuration", "exit",
               "samples/s", "waiting%", "verdict", "avg CPU%", "peak CPU%", "peak MB", "throttled s", "OOM",
               "most time per sample");
    std::string js;
    for (const auto& r : rows) {
        fmt::print("{:<24} {:>6} {:>10} {:>9} {:<12} {:>8} {:>9} {:>10} {:>11} {:>5}  {}\n", r.name, r.status,
                   num(r.samples_per_s, 1), num(r.waiting_pct, 0), r.verdict, num(r.cpu_avg, 0), num(r.cpu_peak, 0),
                   r.memory_peak_mb ? fmt::format("{:.0f} {}", *r.memory_peak_mb, r.memory_kind) : "-",
                   num(r.throttled_s, 2), r.oom_kills ? std::to_string(*r.oom_kills) : "-", r.top_op);
        auto jn = [](std::optional<double> v) { return v ? fmt::format("{:.4f}", *v) : std::string("null"); };
        js += fmt::format("{}{{\"name\":{},\"cpus\":{},\"memory\":{},\"exit_status\":{},\"summary\":{},"
                          "\"samples_per_s\":{},\"waiting_pct\":{},\"verdict\":{},\"cpu_avg_pct\":{},\"cpu_peak_pct\":{},"
                          "\"memory_peak_mb\":{},\"memory_kind\":{},\"throttled_s\":{},\"oom_kills\":{},\"top_op\":{}}}",
                          js.empty() ? "" : ",", exporter::json_string(r.name),
                          r.cpus.empty() ? "null" : exporter::json_string(r.cpus),
                          r.memory.empty() ? "null" : exporter::json_string(r.memory), r.status,
                          exporter::json_string(o.dir + "/" + r.name + ".summary.json"), jn(r.samples_per_s),
                          jn(r.waiting_pct), exporter::json_string(r.verdict), jn(r.cpu_avg), jn(r.cpu_peak),
                          jn(r.memory_peak_mb), r.memory_peak_mb ? exporter::json_string(r.memory_kind) : "null",
                          jn(r.throttled_s), r.oom_kills ? std::to_string(*r.oom_kills) : "null",
                          r.top_op == "-" ? "null" : exporter::json_string(r.top_op));
    }
    fmt::print("(each run's summary, trace and HTML report: {}/NAME.txt, .json, .html; peak MB: the job's PSS (read "
               "every 2 s or less often: --pss-interval) where read, else its RSS sum; throttled s: time the CPU "
               "limit held the job back)\n",
               o.dir);
    if (table) {
        table->write("{\"runs\":[" + js + "]}\n");
        if (!table->commit())
            return 74;
    }
    if (g_interrupted)
        return 130;
    return failed;
}

} // namespace lotus::cli
