#include "proc/proc_maps.h"

#include <sched.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <signal.h>

#include <atomic>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "common/read_file.h"
#include "common/unique_fd.h"

namespace lotus::proc {

namespace {

// The hex or decimal number at the front of s, consumed with the separator after it (or the end of s); false
// when there is none.
bool take_number(std::string_view& s, int base, char separator, uint64_t& out)
{
    uint64_t v = 0;
    size_t i = 0;
    for (; i < s.size(); i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : base == 16 && c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            break;
        v = v * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    }
    if (i == 0 || (i < s.size() && s[i] != separator))
        return false;
    out = v;
    s.remove_prefix(std::min(i + 1, s.size()));
    return true;
}

} // namespace

// By hand, not sscanf: a process that loaded torch maps many lines (docs/performance.md, "What costs what"),
// read again for each new worker.
std::vector<Mapping> parse_maps(const std::string& text)
{
    std::vector<Mapping> out;
    std::string_view rest(text);
    while (!rest.empty()) {
        size_t eol = rest.find('\n');
        std::string_view line = rest.substr(0, eol);
        rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 1);
        // start-end perms offset major:minor inode [path]
        Mapping m;
        uint64_t major = 0, minor = 0;
        if (!take_number(line, 16, '-', m.start) || !take_number(line, 16, ' ', m.end))
            continue;
        size_t perms = line.find(' ');
        if (perms == 0 || perms > 7 || perms == line.npos)
            continue;
        m.perms = std::string(line.substr(0, perms));
        line.remove_prefix(perms + 1);
        if (!take_number(line, 16, ' ', m.offset) || !take_number(line, 16, ':', major) ||
            !take_number(line, 16, ' ', minor) || !take_number(line, 10, ' ', m.inode))
            continue;
        size_t first = line.find_first_not_of(' '), last = line.find_last_not_of(' ');
        if (first != line.npos)
            m.path = std::string(line.substr(first, last - first + 1));
        m.dev_major = static_cast<uint32_t>(major);
        m.dev_minor = static_cast<uint32_t>(minor);
        out.push_back(std::move(m));
    }
    return out;
}

std::vector<Mapping> read_maps(int pid)
{
    std::string path = "/proc/" + std::to_string(pid) + "/maps";
    auto text = common::read_file(path);
    if (!text)
        throw std::runtime_error("cannot read " + path);
    return parse_maps(*text);
}

namespace {

// The PROCMAP_QUERY ioctl of /proc/PID/maps (uapi linux/fs.h, Linux 6.11; Debian's headers may predate it).
struct ProcmapQuery {
    uint64_t size, query_flags, query_addr;
    uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
static_assert(sizeof(ProcmapQuery) == 104);
constexpr unsigned long kProcmapQuery = _IOWR('f', 17, ProcmapQuery);
constexpr uint64_t kVmaRead = 1, kVmaWrite = 2, kVmaExec = 4, kVmaShared = 8;
constexpr uint64_t kCoveringOrNext = 0x10, kFileBacked = 0x20;

} // namespace

namespace {

std::atomic<bool> procmap_query_unsupported{false}; // learnt once: the kernel has no PROCMAP_QUERY

Mapping mapping_of(const ProcmapQuery& q)
{
    Mapping m;
    m.start = q.vma_start;
    m.end = q.vma_end;
    m.offset = q.vma_offset;
    m.inode = q.inode;
    m.dev_major = q.dev_major;
    m.dev_minor = q.dev_minor;
    m.perms = {q.vma_flags & kVmaRead ? 'r' : '-', q.vma_flags & kVmaWrite ? 'w' : '-',
               q.vma_flags & kVmaExec ? 'x' : '-', q.vma_flags & kVmaShared ? 's' : 'p'};
    return m;
}

} // namespace

MappingQuery query_file_mapping(int pid, uint64_t addr)
{
    if (procmap_query_unsupported)
        return {};
    std::string path = "/proc/" + std::to_string(pid) + "/maps";
    common::UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd)
        throw std::runtime_error("cannot read " + path);
    char name[PATH_MAX + 32];
    ProcmapQuery q{};
    q.size = sizeof(q);
    q.query_flags = kFileBacked; // the mapping covering addr, not the next one
    q.query_addr = addr;
    q.vma_name_addr = reinterpret_cast<uint64_t>(name);
    q.vma_name_size = sizeof(name);
    if (ioctl(fd.get(), kProcmapQuery, &q) != 0) {
        if (errno == ENOENT) // no file mapped there
            return {true, std::nullopt};
        if (errno == ENOTTY || errno == EINVAL) {
            procmap_query_unsupported = true;
            return {};
        }
        throw std::runtime_error("cannot query " + path);
    }
    Mapping m = mapping_of(q);
    if (q.vma_name_size > 0)
        m.path.assign(name, strnlen(name, q.vma_name_size));
    return {true, std::move(m)};
}

std::optional<std::vector<Mapping>> exec_file_maps(int pid, const std::function<bool(const Mapping&)>& known)
{
    std::atomic<bool>& unsupported = procmap_query_unsupported;
    if (unsupported)
        return std::nullopt;
    std::string path = "/proc/" + std::to_string(pid) + "/maps";
    common::UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd)
        throw std::runtime_error("cannot read " + path);
    std::vector<Mapping> out;
    char name[PATH_MAX + 32];
    for (uint64_t addr = 0;;) {
        ProcmapQuery q{};
        q.size = sizeof(q);
        q.query_flags = kCoveringOrNext | kFileBacked | kVmaExec;
        q.query_addr = addr;
        if (ioctl(fd.get(), kProcmapQuery, &q) != 0) {
            if (errno == ENOENT) // no such mapping above addr: all seen
                return out;
            if (errno == ENOTTY || errno == EINVAL) { // a kernel without it (or with another layout)
                unsupported = true;
                return std::nullopt;
            }
            throw std::runtime_error("cannot query " + path);
        }
        Mapping m = mapping_of(q);
        if (!known(m)) { // its path: asked for this mapping alone
            q = {};
            q.size = sizeof(q);
            q.query_flags = kFileBacked;
            q.query_addr = m.start;
            q.vma_name_addr = reinterpret_cast<uint64_t>(name);
            q.vma_name_size = sizeof(name);
            if (ioctl(fd.get(), kProcmapQuery, &q) == 0 && q.vma_name_size > 0 && q.inode == m.inode)
                m.path.assign(name, strnlen(name, q.vma_name_size));
        }
        if (m.end <= addr)
            return out; // (never: the next mapping the kernel gives lies above addr)
        addr = m.end;
        out.push_back(std::move(m));
    }
}

std::string openable_path(int pid, const std::string& path, uint64_t inode, uint32_t dev_major, uint32_t dev_minor)
{
    if (path.empty() || path[0] != '/')
        return {};
    for (const std::string& p : {"/proc/" + std::to_string(pid) + "/root" + path, path}) {
        struct stat st;
        if (stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_ino == inode && major(st.st_dev) == dev_major &&
            minor(st.st_dev) == dev_minor)
            return p;
    }
    return {};
}

// Whether fd is a regular file, that inode on that device (never a FIFO, a device or a socket put at a path the
// target named: opening one could block, reading one could never end).
static bool is_mapped_file(int fd, const Mapping& map)
{
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_ino == map.inode &&
           major(st.st_dev) == map.dev_major && minor(st.st_dev) == map.dev_minor;
}

common::UniqueFd open_mapped(int pid, const Mapping& map)
{
    if (map.path.empty() || map.path[0] != '/')
        return {};
    // O_NONBLOCK: an open of a FIFO put at the path would wait for a writer; O_NOFOLLOW: the path's last part
    // must not have become a link (map_files' entries are the kernel's own links to the mapped file).
    char mapped[96];
    snprintf(mapped, sizeof(mapped), "/proc/%d/map_files/%lx-%lx", pid, static_cast<unsigned long>(map.start),
             static_cast<unsigned long>(map.end));
    common::UniqueFd fd(open(mapped, O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (is_mapped_file(fd.get(), map))
        return fd;
    for (const std::string& p : {"/proc/" + std::to_string(pid) + "/root" + map.path, map.path}) {
        fd.reset(open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW));
        if (is_mapped_file(fd.get(), map))
            return fd;
    }
    return {};
}

std::string openable_exe(int pid, const std::string& path)
{
    struct stat st;
    if (stat(("/proc/" + std::to_string(pid) + "/exe").c_str(), &st) != 0)
        return {};
    return openable_path(pid, path, st.st_ino, major(st.st_dev), minor(st.st_dev));
}

bool process_exists(int pid)
{
    if (pid <= 0)
        return false;
    return kill(pid, 0) == 0 || errno == EPERM;
}

common::UniqueFd pidfd_of(int pid)
{
    return common::UniqueFd(pid > 0 ? static_cast<int>(syscall(SYS_pidfd_open, pid, 0)) : -1);
}

std::optional<int> parent_pid(int pid)
{
    // read(2), not a stream: a stream throws when the process goes between open and read (ESRCH).
    auto text = common::read_file("/proc/" + std::to_string(pid) + "/stat");
    if (!text || text->empty())
        return std::nullopt;
    std::string s = text->substr(0, text->find('\n'));
    // comm may hold spaces and parentheses: the fields after it start after the last ')'.
    auto close = s.rfind(')');
    if (close == std::string::npos)
        return std::nullopt;
    std::istringstream rest(s.substr(close + 1));
    std::string state;
    int ppid = 0;
    if (!(rest >> state >> ppid))
        return std::nullopt;
    return ppid;
}

bool descends_from(int pid, const std::function<bool(int)>& root)
{
    for (int p = pid, steps = 0; p > 1 && steps < 64; steps++) {
        if (root(p))
            return true;
        auto parent = parent_pid(p);
        if (!parent)
            return false;
        p = *parent;
    }
    return false;
}

std::vector<int> descendants(int pid)
{
    std::multimap<int, int> children;
    if (DIR* d = opendir("/proc")) {
        while (dirent* e = readdir(d)) {
            char* end = nullptr;
            long p = strtol(e->d_name, &end, 10);
            if (*end || p <= 0)
                continue;
            if (auto pp = parent_pid(static_cast<int>(p)))
                children.emplace(*pp, static_cast<int>(p));
        }
        closedir(d);
    }
    std::vector<int> out, todo{pid};
    while (!todo.empty()) {
        int p = todo.back();
        todo.pop_back();
        auto [a, b] = children.equal_range(p);
        for (auto it = a; it != b; ++it) {
            out.push_back(it->second);
            todo.push_back(it->second);
        }
    }
    return out;
}

std::string read_comm(int pid)
{
    std::string s = common::read_file("/proc/" + std::to_string(pid) + "/comm").value_or("");
    return s.substr(0, s.find('\n'));
}

std::string command_line(int pid)
{
    std::string s = common::read_file("/proc/" + std::to_string(pid) + "/cmdline").value_or("");
    for (auto& ch : s)
        if (ch == '\0')
            ch = ' ';
    while (!s.empty() && s.back() == ' ')
        s.pop_back();
    return s;
}

} // namespace lotus::proc

namespace lotus::proc {

std::optional<int> env_int(int pid, const std::string& name)
{
    std::istringstream f(common::read_file("/proc/" + std::to_string(pid) + "/environ").value_or(""));
    std::string entry, prefix = name + "=";
    while (std::getline(f, entry, '\0')) {
        if (entry.compare(0, prefix.size(), prefix) != 0)
            continue;
        try {
            size_t used = 0;
            int v = std::stoi(entry.substr(prefix.size()), &used);
            if (used == entry.size() - prefix.size() && v >= 0)
                return v;
        } catch (const std::exception&) {
        }
        return std::nullopt;
    }
    return std::nullopt;
}

std::optional<unsigned> allowed_cpus(int pid)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(pid, sizeof(set), &set) != 0)
        return std::nullopt;
    return static_cast<unsigned>(CPU_COUNT(&set));
}

} // namespace lotus::proc
