#include "agent.h"
#include "rules_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pwd.h>
#include <sys/resource.h>
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

#include "capture/exec_watch.h"
#include "common/printable.h"
#include "common/read_file.h"
#include "metrics/agent_metrics.h"
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
    std::string record; // its record file's path ("": none)
    std::thread thread;
    std::atomic<bool> done{false};
    std::atomic<bool> starved{false}; // file descriptors ran out while attaching: skipped, not traced
    bool settled = false;             // done and seen so by reap: its root, if alive, is in Agent::skipped_
    std::shared_ptr<void> metrics; // (a metrics::PipelineMetrics, kept keep_finished_s after the end)
    std::chrono::steady_clock::time_point ended;
};

class Agent {
public:
    explicit Agent(const AgentOptions& opts) : opts_(opts) {}
    int run();

private:
    void scan();
    void look(int pid); // a process not seen yet: a job now, not one, or (CPython without torch yet) later
    void watch_execs(double seconds);
    void consider(int pid);
    void start(int pid, std::map<std::string, std::string> labels);
    void skip(int pid, metrics::SkipReason r, const std::string& who, const std::string& why);
    void join(Job& j); // its thread joined, its record noted (once)
    void keep_records();
    void reap();
    bool under_a_job(int pid) const;
    size_t traced_now() const;

    const AgentOptions& opts_;
    std::shared_ptr<metrics::SharedRegistry> registry_;
    std::unique_ptr<metrics::Endpoint> endpoint_;
    std::list<Job> jobs_;
    size_t traced_ = 0; // jobs attached since the start (jobs_ drops finished ones)
    std::set<int> seen_; // pids looked at (jobs, and processes that were not one)
    // Jobs left untraced, and jobs whose session ended while they run on (a failure), alive: their processes are no
    // jobs of their own either.
    std::set<int> skipped_;
    std::unique_ptr<metrics::AgentMetrics> agent_metrics_;
    std::optional<RecordBudget> budget_;
    // CPython processes without torch yet: scans to skip before their maps are read again, and the gap (in scans),
    // doubled at each look up to kMaxGap, so that an idle python's maps are not read every second for ever.
    struct Backoff {
        int skip = 0, gap = 1;
    };
    std::map<int, Backoff> waiting_;
    static constexpr int kMaxGap = 32;
    // Processes seen to exec (ExecWatch), looked at every kFreshPollMs until they map torch, are no CPython, or
    // kFreshS pass (then the scans' backoff takes them): a job is attached as it imports torch, before its first
    // batch, rather than up to a scan (and a backoff) later.
    std::unique_ptr<capture::ExecWatch> execs_;
    std::map<int, std::chrono::steady_clock::time_point> fresh_;
    static constexpr int kFreshPollMs = 50;
    static constexpr int kFreshS = 30;
};

bool Agent::under_a_job(int pid) const
{
    return proc::descends_from(pid, [this](int p) {
        return skipped_.count(p) || std::any_of(jobs_.begin(), jobs_.end(), [p](const Job& j) {
                   return !j.settled && j.pid == p;
               });
    });
}

size_t Agent::traced_now() const
{
    return static_cast<size_t>(std::count_if(jobs_.begin(), jobs_.end(), [](const Job& j) { return !j.done; }));
}

void Agent::scan()
{
    std::error_code ec;
    std::set<int> alive;
    std::filesystem::directory_iterator proc_dir("/proc", ec);
    if (ec)
        return; // (descriptors short: no process is taken for gone, and the next scan looks again)
    for (const auto& e : proc_dir) {
        const std::string name = e.path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos)
            continue;
        int pid = std::atoi(name.c_str());
        alive.insert(pid);
        if (pid == getpid() || seen_.count(pid))
            continue;
        if (fresh_.count(pid))
            continue; // (looked at more often)
        auto w = waiting_.find(pid);
        if (w != waiting_.end() && w->second.skip-- > 0)
            continue;
        look(pid);
    }
    for (auto it = seen_.begin(); it != seen_.end();) // a pid that came back is a new process
        it = alive.count(*it) ? std::next(it) : seen_.erase(it);
    for (auto it = skipped_.begin(); it != skipped_.end();)
        it = alive.count(*it) ? std::next(it) : skipped_.erase(it);
    for (auto it = waiting_.begin(); it != waiting_.end();)
        it = alive.count(it->first) ? std::next(it) : waiting_.erase(it);
}

void Agent::look(int pid)
{
    Candidate c = read_candidate(pid);
    if (c.python && !c.torch) { // (not yet: a CPython process may import torch later; looked at again)
        if (fresh_.count(pid))
            return;
        auto& b = waiting_[pid];
        b.skip = b.gap;
        b.gap = std::min(2 * b.gap, kMaxGap);
        return;
    }
    waiting_.erase(pid);
    fresh_.erase(pid);
    seen_.insert(pid);
    if (!is_job(c, opts_.match) || under_a_job(pid))
        return; // (a job's children are traced with it, a skipped job's are skipped with it)
    consider(pid);
}

// Until the next scan: the processes that exec meanwhile, and those that did lately, looked at as they go.
void Agent::watch_execs(double seconds)
{
    auto until = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
    while (!stop_signal()) {
        auto now = std::chrono::steady_clock::now();
        if (now >= until)
            return;
        int ms = static_cast<int>(std::chrono::duration<double, std::milli>(until - now).count()) + 1;
        for (int pid : execs_->poll(fresh_.empty() ? ms : std::min(ms, kFreshPollMs))) {
            seen_.erase(pid); // (an exec is a new program: a process looked at before is looked at again)
            waiting_.erase(pid);
            fresh_[pid] = std::chrono::steady_clock::now() + std::chrono::seconds(kFreshS);
        }
        now = std::chrono::steady_clock::now();
        for (auto it = fresh_.begin(); it != fresh_.end();) {
            int pid = it->first;
            if (it->second < now || !proc::process_exists(pid)) { // (then the scans' backoff)
                it = fresh_.erase(it);
                continue;
            }
            ++it;
            if (pid != getpid() && !seen_.count(pid))
                look(pid);
        }
    }
}

// Open file descriptors of the agent (each job's session holds its own: programs, maps, links, its ring).
size_t open_fds()
{
    size_t n = 0;
    if (DIR* d = opendir("/proc/self/fd")) {
        while (dirent* e = readdir(d))
            n += e->d_name[0] != '.';
        closedir(d);
    }
    return n;
}

// A job's session is not started with fewer descriptors free than this: less than any job takes attaching (a plain
// one about 50, more with thread sampling, --native-map and many processes), so it would surely fail part way. A
// job that starts and runs out all the same is skipped then (Agent::start's on_failure).
constexpr size_t kFdsForAJob = 32;

std::string user_name(uint32_t uid)
{
    passwd pw{}, *found = nullptr;
    char buf[1024];
    if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found)
        return fmt::format("{} ({})", uid, found->pw_name);
    return std::to_string(uid);
}

// A job found: traced, unless the filters, --max-jobs or the descriptors left say otherwise.
void Agent::consider(int pid)
{
    auto labels = job_labels(pid);
    std::string who = fmt::format("PID {} ({} {})", pid, common::printable(metrics::label_value(labels["lotus_job"])),
                                  common::printable(metrics::label_value(labels["lotus_job_id"])));
    if (!opts_.users.empty()) {
        auto uid = real_uid(read_text(fmt::format("/proc/{}/status", pid)));
        if (!uid || std::find(opts_.users.begin(), opts_.users.end(), *uid) == opts_.users.end())
            return skip(pid, metrics::SkipReason::user, who,
                        fmt::format("its user, {}, is not one of --users", uid ? user_name(*uid) : "unknown"));
    }
    if (!opts_.cgroups.empty() && !in_cgroups(read_text(fmt::format("/proc/{}/cgroup", pid)), opts_.cgroups))
        return skip(pid, metrics::SkipReason::cgroup, who, "its cgroup is under no --cgroup");
    if (traced_now() >= opts_.max_jobs)
        return skip(pid, metrics::SkipReason::max_jobs, who,
                    fmt::format("--max-jobs {} are traced already", opts_.max_jobs));
    rlimit r{};
    size_t used = open_fds();
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY && used + kFdsForAJob > r.rlim_cur)
        return skip(pid, metrics::SkipReason::fds, who,
                    fmt::format("file descriptors short ({} open of the agent's limit of {}, and a job takes more "
                                "than {}): raise its hard limit (systemd: LimitNOFILE=)", used, r.rlim_cur, kFdsForAJob));
    start(pid, std::move(labels));
}

void Agent::skip(int pid, metrics::SkipReason r, const std::string& who, const std::string& why)
{
    skipped_.insert(pid);
    agent_metrics_->skipped(r);
    fmt::print(stderr, "lotus-bpf agent: {} skipped: {}\n", who, why);
}

void Agent::join(Job& j)
{
    if (!j.thread.joinable())
        return;
    j.thread.join();
    if (budget_ && !j.record.empty()) {
        struct stat st{};
        if (lstat(j.record.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
            budget_->add(basename_of(j.record));
    }
}

// --record-max-mb: the oldest of the agent's records go until the rest fit.
void Agent::keep_records()
{
    if (!budget_)
        return;
    std::string error;
    for (const auto& r : budget_->enforce(&error))
        fmt::print(stderr, "lotus-bpf agent: removed record {} ({:.1f} MiB), the oldest, to keep --record-dir within "
                           "--record-max-mb {:g}\n", r.name, static_cast<double>(r.bytes) / (1 << 20),
                   opts_.record_max_mb);
    if (!error.empty())
        fmt::print(stderr, "lotus-bpf agent: {}\n", common::printable(error));
}

void Agent::start(int pid, std::map<std::string, std::string> labels)
{
    // A finished job kept for its last scrapes whose labels the new one repeats (its pid reused, same name and
    // id): its series go now, so that the new job's series are its own from the start.
    for (auto it = jobs_.begin(); it != jobs_.end();) {
        if (!it->done || it->labels != labels) {
            ++it;
            continue;
        }
        join(*it);
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
    std::string who = fmt::format("PID {} ({} {})", pid, common::printable(metrics::label_value(job.labels["lotus_job"])),
                                  common::printable(metrics::label_value(job.labels["lotus_job_id"])));
    fmt::print(stderr, "lotus-bpf agent: attaching to {}{}{}\n", who, o.record.empty() ? "" : ", record ",
               common::printable(o.record));
    job.record = o.record;
    Job* j = &job;
    o.metrics_handoff = [j](std::shared_ptr<void> m) { j->metrics = std::move(m); };
    // A failed run's reason: descriptors running out while attaching make the job skipped (its session undone:
    // nothing of it stays attached), with one line; any other reason is said as the session would.
    o.on_failure = [j, who, am = agent_metrics_.get()](const std::string& reason) {
        if (out_of_fds(reason)) {
            rlimit r{};
            getrlimit(RLIMIT_NOFILE, &r);
            fmt::print(stderr, "lotus-bpf agent: {} skipped: file descriptors ran out while attaching (the agent's "
                               "limit: {}): raise its hard limit (systemd: LimitNOFILE=)\n",
                       who, static_cast<unsigned long long>(r.rlim_cur));
            am->skipped(metrics::SkipReason::fds);
            j->starved = true;
        } else {
            fmt::print(stderr, "lotus-bpf: {}\n", common::printable(reason));
        }
    };
    job.thread = std::thread([j, o = std::move(o)]() {
        int rc = run_session(o);
        // A record the session did not write (it failed before its header) leaves no empty file behind.
        struct stat st{};
        if (!o.record.empty() && lstat(o.record.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
            unlink(o.record.c_str());
        if (!j->starved)
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
        join(*it);
        if (!it->settled) { // (a session that ended while its job runs on: the job is not taken up again)
            it->settled = true;
            if (proc::process_exists(it->pid))
                skipped_.insert(it->pid);
        }
        if (it->starved) { // never traced
            traced_--;
            it = jobs_.erase(it);
            continue;
        }
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
    if (!opts_.session.rules_file.empty()) // read by each job's run: a bad one is said now, not at the first job
        load_rules_file(opts_.session.rules_file);
    if (opts_.record_max_mb > 0)
        budget_.emplace(opts_.record_dir, static_cast<uint64_t>(opts_.record_max_mb * (1 << 20)));
    // Each job's session takes descriptors (programs, maps, links, a ring, a thread's sampling events): all the
    // hard limit allows, and a job that would not fit is skipped (consider).
    rlimit lim{};
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit(RLIMIT_NOFILE, &lim);
    }
    registry_ = std::make_shared<metrics::SharedRegistry>();
    endpoint_ = std::make_unique<metrics::Endpoint>(metrics::parse_bind_address(opts_.metrics), registry_);
    agent_metrics_ = std::make_unique<metrics::AgentMetrics>(*registry_, node_name(opts_.session));
    install_stop_handlers();
    keep_records(); // (a smaller --record-max-mb than the last run's)
    std::string why;
    execs_ = capture::ExecWatch::open(why);
    if (!execs_)
        fmt::print(stderr, "lotus-bpf agent: {}: new jobs are found by scanning /proc every {:g} s\n", common::printable(why),
                   opts_.scan_interval_s);
    auto at = metrics::parse_bind_address(opts_.metrics);
    at.port = endpoint_->port();
    getrlimit(RLIMIT_NOFILE, &lim);
    fmt::print(stderr, "lotus-bpf agent: metrics at http://{}/metrics; watching for PyTorch training processes{} (at "
                       "most {} at once; file descriptors: {})\n",
               at.str(), opts_.match.empty() ? "" : " matching --match", opts_.max_jobs,
               lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(lim.rlim_cur));
    while (!stop_signal()) {
        scan();
        reap();
        keep_records();
        agent_metrics_->traced_now(traced_now());
        if (execs_) {
            watch_execs(opts_.scan_interval_s);
        } else {
            auto ns = static_cast<long>(opts_.scan_interval_s * 1e9);
            timespec ts{ns / 1'000'000'000, ns % 1'000'000'000};
            nanosleep(&ts, nullptr); // (a signal ends it early)
        }
    }
    // Every job's session sees the same signal and detaches.
    for (auto& j : jobs_)
        join(j);
    keep_records();
    for (const auto& j : jobs_)
        traced_ -= j.starved;
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
