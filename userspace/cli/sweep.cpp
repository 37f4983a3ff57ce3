#include "sweep.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/printable.h"
#include "export/html_report.h"
#include "export/json.h"
#include "common/output_file.h"

namespace lotus::cli {

namespace {

// Global because a signal handler can reach nothing else: set by the handler, read between runs.
std::atomic<bool> g_interrupted{false};
void on_interrupt(int) { g_interrupted = true; }

struct Row {
    std::string name, cpus, memory;
    int status = -1;
    std::vector<std::pair<std::string, std::string>> params;
    unsigned repeats = 0, failed = 0;       // runs made, and of them those that gave no summary or a non-zero status
    std::vector<double> rates;              // samples/s of each run that had it
    double rate_min = 0, rate_max = 0;
    std::string summary; // the last run's summary JSON
    std::optional<double> samples_per_s, waiting_pct, cpu_avg, cpu_peak, memory_peak_mb, throttled_s;
    std::optional<uint64_t> oom_kills;
    std::string verdict = "-", top_op = "-", memory_kind = "";
    // The workers model (export/worker_model.h) of its runs with one training loop: its workers, and per number
    // of workers the samples/s each run's model gave; the first configuration's, at this row's workers: estimated.
    std::optional<unsigned> workers;
    std::map<unsigned, std::vector<double>> curve;
    std::optional<double> estimated;
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
    if (auto w = at(s, {"batches", "waiting_share"}))
        r.waiting_pct = *w * 100;
    if (s.contains("batches") && s["batches"].is_object() && s["batches"].contains("input_bound_grade") &&
        s["batches"]["input_bound_grade"].is_string()) // the summary's graded verdict ("-": not known)
        r.verdict = s["batches"]["input_bound_grade"].get<std::string>() + " input-bound";
    r.cpu_avg = at(s, {"resources", "job", "cpu_avg_pct"});
    r.cpu_peak = at(s, {"resources", "job", "cpu_peak_pct"});
    r.memory_peak_mb = at(s, {"resources", "job", "pss_peak_mb"});
    r.memory_kind = "PSS";
    if (!r.memory_peak_mb) {
        r.memory_peak_mb = at(s, {"resources", "job", "rss_peak_mb"});
        r.memory_kind = "RSS";
    }
    r.throttled_s = at(s, {"run", "limits", "throttled_s"});
    if (s.contains("training") && s["training"].is_array() && s["training"].size() == 1 &&
        s["training"][0].contains("estimate") && s["training"][0]["estimate"].is_object()) {
        const auto& e = s["training"][0]["estimate"];
        if (auto w = at(e, {"workers"}))
            r.workers = static_cast<unsigned>(*w);
        if (e.contains("curve") && e["curve"].is_array())
            for (const auto& p : e["curve"])
                if (auto w = at(p, {"workers"}), x = at(p, {"samples_per_s"}); w && x)
                    r.curve[static_cast<unsigned>(*w)].push_back(*x);
    }
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

// Runs one configuration: this binary, its stdout (the summary) into `out` (NAME.txt). Returns its exit status.
int run_one(const std::vector<std::string>& args, int out)
{
    pid_t pid = fork();
    if (pid < 0)
        throw std::runtime_error(fmt::format("sweep: cannot fork: {}", strerror(errno)));
    if (pid == 0) {
        dup2(out, STDOUT_FILENO);
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

namespace {

std::string replaced(std::string arg, const std::vector<std::pair<std::string, std::string>>& values)
{
    for (const auto& [name, value] : values)
        for (size_t at; (at = arg.find("{" + name + "}")) != std::string::npos;)
            arg.replace(at, name.size() + 2, value);
    return arg;
}

double median_of(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The figures of one run into its configuration's row: rates kept for the median and spread, the rest from the
// last run that had them.
void add_run(Row& r, const nlohmann::json& s)
{
    Row one;
    fill(one, s);
    if (one.samples_per_s)
        r.rates.push_back(*one.samples_per_s);
    for (auto [to, from] : {std::pair{&r.waiting_pct, &one.waiting_pct}, {&r.cpu_avg, &one.cpu_avg},
                            {&r.cpu_peak, &one.cpu_peak}, {&r.memory_peak_mb, &one.memory_peak_mb},
                            {&r.throttled_s, &one.throttled_s}})
        if (*from)
            *to = *from;
    if (one.oom_kills)
        r.oom_kills = one.oom_kills;
    if (one.workers)
        r.workers = one.workers;
    for (const auto& [w, xs] : one.curve)
        r.curve[w].insert(r.curve[w].end(), xs.begin(), xs.end());
    if (one.verdict != "-")
        r.verdict = one.verdict;
    if (one.top_op != "-")
        r.top_op = one.top_op;
    if (!one.memory_kind.empty())
        r.memory_kind = one.memory_kind;
}

// A --param value as part of a file name: letters, digits and . + - , : @ % kept, any other byte ('/' above all)
// an underscore, so that no value names a file outside the output directory.
std::string name_part(const std::string& v)
{
    std::string out = v;
    for (char& c : out)
        if (!isalnum(static_cast<unsigned char>(c)) && (c == '\0' || !strchr(".+-,:@%", c)))
            c = '_';
    return out;
}

std::string config_name(const SweepConfig& c)
{
    std::string n;
    for (const auto& [k, v] : c.params)
        n += (n.empty() ? "" : "_") + k + "=" + name_part(v);
    if (!c.cpus.empty())
        n += (n.empty() ? "" : "_") + std::string("cpus-") + c.cpus;
    if (!c.memory.empty())
        n += (n.empty() ? "" : "_") + std::string("memory-") + c.memory;
    return n.empty() ? "unlimited" : n;
}

// The page of the table: samples/s per configuration as bars with their spread, the best and the cheapest marked.
std::string sweep_html(const std::vector<Row>& rows, int best, int cheapest, unsigned repeats)
{
    double top = 0;
    for (const auto& r : rows)
        top = std::max(top, r.rate_max);
    const int bar_h = 22, left = 260, width = 520;
    std::string svg = fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                                  "font-family=\"sans-serif\" font-size=\"12\">\n",
                                  left + width + 140, rows.size() * (bar_h + 8) + 30);
    for (size_t i = 0; i < rows.size(); i++) {
        const auto& r = rows[i];
        int y = static_cast<int>(i) * (bar_h + 8) + 10;
        svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", left - 8, y + 15,
                           exporter::html_escape(r.name));
        if (!r.samples_per_s || top <= 0) {
            svg += fmt::format("<text x=\"{}\" y=\"{}\">failed (exit status {})</text>\n", left, y + 15, r.status);
            continue;
        }
        auto x = [&](double v) { return left + static_cast<int>(v / top * width); };
        const char* colour = static_cast<int>(i) == best ? "#2b8a3e" : static_cast<int>(i) == cheapest ? "#1c7ed6"
                                                                                                      : "#868e96";
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {:.1f} "
                           "samples/s (median of {}, {:.1f}-{:.1f})</title></rect>\n",
                           left, y, x(*r.samples_per_s) - left, bar_h, colour, exporter::html_escape(r.name),
                           *r.samples_per_s, r.rates.size(), r.rate_min, r.rate_max);
        if (r.rates.size() > 1)
            svg += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#000\"/>\n", x(r.rate_min),
                               x(r.rate_max), y + bar_h / 2, y + bar_h / 2);
        svg += fmt::format("<text x=\"{}\" y=\"{}\">{:.1f}{}</text>\n", x(r.rate_max) + 6, y + 15, *r.samples_per_s,
                           static_cast<int>(i) == best ? " best" : static_cast<int>(i) == cheapest ? " cheapest" : "");
    }
    svg += "</svg>\n";
    std::string h = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>lotus-bpf sweep</title></head><body>\n"
                    "<h1>lotus-bpf sweep</h1>\n";
    h += fmt::format("<p>Samples/s per configuration: the median of {} run(s), the line its spread (min to max). "
                     "Green: the best; blue: the cheapest within 5 % of it (fewest CPUs, then least memory).</p>\n",
                     repeats);
    h += svg;
    h += "<table border=\"1\" cellpadding=\"4\"><tr><th>configuration</th><th>samples/s</th><th>spread</th>"
         "<th>waiting %</th><th>verdict</th><th>avg CPU %</th><th>peak MB</th><th>runs</th></tr>\n";
    for (const auto& r : rows)
        h += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
                         "<td>{}{}</td></tr>\n",
                         exporter::html_escape(r.name), num(r.samples_per_s, 1),
                         r.rates.size() > 1 ? fmt::format("{:.1f}-{:.1f}", r.rate_min, r.rate_max) : "-",
                         num(r.waiting_pct, 0), r.verdict, num(r.cpu_avg, 0), num(r.memory_peak_mb, 0), r.repeats,
                         r.failed ? fmt::format(" ({} failed)", r.failed) : "");
    h += "</table>\n</body></html>\n";
    return h;
}

void print_table(const std::vector<Row>& rows, const SweepOptions& o, int best, int cheapest)
{
    bool est = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.estimated.has_value(); });
    fmt::print("{:<28} {:>6} {:>10} {:>13}{} {:>9} {:<22} {:>8} {:>9} {:>10} {:>11} {:>5}  {}\n", "configuration", "exit",
               "samples/s", o.repeats > 1 ? "spread" : "", est ? fmt::format(" {:>16}", "estimated") : "", "waiting%", "verdict", "avg CPU%", "peak CPU%", "peak MB",
               "throttled s", "OOM", "most time per sample");
    for (const auto& r : rows) {
        std::string exit = r.repeats == 0 ? "-" : r.failed && o.repeats > 1 ? fmt::format("{}({}/{})", r.status, r.failed, r.repeats)
                                                                             : std::to_string(r.status);
        std::string e = !est ? "" : !r.estimated ? fmt::format(" {:>16}", "-")
                            : fmt::format(" {:>16}", fmt::format("{:.1f} ({:+.0f} %)", *r.estimated,
                                                                   r.samples_per_s ? 100 * (*r.estimated / *r.samples_per_s - 1) : 0));
        fmt::print("{:<28} {:>6} {:>10} {:>13}{} {:>9} {:<22} {:>8} {:>9} {:>10} {:>11} {:>5}  {}\n", r.name, exit,
                   num(r.samples_per_s, 1),
                   r.rates.size() > 1 ? fmt::format("{:.1f}-{:.1f}", r.rate_min, r.rate_max) : "", e,
                   num(r.waiting_pct, 0), r.verdict, num(r.cpu_avg, 0), num(r.cpu_peak, 0),
                   r.memory_peak_mb ? fmt::format("{:.0f} {}", *r.memory_peak_mb, r.memory_kind) : "-",
                   num(r.throttled_s, 2), r.oom_kills ? std::to_string(*r.oom_kills) : "-",
                   common::printable(r.top_op)); // (an op's name: the job chose it)
    }
    for (const auto& r : rows) // a run that failed is said, with where to read why
        if (r.failed)
            fmt::print("{}: failed: {} of {} run(s) exited with status {} or gave no summary{} (see {}/{}.txt)\n",
                       r.name, r.failed, r.repeats, r.status, r.samples_per_s ? "" : "; no samples/s", o.dir,
                       r.name + (o.repeats > 1 ? ".r1" : ""));
    if (best >= 0) {
        fmt::print("best: {} ({:.1f} samples/s{})\n", rows[best].name, *rows[best].samples_per_s,
                   o.repeats > 1 ? fmt::format(", median of {}", rows[best].rates.size()) : "");
        const auto& c = rows[cheapest];
        if (cheapest == best)
            fmt::print("cheapest within 5 % of it: the same (no configuration within 5 % uses fewer CPUs or less "
                       "memory)\n");
        else
            fmt::print("cheapest within 5 % of it: {} ({:.1f} samples/s, {:.0f} % of the best, with {}{})\n", c.name,
                       *c.samples_per_s, 100 * *c.samples_per_s / *rows[best].samples_per_s,
                       !c.cpus.empty() ? c.cpus + " CPU(s)" : c.cpu_avg ? fmt::format("{:.2f} CPUs used on average", *c.cpu_avg / 100) : "-",
                       c.memory_peak_mb ? fmt::format(", {:.0f} MB peak {}", *c.memory_peak_mb, c.memory_kind) : "");
    }
    fmt::print("(each run's summary, trace and HTML report: {}/NAME{}.txt, .json, .html; samples/s: the median over "
               "the repeats, spread: min to max; peak MB: the job's PSS (read every 2 s or less often: "
               "--pss-interval) where read, else its RSS sum; throttled s: time the CPU limit held the job back; "
               "cheapest: fewest CPUs (the --cpus limit, else the CPUs used on average), then least memory{})\n",
               o.dir, o.repeats > 1 ? ".rN" : "",
               est ? fmt::format("; estimated: what the model of the first configuration's run{} gave for the row's "
                                 "number of workers (docs/worker-estimate.md), and its error against the measured",
                                 o.repeats > 1 ? "s (their median)" : "")
                   : "");
}

std::string table_json(const std::vector<Row>& rows, const SweepOptions& o, int best, int cheapest)
{
    auto jn = [](std::optional<double> v) { return v ? fmt::format("{:.4f}", *v) : std::string("null"); };
    std::string js;
    for (const auto& r : rows) {
        std::string params;
        for (const auto& [k, v] : r.params)
            params += (params.empty() ? "" : ",") + exporter::json_string(k) + ":" + exporter::json_string(v);
        std::string rates;
        for (double x : r.rates)
            rates += (rates.empty() ? "" : ",") + fmt::format("{:.4f}", x);
        js += fmt::format("{}{{\"name\":{},\"params\":{{{}}},\"cpus\":{},\"memory\":{},\"exit_status\":{},\"runs\":{},"
                          "\"failed_runs\":{},\"summary\":{},\"samples_per_s\":{},\"samples_per_s_runs\":[{}],"
                          "\"samples_per_s_min\":{},\"samples_per_s_max\":{},\"waiting_pct\":{},\"verdict\":{},"
                          "\"cpu_avg_pct\":{},\"cpu_peak_pct\":{},\"memory_peak_mb\":{},\"memory_kind\":{},"
                          "\"throttled_s\":{},\"oom_kills\":{},\"top_op\":{},\"workers\":{},"
                          "\"estimated_samples_per_s\":{}}}",
                          js.empty() ? "" : ",", exporter::json_string(r.name), params,
                          r.cpus.empty() ? "null" : exporter::json_string(r.cpus),
                          r.memory.empty() ? "null" : exporter::json_string(r.memory), r.status, r.repeats, r.failed,
                          exporter::json_string(r.summary), jn(r.samples_per_s), rates,
                          r.rates.empty() ? "null" : jn(r.rate_min), r.rates.empty() ? "null" : jn(r.rate_max),
                          jn(r.waiting_pct), exporter::json_string(r.verdict), jn(r.cpu_avg), jn(r.cpu_peak),
                          jn(r.memory_peak_mb), r.memory_peak_mb ? exporter::json_string(r.memory_kind) : "null",
                          jn(r.throttled_s), r.oom_kills ? std::to_string(*r.oom_kills) : "null",
                          r.top_op == "-" ? "null" : exporter::json_string(r.top_op),
                          r.workers ? std::to_string(*r.workers) : "null", jn(r.estimated));
    }
    auto name = [&](int i) { return i < 0 ? std::string("null") : exporter::json_string(rows[i].name); };
    return fmt::format("{{\"repeats\":{},\"runs\":[{}],\"best\":{},\"cheapest_within_5pct\":{}}}\n", o.repeats, js,
                       name(best), name(cheapest));
}

// A run's summary JSON, read from the output directory without following a link; false: none, or not JSON.
bool read_summary(int dir_fd, const std::string& name, nlohmann::json& out)
{
    common::UniqueFd fd(openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st{};
    if (!fd || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    std::string text;
    char buf[65536];
    for (ssize_t got; (got = read(fd.get(), buf, sizeof(buf))) != 0;) {
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return false;
        text.append(buf, static_cast<size_t>(got));
    }
    out = nlohmann::json::parse(text, nullptr, false);
    return !out.is_discarded();
}

std::unique_ptr<common::OutputFile> open_table(const std::string& path, const char* flag, double reserve_pct)
{
    if (path.empty())
        return nullptr;
    common::OutputOptions how{true, flag, 0666, reserve_pct};
    return std::make_unique<common::OutputFile>(path, how, [](const std::string& line) {
        fmt::print(stderr, "lotus-bpf: {}\n", line);
    });
}

} // namespace

std::vector<SweepConfig> sweep_configs(const SweepOptions& o)
{
    // Every {NAME} of the command is a --param, and every --param is used.
    std::set<std::string> names;
    for (const auto& [name, values] : o.params)
        names.insert(name);
    for (const auto& arg : o.command)
        for (size_t at = arg.find('{'); at != std::string::npos; at = arg.find('{', at + 1)) {
            size_t end = arg.find('}', at);
            if (end == std::string::npos)
                break;
            std::string name = arg.substr(at + 1, end - at - 1);
            if (!name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
                                     std::string::npos &&
                !names.count(name))
                throw std::invalid_argument(fmt::format("sweep: the command has {{{}}} but no --param {}=...", name, name));
        }
    for (const auto& [name, values] : o.params) {
        bool used = false;
        for (const auto& arg : o.command)
            used |= arg.find("{" + name + "}") != std::string::npos;
        if (!used)
            throw std::invalid_argument(fmt::format("sweep: --param {} is not used in the command (put {{{}}} where its "
                                                    "value goes)", name, name));
    }
    std::vector<std::vector<std::pair<std::string, std::string>>> combos{{}};
    for (const auto& [name, values] : o.params) {
        std::vector<std::vector<std::pair<std::string, std::string>>> next;
        for (const auto& c : combos)
            for (const auto& v : values) {
                auto d = c;
                d.emplace_back(name, v);
                next.push_back(std::move(d));
            }
        combos = std::move(next);
    }
    std::vector<std::string> cpus = o.cpus.empty() ? std::vector<std::string>{""} : o.cpus;
    std::vector<std::string> memory = o.memory.empty() ? std::vector<std::string>{""} : o.memory;
    std::vector<SweepConfig> out;
    for (const auto& combo : combos)
        for (const auto& c : cpus)
            for (const auto& m : memory) {
                SweepConfig cfg{"", c, m, combo, {}};
                for (const auto& arg : o.command)
                    cfg.command.push_back(replaced(arg, combo));
                cfg.name = config_name(cfg);
                out.push_back(std::move(cfg));
            }
    // Names kept to a file name's length, and apart where values differ only in bytes a name cannot hold.
    std::set<std::string> taken;
    for (auto& cfg : out) {
        if (cfg.name.size() > 200)
            cfg.name = fmt::format("{}-{:016x}", cfg.name.substr(0, 183), std::hash<std::string>{}(cfg.name));
        std::string base = cfg.name;
        for (unsigned k = 2; !taken.insert(cfg.name).second; k++)
            cfg.name = fmt::format("{}-{}", base, k);
    }
    return out;
}

common::UniqueFd open_sweep_dir(const std::string& dir, uid_t me)
{
    auto refuse = [&](const std::string& why) {
        return std::runtime_error(fmt::format("sweep: --output-dir {}: {}", dir, why));
    };
    bool made = mkdir(dir.c_str(), 0755) == 0;
    if (!made && errno != EEXIST)
        throw refuse(fmt::format("cannot create it: {}", strerror(errno)));
    common::UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd)
        throw refuse(errno == ELOOP || errno == ENOTDIR ? "not a directory (a symbolic link, or a file); name a new "
                                                          "directory: the sweep makes it"
                                                        : strerror(errno));
    struct stat st{};
    if (fstat(fd.get(), &st) != 0)
        throw refuse(strerror(errno));
    if (st.st_uid != me)
        throw refuse(fmt::format("owned by another user (uid {}); name a new directory: the sweep makes it", st.st_uid));
    if (made) {
        common::UniqueFd mark(openat(fd.get(), kSweepMark, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
        if (!mark)
            throw refuse(fmt::format("cannot mark it as the sweep's: {}", strerror(errno)));
        return fd;
    }
    struct stat m{};
    if (fstatat(fd.get(), kSweepMark, &m, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(m.st_mode) || m.st_uid != me)
        throw refuse(fmt::format("it was not made by lotus-bpf sweep (no {} in it); name a new directory: the "
                                 "sweep makes it", kSweepMark));
    return fd;
}

common::UniqueFd open_run_file(int dir_fd, const std::string& name, uid_t me)
{
    // No O_TRUNC before the checks: a file hard-linked from elsewhere is refused, not emptied.
    common::UniqueFd fd(openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644));
    if (!fd)
        throw std::runtime_error(errno == ELOOP ? fmt::format("{}: it is a symbolic link, and the sweep never writes "
                                                              "through one", name)
                                                : fmt::format("{}: {}", name, strerror(errno)));
    struct stat st{};
    if (fstat(fd.get(), &st) != 0)
        throw std::runtime_error(fmt::format("{}: {}", name, strerror(errno)));
    if (!S_ISREG(st.st_mode))
        throw std::runtime_error(fmt::format("{}: not a regular file; the sweep writes regular files only", name));
    if (st.st_nlink != 1 || st.st_uid != me)
        throw std::runtime_error(fmt::format("{}: {}; the sweep writes only files of its own", name,
                                             st.st_uid != me ? "owned by another user" : "a hard link to another file"));
    if (ftruncate(fd.get(), 0) != 0 || fcntl(fd.get(), F_SETFL, 0) != 0)
        throw std::runtime_error(fmt::format("{}: {}", name, strerror(errno)));
    return fd;
}

std::pair<int, int> best_and_cheapest(const std::vector<SweepCost>& rows)
{
    int best = -1;
    for (size_t i = 0; i < rows.size(); i++)
        if (rows[i].samples_per_s >= 0 && (best < 0 || rows[i].samples_per_s > rows[best].samples_per_s))
            best = static_cast<int>(i);
    if (best < 0)
        return {-1, -1};
    int cheapest = best;
    auto key = [](const SweepCost& c) {
        return std::pair{c.cpus < 0 ? 1e18 : c.cpus, c.memory_mb < 0 ? 1e18 : c.memory_mb};
    };
    for (size_t i = 0; i < rows.size(); i++)
        if (rows[i].samples_per_s >= 0.95 * rows[best].samples_per_s && key(rows[i]) < key(rows[cheapest]))
            cheapest = static_cast<int>(i);
    return {best, cheapest};
}

// Each row's estimate from the first configuration's model (the median of its runs' curves at the row's number of
// workers), where every configuration ran under the same limits: a model made under other limits is not theirs.
void estimate_rows(std::vector<Row>& rows)
{
    if (rows.empty())
        return;
    for (const auto& r : rows)
        if (r.cpus != rows[0].cpus || r.memory != rows[0].memory)
            return;
    for (auto& r : rows)
        if (r.workers)
            if (auto c = rows[0].curve.find(*r.workers); c != rows[0].curve.end() && !c->second.empty())
                r.estimated = median_of(c->second);
}

int run_sweep(const SweepOptions& o)
{
    std::vector<SweepConfig> configs;
    try {
        configs = sweep_configs(o);
    } catch (const std::invalid_argument& e) {
        fmt::print(stderr, "lotus-bpf: {}\n", e.what());
        return 2;
    }
    common::UniqueFd dir;
    try {
        dir = open_sweep_dir(o.dir, geteuid());
    } catch (const std::runtime_error& e) {
        fmt::print(stderr, "lotus-bpf: {}\n", e.what());
        return 1;
    }
    std::unique_ptr<common::OutputFile> table, page; // opened first: a bad destination stops the sweep before it runs
    try {
        table = open_table(o.summary_json, "--summary-json", o.disk_reserve_pct);
        page = open_table(o.html, "--html", o.disk_reserve_pct);
    } catch (const std::exception& e) {
        fmt::print(stderr, "lotus-bpf: {}\n", e.what());
        return 1;
    }
    struct sigaction sa = {};
    sa.sa_handler = on_interrupt; // the run in progress stops on the same Ctrl-C; no further one starts
    sigaction(SIGINT, &sa, nullptr);
    std::vector<Row> rows(configs.size());
    for (size_t i = 0; i < configs.size(); i++) {
        rows[i].name = configs[i].name;
        rows[i].cpus = configs[i].cpus;
        rows[i].memory = configs[i].memory;
        rows[i].params = configs[i].params;
    }
    int failed = 0;
    size_t total = configs.size() * o.repeats, n = 0;
    std::string refused; // a run's file that is not the sweep's to write: the sweep stops there
    // Repeats interleaved: each round runs every configuration once, so that a slow spell of the machine falls
    // on all of them.
    for (unsigned rep = 0; rep < o.repeats && !g_interrupted && refused.empty(); rep++)
        for (size_t i = 0; i < configs.size() && !g_interrupted && refused.empty(); i++) {
            const auto& cfg = configs[i];
            Row& r = rows[i];
            std::string name = cfg.name + (o.repeats > 1 ? fmt::format(".r{}", rep + 1) : "");
            std::string base = o.dir + "/" + name;
            std::vector<std::string> args{"lotus-bpf", "-q", "-o", base + ".json", "--summary-json", base + ".summary.json",
                                          "--html", base + ".html"};
            if (!cfg.cpus.empty())
                args.insert(args.end(), {"--cpus", cfg.cpus});
            if (!cfg.memory.empty())
                args.insert(args.end(), {"--memory", cfg.memory});
            args.insert(args.end(), o.pass.begin(), o.pass.end());
            args.push_back("--");
            args.insert(args.end(), cfg.command.begin(), cfg.command.end());
            // Its files: none may be a link or anything but a regular file (the run's own outputs refuse them too,
            // but the sweep stops at once, with one line); the summary is written into a file opened here.
            common::UniqueFd txt;
            try {
                for (const char* ext : {".txt", ".json", ".summary.json", ".html"}) {
                    struct stat st{};
                    if (fstatat(dir.get(), (name + ext).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
                        throw std::runtime_error(fmt::format("{}{}: {}", name, ext, S_ISLNK(st.st_mode)
                                                     ? "it is a symbolic link, and the sweep never writes through one"
                                                     : "not a regular file; the sweep writes regular files only"));
                }
                txt = open_run_file(dir.get(), name + ".txt", geteuid());
            } catch (const std::runtime_error& e) {
                refused = fmt::format("sweep: {}/{} (remove it, or name a new --output-dir)", o.dir, e.what());
                break;
            }
            fmt::print(stderr, "lotus-bpf: sweep {}/{}: {} ...\n", ++n, total, name);
            unlinkat(dir.get(), (name + ".summary.json").c_str(), 0); // an earlier sweep's summary is not this run's
            int status = run_one(args, txt.get());
            txt.reset();
            r.repeats++;
            nlohmann::json s;
            bool summarized = read_summary(dir.get(), name + ".summary.json", s);
            if (summarized)
                add_run(r, s);
            if (!summarized || status)
                r.failed++;
            if (!summarized && !failed)
                failed = status ? status : 1;
            if (r.status <= 0) // (the row shows a failing run's status where one failed)
                r.status = status;
            r.summary = base + ".summary.json";
            fmt::print(stderr, "lotus-bpf: sweep {}/{}: {}: exit status {}{}\n", n, total, cfg.name, status,
                       summarized ? "" : " (no summary: see " + base + ".txt)");
        }
    sa.sa_handler = SIG_DFL;
    sigaction(SIGINT, &sa, nullptr);
    if (!refused.empty()) {
        fmt::print(stderr, "lotus-bpf: {}\n", refused);
        return 1;
    }

    estimate_rows(rows);
    std::vector<SweepCost> costs;
    for (auto& r : rows) {
        if (!r.rates.empty()) {
            r.samples_per_s = median_of(r.rates);
            r.rate_min = *std::min_element(r.rates.begin(), r.rates.end());
            r.rate_max = *std::max_element(r.rates.begin(), r.rates.end());
        }
        double cpus = !r.cpus.empty() ? std::stod(r.cpus) : r.cpu_avg ? *r.cpu_avg / 100 : -1;
        costs.push_back({r.samples_per_s.value_or(-1), cpus, r.memory_peak_mb.value_or(-1)});
    }
    auto [best, cheapest] = best_and_cheapest(costs);
    print_table(rows, o, best, cheapest);
    if (table) {
        table->write(table_json(rows, o, best, cheapest));
        if (!table->commit())
            return 74;
    }
    if (page) {
        page->write(sweep_html(rows, best, cheapest, o.repeats));
        if (!page->commit())
            return 74;
    }
    if (g_interrupted)
        return 130;
    return failed;
}

} // namespace lotus::cli
