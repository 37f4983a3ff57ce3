#include "proc/proc_usage.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "common/read_file.h"
#include "common/unique_fd.h"

namespace lotus::proc {

namespace {

// The number after "Key:" in a "Key: value" file, or nullopt.
std::optional<uint64_t> field(std::string_view text, std::string_view key)
{
    for (size_t at = 0; at < text.size();) {
        size_t nl = text.find('\n', at);
        std::string_view line = text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at);
        if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ':')
            return strtoull(std::string(line.substr(key.size() + 1)).c_str(), nullptr, 10);
        if (nl == std::string_view::npos)
            break;
        at = nl + 1;
    }
    return std::nullopt;
}

// The text of a /proc file kept open, made anew by this read from its start. stat, status and io are one record
// each (procfs single_show files): a read shorter than the buffer has all of it. False when it cannot be read
// (ESRCH: the process or thread ended).
bool reread(int fd, std::string& out)
{
    out.clear();
    char buf[8192];
    for (off_t at = 0;;) {
        ssize_t n = pread(fd, buf, sizeof(buf), at);
        if (n < 0)
            return false;
        out.append(buf, static_cast<size_t>(n));
        at += n;
        if (static_cast<size_t>(n) < sizeof(buf))
            return !out.empty();
    }
}

} // namespace

// At most this many thread files are kept open (a job of many ranks, workers and threads would run into the
// descriptor limit); the threads beyond are opened, read and closed at each reading.
constexpr size_t kMaxThreadFds = 512;

struct ProcUsageReader::Files {
    common::UniqueFd stat, io;
    DIR* task = nullptr; // /proc/PID/task, listed again when its threads changed
    // A thread's status file and its schedstat (closed: not kept open), and what they said last. A thread whose
    // schedstat (its run time and how many times it got a CPU) did not move has not been switched out since:
    // its switch counts stand, and its status (a far dearer read than its schedstat: docs/performance.md,
    // "What costs what") is not read again. The main thread's status is read every time: it also has the
    // process's memory.
    struct Thread {
        common::UniqueFd status, schedstat;
        uint64_t run_ns = 0, pcount = 0, nvcsw = 0, nivcsw = 0;
        bool seen = false;
    };
    std::unordered_map<int, Thread> threads; // by tid
    ~Files()
    {
        if (task)
            closedir(task);
    }
};

ProcUsageReader::ProcUsageReader() = default;
ProcUsageReader::~ProcUsageReader() = default;

void ProcUsageReader::forget(int pid)
{
    auto it = files_.find(pid);
    if (it == files_.end())
        return;
    for (const auto& [tid, t] : it->second->threads)
        thread_fds_ -= (t.status ? 1 : 0) + (t.schedstat ? 1 : 0);
    files_.erase(it);
}

void ProcUsageReader::keep_only(const std::vector<uint32_t>& pids)
{
    std::unordered_set<int> live(pids.begin(), pids.end());
    std::vector<int> ended;
    for (const auto& [pid, f] : files_)
        if (!live.count(pid))
            ended.push_back(pid);
    for (int pid : ended)
        forget(pid);
}

std::optional<ProcUsage> ProcUsageReader::read(int pid, bool with_pss)
{
    static const uint64_t tick_ns = 1'000'000'000ull / static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
    std::string dir = "/proc/" + std::to_string(pid);
    auto& slot = files_[pid];
    if (!slot) {
        auto f = std::make_unique<Files>();
        f->stat.reset(open((dir + "/stat").c_str(), O_RDONLY | O_CLOEXEC));
        f->io.reset(open((dir + "/io").c_str(), O_RDONLY | O_CLOEXEC));
        f->task = opendir((dir + "/task").c_str());
        if (!f->stat || !f->task) {
            files_.erase(pid);
            return std::nullopt;
        }
        slot = std::move(f);
    }
    Files& f = *slot;
    std::string stat;
    if (!reread(f.stat.get(), stat)) { // ESRCH: it ended (a new process with its pid gets files of its own)
        forget(pid);
        return std::nullopt;
    }
    // After the command's closing parenthesis: state is field 3, utime 14, stime 15, num_threads 20.
    size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] == 'Z' || stat[close + 2] == 'X')
        return std::nullopt;
    std::vector<uint64_t> fields; // fields[i]: field i + 3 (the state is field 3)
    for (const char* p = stat.c_str() + close + 2; *p;) {
        fields.push_back(strtoull(p, nullptr, 10));
        p = strchr(p, ' ');
        if (!p)
            break;
        p++;
    }
    if (fields.size() < 18)
        return std::nullopt;
    ProcUsage u;
    u.user_ns = fields[14 - 3] * tick_ns;
    u.system_ns = fields[15 - 3] * tick_ns;
    u.threads = static_cast<uint32_t>(fields[20 - 3]);
    std::string text;
    if (f.io && reread(f.io.get(), text)) {
        u.read_bytes = field(text, "read_bytes").value_or(0);
        u.write_bytes = field(text, "write_bytes").value_or(0);
    }
    // /proc/PID/status counts the main thread's switches only: each thread's are summed. The main thread's file
    // also has the process's memory (VmRSS, VmHWM). The list is read again when a thread came or went.
    bool listed = false;
    auto list = [&] { // all of them opened anew: a thread id may have been reused
        listed = true;
        for (const auto& [tid, t] : f.threads)
            thread_fds_ -= (t.status ? 1 : 0) + (t.schedstat ? 1 : 0);
        f.threads.clear();
        rewinddir(f.task);
        while (dirent* e = readdir(f.task)) {
            if (e->d_name[0] == '.')
                continue;
            Files::Thread t;
            auto open_at = [&](const char* name) {
                return openat(dirfd(f.task), (std::string(e->d_name) + "/" + name).c_str(), O_RDONLY | O_CLOEXEC);
            };
            if (thread_fds_ + 2 <= kMaxThreadFds) {
                t.status.reset(open_at("status"));
                t.schedstat.reset(open_at("schedstat"));
                thread_fds_ += (t.status ? 1 : 0) + (t.schedstat ? 1 : 0);
            }
            f.threads.emplace(atoi(e->d_name), std::move(t));
        }
    };
    if (f.threads.size() != u.threads)
        list();
    for (int attempt = 0; attempt < 2; attempt++) {
        bool gone = false, main_seen = false;
        u.nvcsw = u.nivcsw = 0;
        for (auto& [tid, t] : f.threads) {
            bool ok;
            if (t.status && t.schedstat && tid != pid) {
                // "run_ns wait_ns pcount"; all 0 where the kernel keeps no such figures (then never trusted)
                std::string sched;
                if (!reread(t.schedstat.get(), sched)) {
                    gone = true;
                    break;
                }
                char* end = nullptr;
                uint64_t run = strtoull(sched.c_str(), &end, 10);
                strtoull(end, &end, 10);
                uint64_t pcount = strtoull(end, nullptr, 10);
                if (t.seen && pcount && run == t.run_ns && pcount == t.pcount) {
                    u.nvcsw += t.nvcsw;
                    u.nivcsw += t.nivcsw;
                    continue;
                }
                t.run_ns = run;
                t.pcount = pcount;
            }
            if (t.status) {
                ok = reread(t.status.get(), text);
            } else { // beyond the bound: opened for this reading only
                common::UniqueFd once(openat(dirfd(f.task), (std::to_string(tid) + "/status").c_str(),
                                             O_RDONLY | O_CLOEXEC));
                ok = once && reread(once.get(), text);
            }
            if (!ok) {
                gone = true;
                break;
            }
            t.nvcsw = field(text, "voluntary_ctxt_switches").value_or(0);
            t.nivcsw = field(text, "nonvoluntary_ctxt_switches").value_or(0);
            t.seen = true;
            u.nvcsw += t.nvcsw;
            u.nivcsw += t.nivcsw;
            if (tid == pid) {
                main_seen = true;
                u.rss_kb = field(text, "VmRSS").value_or(0);
                u.hwm_kb = field(text, "VmHWM").value_or(0);
            }
        }
        if (!gone && main_seen)
            break;
        if (listed) // read anew and still changing (or its main thread has ended): what was read stands
            break;
        list();
    }
    if (with_pss)
        if (auto rollup = common::read_file(dir + "/smaps_rollup")) {
            u.pss_kb = field(*rollup, "Pss");
            auto clean = field(*rollup, "Private_Clean"), dirty = field(*rollup, "Private_Dirty");
            if (clean && dirty)
                u.private_kb = *clean + *dirty;
            u.shared_dirty_kb = field(*rollup, "Shared_Dirty");
            u.anon_kb = field(*rollup, "Anonymous");
        }
    return u;
}

PssSchedule::PssSchedule(int interval_ms, unsigned cpus, uint64_t start_ns)
    : interval_ms_(interval_ms), cpus_(cpus ? cpus : 1),
      next_ns_(start_ns + (interval_ms > 0 ? interval_ms * 1'000'000ull : kMinNs))
{
}

void PssSchedule::done(uint64_t now_ns, uint64_t cpu_ns)
{
    if (interval_ms_ > 0) {
        next_ns_ = now_ns + interval_ms_ * 1'000'000ull;
        return;
    }
    auto budgeted = static_cast<uint64_t>(static_cast<double>(cpu_ns) / (kPssBudget * cpus_));
    next_ns_ = now_ns + std::max(kMinNs, budgeted);
}

void PssSchedule::seen(const std::vector<uint32_t>& live, uint64_t now_ns)
{
    std::set<uint32_t> now(live.begin(), live.end());
    for (auto it = young_.begin(); it != young_.end();) {
        bool ended = !now.count(it->first);
        if (!ended && now_ns - it->second.since <= kYoungNs) {
            ++it;
            continue;
        }
        // One that ended before it could be judged: the next ones start later (their walks would be wasted too).
        if (ended && it->second.walks < kJudgedWalks)
            first_ns_ = std::min(2 * first_ns_, kYoungFirstMaxNs);
        else
            first_ns_ = std::max(first_ns_ / 2, kYoungFirstNs);
        it = young_.erase(it);
    }
    if (interval_ms_ < 0 && swept_)
        for (uint32_t pid : live)
            if (!known_.count(pid))
                young_[pid] = Young{now_ns, now_ns + first_ns_}; // (not at birth: see the header)
    known_ = std::move(now);
    swept_ = true;
}

bool PssSchedule::young_due(uint32_t pid, uint64_t now_ns) const
{
    auto it = young_.find(pid);
    return it != young_.end() && now_ns >= it->second.next;
}

void PssSchedule::young_done(uint32_t pid, uint64_t now_ns, uint64_t cpu_ns)
{
    auto it = young_.find(pid);
    if (it == young_.end())
        return;
    // Every young process walked as often as this one: their walks together within kYoungBudget.
    auto budgeted = static_cast<uint64_t>(static_cast<double>(cpu_ns) * static_cast<double>(young_.size()) /
                                          (kYoungBudget * cpus_));
    it->second.next = now_ns + std::max(kYoungMinNs, budgeted);
    ++it->second.walks;
}

} // namespace lotus::proc
