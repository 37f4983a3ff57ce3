#include "launch/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <sstream>
#include <optional>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "common/read_file.h"

namespace lotus::launch {

namespace {

constexpr const char* kRoot = "/sys/fs/cgroup";

// Writes text to a cgroup file in one write(2), as the kernel wants; throws with the file and the reason.
void write_file(const std::string& path, const std::string& text)
{
    int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        throw std::runtime_error(fmt::format("cannot write '{}' to {}: {}", text, path, strerror(err)));
    }
    close(fd);
}

// "key value" lines: the value of key, or 0.
uint64_t keyed(const std::string& text, const std::string& key)
{
    std::istringstream in(text);
    std::string k;
    uint64_t v;
    while (in >> k >> v)
        if (k == key)
            return v;
    return 0;
}

uint64_t number_in(const std::string& path)
{
    auto t = common::read_file(path);
    return t ? strtoull(t->c_str(), nullptr, 10) : 0;
}

// This process's cgroup in a v1 hierarchy (by controller) or the v2 one (""), from /proc/self/cgroup.
std::string own_cgroup(const std::string& controller)
{
    auto text = common::read_file("/proc/self/cgroup").value_or("");
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        auto a = line.find(':'), b = line.find(':', a + 1);
        if (a == std::string::npos || b == std::string::npos)
            continue;
        std::string ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (controller.empty() ? ctrls.empty() && line.rfind("0::", 0) == 0 : ("," + ctrls + ",").find("," + controller + ",") != std::string::npos)
            return path == "/" ? "" : path;
    }
    return "";
}

bool is_dir(const std::string& p)
{
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The cgroups a killed lotus-bpf (SIGKILL: no destructor ran) left in parent: lotus-bpf-PID of a process that is
// gone, removed once empty (rmdir fails while its job still runs in it).
void remove_stale(const std::string& parent)
{
    DIR* d = opendir(parent.c_str());
    if (!d)
        return;
    while (dirent* e = readdir(d)) {
        int pid = 0;
        if (sscanf(e->d_name, "lotus-bpf-%d", &pid) == 1 && pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
            rmdir((parent + "/" + e->d_name).c_str());
    }
    closedir(d);
}

} // namespace

uint64_t parse_bytes(const std::string& text)
{
    char* end = nullptr;
    errno = 0;
    double v = strtod(text.c_str(), &end);
    uint64_t unit = 1;
    std::string suffix = end ? std::string(end) : "";
    if (suffix == "k" || suffix == "K" || suffix == "KiB" || suffix == "kB")
        unit = 1ull << 10;
    else if (suffix == "m" || suffix == "M" || suffix == "MiB" || suffix == "MB")
        unit = 1ull << 20;
    else if (suffix == "g" || suffix == "G" || suffix == "GiB" || suffix == "GB")
        unit = 1ull << 30;
    else if (!suffix.empty())
        throw std::invalid_argument(fmt::format("'{}' is not a size (e.g. 4G, 512M, 1048576)", text));
    if (text.empty() || end == text.c_str() || errno || !(v > 0) || v * static_cast<double>(unit) > 1e18)
        throw std::invalid_argument(fmt::format("'{}' is not a size (e.g. 4G, 512M, 1048576)", text));
    return static_cast<uint64_t>(v * static_cast<double>(unit));
}

DeviceRate parse_device_rate(const std::string& text)
{
    auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0)
        throw std::invalid_argument(fmt::format("'{}' is not DEVICE:RATE (e.g. /dev/sda:10M)", text));
    DeviceRate r;
    r.device = text.substr(0, colon);
    r.bytes_per_s = parse_bytes(text.substr(colon + 1));
    struct stat st;
    if (stat(r.device.c_str(), &st) != 0 || !S_ISBLK(st.st_mode))
        throw std::invalid_argument(fmt::format("{} is not a block device (e.g. /dev/sda)", r.device));
    r.major = major(st.st_rdev);
    r.minor = minor(st.st_rdev);
    if (access(fmt::format("/sys/dev/block/{}:{}/partition", r.major, r.minor).c_str(), F_OK) == 0)
        throw std::invalid_argument(fmt::format("{} is a partition: the kernel limits whole disks, give its disk", r.device));
    return r;
}

void JobCgroup::make(const std::string& dir)
{
    remove_stale(dir.substr(0, dir.rfind('/')));
    if (mkdir(dir.c_str(), 0755) != 0)
        throw std::runtime_error(fmt::format("cannot create the cgroup {}: {}", dir, strerror(errno)));
    dirs_.push_back(dir);
}

JobCgroup::JobCgroup(const Limits& limits)
{
    std::string name = fmt::format("lotus-bpf-{}", getpid());
    try {
        // v2 where the unified hierarchy holds the controllers this needs (current distributions).
        auto controllers = common::read_file(std::string(kRoot) + "/cgroup.controllers");
        bool v2 = controllers.has_value();
        if (v2) {
            std::string parent = std::string(kRoot) + own_cgroup("");
            auto enabled = common::read_file(parent + "/cgroup.subtree_control").value_or("");
            bool io = !limits.read_bps.empty() || !limits.write_bps.empty();
            for (const char* c : {"cpu", "memory", "cpuset", "io"}) {
                bool wanted = (c == std::string("cpu") && limits.cpus > 0) ||
                              (c == std::string("memory") && limits.memory_bytes) ||
                              (c == std::string("cpuset") && !limits.cpuset.empty()) || (c == std::string("io") && io);
                if (wanted && (" " + enabled + " ").find(std::string(" ") + c) == std::string::npos)
                    throw std::runtime_error(fmt::format("cgroup v2: the {} controller is not enabled for {} "
                                                         "(cgroup.subtree_control)",
                                                         c, parent));
            }
            version_ = "v2";
            make(parent + "/" + name);
            const auto& d = dirs_.back();
            if (limits.cpus > 0)
                write_file(d + "/cpu.max", fmt::format("{} 100000", static_cast<uint64_t>(limits.cpus * 100000)));
            if (limits.memory_bytes) {
                write_file(d + "/memory.max", std::to_string(limits.memory_bytes));
                if (access((d + "/memory.swap.max").c_str(), W_OK) == 0)
                    write_file(d + "/memory.swap.max", "0"); // the limit is memory, not memory and swap
            }
            if (!limits.cpuset.empty())
                write_file(d + "/cpuset.cpus", limits.cpuset);
            for (const auto& [rates, key] : {std::pair{&limits.read_bps, "rbps"}, std::pair{&limits.write_bps, "wbps"}})
                for (const auto& r : *rates) {
                    write_file(d + "/io.max", fmt::format("{}:{} {}={}", r.major, r.minor, key, r.bytes_per_s));
                    io_devices_.push_back(fmt::format("{}:{}", r.major, r.minor));
                }
            return;
        }
        // v1: one directory per hierarchy, under lotus-bpf's own cgroup there.
        version_ = "v1";
        auto hierarchy = [&](const char* controller) {
            std::string root = std::string(kRoot) + "/" + controller;
            if (!is_dir(root))
                throw std::runtime_error(fmt::format("cgroup v1: no {} hierarchy at {}", controller, root));
            std::string dir = root + own_cgroup(controller) + "/" + name;
            make(dir);
            return dir;
        };
        if (limits.cpus > 0) {
            auto d = hierarchy("cpu");
            write_file(d + "/cpu.cfs_period_us", "100000");
            write_file(d + "/cpu.cfs_quota_us", std::to_string(static_cast<uint64_t>(limits.cpus * 100000)));
        }
        if (limits.memory_bytes) {
            auto d = hierarchy("memory");
            write_file(d + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes));
            if (access((d + "/memory.memsw.limit_in_bytes").c_str(), W_OK) == 0)
                write_file(d + "/memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes)); // no swap
        }
        if (!limits.cpuset.empty()) {
            auto d = hierarchy("cpuset");
            // a v1 cpuset needs its memory nodes before it takes a process: the parent's
            std::string parent = d.substr(0, d.rfind('/'));
            auto mems = common::read_file(parent + "/cpuset.mems").value_or("0");
            while (!mems.empty() && (mems.back() == '\n' || mems.back() == ' '))
                mems.pop_back();
            write_file(d + "/cpuset.mems", mems.empty() ? "0" : mems);
            write_file(d + "/cpuset.cpus", limits.cpuset);
        }
        if (!limits.read_bps.empty() || !limits.write_bps.empty()) {
            auto d = hierarchy("blkio");
            for (const auto& [rates, file] : {std::pair{&limits.read_bps, "/blkio.throttle.read_bps_device"},
                                              std::pair{&limits.write_bps, "/blkio.throttle.write_bps_device"}})
                for (const auto& r : *rates) {
                    write_file(d + file, fmt::format("{}:{} {}", r.major, r.minor, r.bytes_per_s));
                    io_devices_.push_back(fmt::format("{}:{}", r.major, r.minor));
                }
        }
    } catch (...) {
        for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it)
            rmdir(it->c_str());
        throw;
    }
}

JobCgroup::~JobCgroup()
{
    for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) {
        std::string parent = it->substr(0, it->rfind('/'));
        // a job that outlived tracing: back to where lotus-bpf runs, without the limits
        for (int attempt = 0; attempt < 50 && rmdir(it->c_str()) != 0 && errno == EBUSY; attempt++) {
            auto procs = common::read_file(*it + "/cgroup.procs").value_or("");
            std::istringstream in(procs);
            for (pid_t p; in >> p;) {
                int fd = open((parent + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
                if (fd >= 0) {
                    std::string s = std::to_string(p);
                    (void)!write(fd, s.data(), s.size());
                    close(fd);
                }
            }
            usleep(10000); // exiting processes leave on their own
        }
    }
}

void JobCgroup::add(pid_t pid)
{
    for (const auto& d : dirs_)
        write_file(d + "/cgroup.procs", std::to_string(pid));
}

std::vector<pid_t> JobCgroup::members() const
{
    std::vector<pid_t> out;
    if (dirs_.empty())
        return out;
    std::istringstream in(common::read_file(dirs_.front() + "/cgroup.procs").value_or(""));
    for (pid_t p; in >> p;)
        out.push_back(p);
    return out;
}

CgroupStats JobCgroup::stats() const
{
    CgroupStats s;
    for (const auto& d : dirs_) {
        if (auto cpu = common::read_file(d + "/cpu.stat"); cpu && (version_ == "v2" || d.find("/cpu/") != std::string::npos ||
                                                          d.find("/cpu,") != std::string::npos)) {
            s.have_cpu = true;
            s.periods = keyed(*cpu, "nr_periods");
            s.throttled_periods = keyed(*cpu, "nr_throttled");
            s.throttled_ns = version_ == "v2" ? keyed(*cpu, "throttled_usec") * 1000 : keyed(*cpu, "throttled_time");
        }
        if (version_ == "v2") {
            if (auto ev = common::read_file(d + "/memory.events")) {
                s.have_memory = true;
                s.memory_peak_bytes = number_in(d + "/memory.peak");
                s.memory_limit_hits = keyed(*ev, "max");
                s.oom_kills = keyed(*ev, "oom_kill");
            }
        } else if (access((d + "/memory.max_usage_in_bytes").c_str(), R_OK) == 0) {
            s.have_memory = true;
            s.memory_peak_bytes = number_in(d + "/memory.max_usage_in_bytes");
            s.memory_limit_hits = std::max(number_in(d + "/memory.failcnt"), number_in(d + "/memory.memsw.failcnt"));
            s.oom_kills = keyed(common::read_file(d + "/memory.oom_control").value_or(""), "oom_kill");
        }
        if (io_devices_.empty())
            continue;
        // bytes moved on the limited devices: v1 "MAJ:MIN Read N" lines, v2 "MAJ:MIN rbytes=N wbytes=N ..."
        auto counted = [&](const std::string& dev) {
            return std::find(io_devices_.begin(), io_devices_.end(), dev) != io_devices_.end();
        };
        if (version_ == "v2") {
            std::istringstream in(common::read_file(d + "/io.stat").value_or(""));
            for (std::string line; std::getline(in, line);) {
                std::istringstream f(line);
                std::string dev, kv;
                f >> dev;
                while (counted(dev) && f >> kv) {
                    if (kv.rfind("rbytes=", 0) == 0)
                        s.io_read_bytes += strtoull(kv.c_str() + 7, nullptr, 10);
                    else if (kv.rfind("wbytes=", 0) == 0)
                        s.io_write_bytes += strtoull(kv.c_str() + 7, nullptr, 10);
                }
            }
            s.have_io = true;
        } else if (auto t = common::read_file(d + "/blkio.throttle.io_service_bytes")) {
            s.have_io = true;
            std::istringstream in(*t);
            std::string dev, op;
            uint64_t n;
            while (in >> dev) {
                if (dev == "Total") { // the last line: "Total N"
                    in >> n;
                    continue;
                }
                if (!(in >> op >> n))
                    break;
                if (counted(dev) && op == "Read")
                    s.io_read_bytes += n;
                else if (counted(dev) && op == "Write")
                    s.io_write_bytes += n;
            }
        }
    }
    return s;
}

namespace {

// "key value" lines: the value of key, where the key is there.
std::optional<uint64_t> keyed_value(const std::string& text, const std::string& key)
{
    std::istringstream in(text);
    std::string k, v;
    while (in >> k >> v)
        if (k == key)
            return strtoull(v.c_str(), nullptr, 10);
    return std::nullopt;
}

std::string trimmed(std::string s)
{
    while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
        s.pop_back();
    return s;
}

struct Mount {
    std::string root, point;
    std::vector<std::string> controllers; // v1: its superblock's controller options; v2: none
    bool v2 = false;
};

// The cgroup mounts this process sees (its mount namespace's), from /proc/self/mountinfo.
std::vector<Mount> cgroup_mounts()
{
    std::vector<Mount> out;
    std::istringstream in(common::read_file("/proc/self/mountinfo").value_or(""));
    for (std::string line; std::getline(in, line);) {
        std::istringstream f(line);
        std::vector<std::string> w;
        for (std::string x; f >> x;)
            w.push_back(x);
        auto dash = std::find(w.begin(), w.end(), "-");
        size_t at = static_cast<size_t>(dash - w.begin()); // then: fstype, source, superblock options
        if (w.size() < 5 || dash == w.end() || at + 1 >= w.size())
            continue;
        const std::string& fstype = w[at + 1];
        if (fstype != "cgroup" && fstype != "cgroup2")
            continue;
        Mount m{w[3], w[4], {}, fstype == "cgroup2"};
        if (!m.v2 && at + 3 < w.size()) {
            std::istringstream opts(w[at + 3]);
            for (std::string o; std::getline(opts, o, ',');)
                m.controllers.push_back(o);
        }
        out.push_back(std::move(m));
    }
    return out;
}

// A directory of mount m for the cgroup path a /proc/PID/cgroup line gives (relative to the mount's root).
std::string dir_in(const Mount& m, const std::string& path)
{
    std::string rel = path;
    if (m.root != "/" && rel.rfind(m.root, 0) == 0)
        rel = rel.substr(m.root.size());
    if (rel == "/")
        rel.clear();
    return m.point + rel;
}

// Its directory and every ancestor's up to the mount point, nearest first.
std::vector<std::string> with_ancestors(const std::string& dir, const std::string& top)
{
    std::vector<std::string> out{dir};
    std::string d = dir;
    while (d.size() > top.size() && d.rfind(top, 0) == 0) {
        d = d.substr(0, d.rfind('/'));
        if (d.size() < top.size())
            break;
        out.push_back(d);
    }
    return out;
}

} // namespace

unsigned count_cpu_list(const std::string& list)
{
    unsigned n = 0;
    std::istringstream in(trimmed(list));
    for (std::string part; std::getline(in, part, ',');) {
        if (part.empty())
            continue;
        char* end = nullptr;
        unsigned long a = strtoul(part.c_str(), &end, 10);
        if (end == part.c_str())
            return 0;
        unsigned long b = a;
        if (*end == '-') {
            const char* s2 = end + 1;
            b = strtoul(s2, &end, 10);
            if (end == s2 || b < a)
                return 0;
        }
        if (*end)
            return 0;
        n += static_cast<unsigned>(b - a + 1);
    }
    return n;
}

bool read_throttling(ProcessCgroup& cg)
{
    if (cg.cpu_dir.empty())
        return false;
    auto text = common::read_file(cg.cpu_dir + "/cpu.stat");
    if (!text)
        return false;
    auto periods = keyed_value(*text, "nr_periods"), throttled = keyed_value(*text, "nr_throttled");
    auto time = cg.cpu_v2 ? keyed_value(*text, "throttled_usec") : keyed_value(*text, "throttled_time");
    if (!periods || !throttled || !time) // (v2 without the cpu controller counts no throttling)
        return false;
    cg.periods = *periods;
    cg.throttled_periods = *throttled;
    cg.throttled_ns = cg.cpu_v2 ? *time * 1000 : *time;
    cg.have_throttle = true;
    return true;
}

std::optional<ProcessCgroup> read_process_cgroup(int pid)
{
    auto text = common::read_file(fmt::format("/proc/{}/cgroup", pid));
    if (!text)
        return std::nullopt;
    std::vector<std::pair<std::vector<std::string>, std::string>> lines; // controllers ("" for v2), path
    std::string v2_path;
    bool has_v2 = false;
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);) {
        auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos)
            continue;
        std::string ctrls = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (line.rfind("0::", 0) == 0) {
            has_v2 = true;
            v2_path = path;
            continue;
        }
        std::vector<std::string> names;
        std::istringstream cs(ctrls);
        for (std::string c; std::getline(cs, c, ',');)
            names.push_back(c);
        lines.emplace_back(std::move(names), path);
    }
    auto mounts = cgroup_mounts();
    ProcessCgroup cg;
    // The directory that holds controller c for this process: (dir, mount point, v2).
    auto locate = [&](const std::string& c, const char* v2_file) -> std::optional<std::tuple<std::string, std::string, bool>> {
        for (const auto& [names, path] : lines) {
            if (std::find(names.begin(), names.end(), c) == names.end())
                continue;
            for (const auto& m : mounts)
                if (!m.v2 && std::find(m.controllers.begin(), m.controllers.end(), c) != m.controllers.end())
                    return std::tuple{dir_in(m, path), m.point, false};
        }
        if (has_v2)
            for (const auto& m : mounts)
                if (m.v2 && access((dir_in(m, v2_path) + "/" + v2_file).c_str(), R_OK) == 0)
                    return std::tuple{dir_in(m, v2_path), m.point, true};
        return std::nullopt;
    };
    if (auto cpu = locate("cpu", "cpu.max")) {
        auto [dir, top, v2] = *cpu;
        cg.cpu_dir = dir;
        cg.cpu_v2 = v2;
        cg.path = dir.substr(std::min(top.size(), dir.size()));
        if (cg.path.empty())
            cg.path = "/";
        (v2 ? cg.v2 : cg.v1) = true;
        double tightest = 0;
        bool read_any = false;
        for (const auto& d : with_ancestors(dir, top)) {
            int64_t quota = -1;
            uint64_t period = 0;
            if (v2) {
                auto t = common::read_file(d + "/cpu.max");
                if (!t)
                    continue; // (the root has none)
                read_any = true;
                std::istringstream f(*t);
                std::string q;
                f >> q >> period;
                quota = q == "max" ? -1 : static_cast<int64_t>(strtoll(q.c_str(), nullptr, 10));
            } else {
                auto q = common::read_file(d + "/cpu.cfs_quota_us"), p = common::read_file(d + "/cpu.cfs_period_us");
                if (!q || !p)
                    continue;
                read_any = true;
                quota = strtoll(q->c_str(), nullptr, 10);
                period = strtoull(p->c_str(), nullptr, 10);
            }
            if (quota > 0 && period > 0) {
                double cpus = static_cast<double>(quota) / static_cast<double>(period);
                if (tightest == 0 || cpus < tightest) {
                    tightest = cpus;
                    cg.quota_us = quota;
                    cg.period_us = period;
                }
            }
        }
        cg.have_quota = read_any;
        if (read_any && tightest == 0) { // no quota anywhere: its own period, for the record
            cg.quota_us = -1;
            auto p = common::read_file(dir + (v2 ? "/cpu.max" : "/cpu.cfs_period_us"));
            std::istringstream f(p.value_or(""));
            std::string first;
            if (v2)
                f >> first;
            f >> cg.period_us;
        }
        read_throttling(cg);
    }
    if (auto cs = locate("cpuset", "cpuset.cpus.effective")) {
        auto [dir, top, v2] = *cs;
        auto t = common::read_file(dir + (v2 ? "/cpuset.cpus.effective" : "/cpuset.effective_cpus"));
        if (!t && !v2)
            t = common::read_file(dir + "/cpuset.cpus");
        if (t && count_cpu_list(*t)) {
            cg.cpuset = trimmed(*t);
            cg.cpuset_cpus = count_cpu_list(*t);
            cg.have_cpuset = true;
            (v2 ? cg.v2 : cg.v1) = true;
            if (cg.path.empty())
                cg.path = dir.substr(std::min(top.size(), dir.size()));
        }
    }
    if (auto mem = locate("memory", "memory.max")) {
        auto [dir, top, v2] = *mem;
        bool read_any = false;
        for (const auto& d : with_ancestors(dir, top)) {
            auto t = common::read_file(d + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
            if (!t)
                continue;
            read_any = true;
            if (trimmed(*t) == "max")
                continue;
            uint64_t limit = strtoull(t->c_str(), nullptr, 10);
            // v1 without a limit: PAGE_COUNTER_MAX pages (9223372036854771712 bytes with 4 KiB pages)
            if (limit && limit < (1ull << 62) && (cg.memory_limit == UINT64_MAX || limit < cg.memory_limit))
                cg.memory_limit = limit;
        }
        if (read_any) {
            cg.have_memory = true;
            (v2 ? cg.v2 : cg.v1) = true;
            if (cg.path.empty())
                cg.path = dir.substr(std::min(top.size(), dir.size()));
        }
    }
    return cg;
}

} // namespace lotus::launch
