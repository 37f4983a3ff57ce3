#include "agent.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <list>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "common/printable.h"
#include "common/read_file.h"
#include "metrics/endpoint.h"
#include "metrics/pipeline_metrics.h"
#include "proc/proc_maps.h"

namespace lotus::cli {

namespace {

std::string read_text(const std::string& path)
{
    return common::read_file(path).value_or("");
}

std::string basename_of(const std::string& path)
{
    auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The process's environment variable `name` (/proc/PID/environ), or "".
std::string env_text(int pid, const std::string& name)
{
    std::string env = read_text(fmt::format("/proc/{}/environ", pid));
    std::string key = name + "=";
    for (size_t at = 0; at < env.size();) {
        size_t end = env.find('\0', at);
        if (end == std::string::npos)
            end = env.size();
        if (env.compare(at, key.size(), key) == 0)
            return env.substr(at + key.size(), end - at - key.size());
        at = end + 1;
    }
    return "";
}

Candidate read_candidate(int pid)
{
    Candidate c;
    c.cmdline = proc::command_line(pid);
    std::error_code ec;
    auto exe = std::filesystem::read_symlink(fmt::format("/proc/{}/exe", pid), ec).string();
    c.python = basename_of(exe).rfind("python", 0) == 0;
    if (!c.python && exe.empty())
        return c; // (a kernel thread, or gone)
    // The maps only of CPython processes: torch's library is what makes one a PyTorch job.
    std::string maps = read_text(fmt::format("/proc/{}/maps", pid));
    c.python = c.python || maps.find("libpython3") != std::string::npos;
    c.torch = c.python && maps.find("libtorch") != std::string::npos;
    return c;
}

// A job's run: one Session on its own thread, its metrics handed back when it ends.
struct Job {
    int pid = 0;
    std::map<std::string, std::string> labels;
    std::thread thread;
    std::atomic<bool> done{false};
    std::shared_ptr<void> metrics; // (a metrics::PipelineMetrics, kept keep_finished_s after the end)
    std::chrono::steady_clock::time_point ended;
};

class Agent {
public:
    explicit Agent(const AgentOptions& opts) : opts_(opts) {}
    int run();

private:
    void scan();
    void start(int pid);
    void reap();
    bool under_a_job(int pid) const;

    const AgentOptions& opts_;
    std::shared_ptr<prometheus::Registry> registry_;
    std::unique_ptr<metrics::Endpoint> endpoint_;
    std::list<Job> jobs_;
    size_t traced_ = 0; // jobs attached since the start (jobs_ drops finished ones)
    std::set<int> seen_; // pids looked at (jobs, and processes that were not one)
    // CPython processes without torch yet: scans to skip before their maps are read again, and the gap (in scans),
    // doubled at each look up to kMaxGap, so that an idle python's maps are not read every second for ever.
    struct Backoff {
        int skip = 0, gap = 1;
    };
    std::map<int, Backoff> waiting_;
    static constexpr int kMaxGap = 32;
};

bool Agent::under_a_job(int pid) const
{
    return proc::descends_from(pid, [this](int p) {
        return std::any_of(jobs_.begin(), jobs_.end(), [p](const Job& j) { return !j.done && j.pid == p; });
    });
}

void Agent::scan()
{
    std::error_code ec;
    std::set<int> alive;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
        const std::string name = e.path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        int pid = std::atoi(name.c_str());
        alive.insert(pid);
        if (pid == getpid() || seen_.count(pid))
            continue;
        auto w = waiting_.find(pid);
        if (w != waiting_.end() && w->second.skip-- > 0)
            continue;
        Candidate c = read_candidate(pid);
        if (c.python && !c.torch) { // (not yet: a CPython process may import torch later; looked at again)
            auto& b = waiting_[pid];
            b.skip = b.gap;
            b.gap = std::min(2 * b.gap, kMaxGap);
            continue;
        }
        waiting_.erase(pid);
        seen_.insert(pid);
        if (!is_job(c, opts_.match) || under_a_job(pid))
            continue; // (a job's children are traced with it)
        start(pid);
    }
    for (auto it = seen_.begin(); it != seen_.end();) // a pid that came back is a new process
        it = alive.count(*it) ? std::next(it) : seen_.erase(it);
    for (auto it = waiting_.begin(); it != waiting_.end();)
        it = alive.count(it->first) ? std::next(it) : waiting_.erase(it);
}

void Agent::start(int pid)
{
    auto labels = job_labels(pid);
    // A finished job kept for its last scrapes whose labels the new one repeats (its pid reused, same name and
    // id): its series go now, so that the new job's series are its own from the start.
    for (auto it = jobs_.begin(); it != jobs_.end();) {
        if (!it->done || it->labels != labels) {
            ++it;
            continue;
        }
        if (it->thread.joinable())
            it->thread.join();
        if (it->metrics)
            std::static_pointer_cast<metrics::PipelineMetrics>(it->metrics)->remove_series();
        it = jobs_.erase(it);
    }
    auto& job = jobs_.emplace_back();
    traced_++;
    job.pid = pid;
    job.labels = std::move(labels);
    Options o = opts_.session;
    o.pid = pid;
    o.output.clear();
    o.print_summary = false;
    o.quiet = true;
    o.metrics_registry = registry_;
    o.metrics_labels = job.labels;
    if (!opts_.record_dir.empty()) {
        o.record = reserve_record(opts_.record_dir,
                                  file_name_part(job.labels["lotus_job"]) + "-" + file_name_part(job.labels["lotus_job_id"]));
        if (o.record.empty()) // (the job is still traced, for its metrics)
            fmt::print(stderr, "lotus-bpf agent: PID {}: no record file: {}\n", pid, strerror(errno));
    }
    fmt::print(stderr, "lotus-bpf agent: attaching to PID {} ({} {}){}{}\n", pid,
               common::printable(metrics::label_value(job.labels["lotus_job"])),
               common::printable(metrics::label_value(job.labels["lotus_job_id"])), o.record.empty() ? "" : ", record ",
               common::printable(o.record));
    Job* j = &job;
    o.metrics_handoff = [j](std::shared_ptr<void> m) { j->metrics = std::move(m); };
    job.thread = std::thread([j, o = std::move(o)]() {
        int rc = run_session(o);
        // A record the session did not write (it failed before its header) leaves no empty file behind.
        struct stat st{};
        if (!o.record.empty() && lstat(o.record.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
            unlink(o.record.c_str());
        fmt::print(stderr, "lotus-bpf agent: detached from PID {} (status {})\n", j->pid, rc);
        j->ended = std::chrono::steady_clock::now();
        j->done = true;
    });
}

// Finished jobs' threads joined; their series removed once kept long enough.
void Agent::reap()
{
    auto now = std::chrono::steady_clock::now();
    for (auto it = jobs_.begin(); it != jobs_.end();) {
        if (!it->done) {
            ++it;
            continue;
        }
        if (it->thread.joinable())
            it->thread.join();
        if (std::chrono::duration<double>(now - it->ended).count() < opts_.keep_finished_s) {
            ++it;
            continue;
        }
        if (it->metrics)
            std::static_pointer_cast<metrics::PipelineMetrics>(it->metrics)->remove_series();
        it = jobs_.erase(it);
    }
}

int Agent::run()
{
    if (!opts_.record_dir.empty() && !std::filesystem::is_directory(opts_.record_dir))
        throw std::runtime_error(fmt::format("--record-dir {}: not a directory", opts_.record_dir));
    registry_ = std::make_shared<prometheus::Registry>();
    endpoint_ = std::make_unique<metrics::Endpoint>(metrics::parse_bind_address(opts_.metrics), registry_);
    install_stop_handlers();
    auto at = metrics::parse_bind_address(opts_.metrics);
    at.port = endpoint_->port();
    fmt::print(stderr, "lotus-bpf agent: metrics at http://{}/metrics; watching for PyTorch training processes{}\n",
               at.str(), opts_.match.empty() ? "" : " matching --match");
    while (!stop_signal()) {
        scan();
        reap();
        auto ns = static_cast<long>(opts_.scan_interval_s * 1e9);
        timespec ts{ns / 1'000'000'000, ns % 1'000'000'000};
        nanosleep(&ts, nullptr); // (a signal ends it early)
    }
    // Every job's session sees the same signal and detaches.
    for (auto& j : jobs_)
        if (j.thread.joinable())
            j.thread.join();
    fmt::print(stderr, "lotus-bpf agent: stopped ({} job(s) traced)\n", traced_);
    endpoint_->stop();
    return 0;
}

} // namespace

std::string file_name_part(const std::string& label)
{
    std::string out;
    for (char c : basename_of(label)) {
        bool safe = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
        if (c == '.' && (out.empty() || out.back() == '.'))
            continue; // no hidden file, no ".." anywhere
        out += safe ? c : '_';
        if (out.size() == 64)
            break;
    }
    return out.empty() ? "job" : out;
}

std::string reserve_record(const std::string& dir, const std::string& name)
{
    // O_EXCL: a file already there (a job of equal labels, an older run) is never replaced, the name takes a
    // suffix instead; O_NOFOLLOW: a link at the name is not followed. 0600: a record holds the job's command
    // lines and file paths. The session's record then replaces this empty file when it completes.
    for (int n = 1; n <= 1000; n++) {
        std::string path = n == 1 ? fmt::format("{}/{}.lbt", dir, name) : fmt::format("{}/{}-{}.lbt", dir, name, n);
        int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            close(fd);
            return path;
        }
        if (errno != EEXIST)
            return "";
    }
    errno = EEXIST;
    return "";
}

bool is_job(const Candidate& c, const std::vector<std::string>& match)
{
    if (!c.python || !c.torch)
        return false;
    if (match.empty())
        return true;
    for (const auto& glob : match)
        if (fnmatch(glob.c_str(), c.cmdline.c_str(), 0) == 0)
            return true;
    return false;
}

std::map<std::string, std::string> job_labels(int pid)
{
    std::string cmdline = read_text(fmt::format("/proc/{}/cmdline", pid));
    std::vector<std::string> args;
    for (size_t at = 0; at < cmdline.size();) {
        size_t end = cmdline.find('\0', at);
        if (end == std::string::npos)
            end = cmdline.size();
        args.push_back(cmdline.substr(at, end - at));
        at = end + 1;
    }
    // The script (python [options] script.py ...; python -m module), else the program.
    std::string name = args.empty() ? proc::read_comm(pid) : basename_of(args[0]);
    for (size_t i = 1; i < args.size(); i++) {
        if (args[i] == "-m" && i + 1 < args.size()) {
            name = args[i + 1];
            break;
        }
        if (!args[i].empty() && args[i][0] != '-') {
            name = basename_of(args[i]);
            break;
        }
    }
    std::string id = env_text(pid, "SLURM_JOB_ID");
    if (id.empty()) {
        std::string run = env_text(pid, "TORCHELASTIC_RUN_ID");
        id = run == "none" ? "" : run;
    }
    if (id.empty()) { // its start: boot time + its start in clock ticks (/proc/PID/stat field 22)
        std::string stat = read_text(fmt::format("/proc/{}/stat", pid));
        auto close = stat.rfind(')');
        unsigned long long start_ticks = 0;
        if (close != std::string::npos) {
            std::istringstream in(stat.substr(close + 2));
            std::string field;
            for (int f = 3; f <= 22 && in >> field; f++)
                if (f == 22)
                    start_ticks = std::stoull(field);
        }
        timespec boot{}, rt{};
        clock_gettime(CLOCK_BOOTTIME, &boot);
        clock_gettime(CLOCK_REALTIME, &rt);
        double boot_at = static_cast<double>(rt.tv_sec) - static_cast<double>(boot.tv_sec);
        auto started = static_cast<time_t>(boot_at + static_cast<double>(start_ticks) / sysconf(_SC_CLK_TCK));
        char buf[32];
        std::tm tm{};
        gmtime_r(&started, &tm);
        strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
        id = buf;
    }
    // pid: two jobs of equal name and id (srun's tasks of one job, two runs of one script started in one second)
    // are two processes, and their series stay apart (docs/metrics.md).
    return {{"lotus_job", name}, {"lotus_job_id", id}, {"pid", std::to_string(pid)}};
}

int run_agent(const AgentOptions& opts)
{
    try {
        return Agent(opts).run();
    } catch (const std::exception& e) {
        fmt::print(stderr, "lotus-bpf agent: {}\n", common::printable(e.what()));
        return 1;
    }
}

} // namespace lotus::cli
