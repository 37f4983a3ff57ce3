#include "proc_maps.h"

#include <sched.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <dirent.h>
#include <signal.h>

#include <cerrno>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace lotus::target {

std::vector<Mapping> parse_maps(const std::string& text)
{
    std::vector<Mapping> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        Mapping m;
        char perms[8] = {};
        unsigned long long start, end, offset, inode;
        char dev[16] = {};
        int consumed = 0;
        if (sscanf(line.c_str(), "%llx-%llx %7s %llx %15s %llu %n", &start, &end, perms, &offset, dev, &inode,
                   &consumed) < 6)
            continue;
        m.start = start;
        m.end = end;
        m.offset = offset;
        m.inode = inode;
        unsigned major = 0, minor = 0;
        if (sscanf(dev, "%x:%x", &major, &minor) == 2)
            m.dev_major = major, m.dev_minor = minor;
        m.perms = perms;
        if (consumed > 0 && static_cast<size_t>(consumed) < line.size())
            m.path = line.substr(consumed);
        while (!m.path.empty() && m.path.back() == ' ')
            m.path.pop_back();
        out.push_back(std::move(m));
    }
    return out;
}

std::vector<Mapping> read_maps(int pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
    if (!f)
        throw std::runtime_error("cannot read /proc/" + std::to_string(pid) + "/maps");
    std::stringstream ss;
    ss << f.rdbuf();
    return parse_maps(ss.str());
}

std::string openable_path(int pid, const std::string& path, uint64_t inode, uint32_t dev_major, uint32_t dev_minor)
{
    if (path.empty() || path[0] != '/')
        return {};
    for (const std::string& p : {"/proc/" + std::to_string(pid) + "/root" + path, path}) {
        struct stat st;
        if (stat(p.c_str(), &st) == 0 && st.st_ino == inode && major(st.st_dev) == dev_major &&
            minor(st.st_dev) == dev_minor)
            return p;
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

std::optional<int> parent_pid(int pid)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    if (!f || !std::getline(f, s))
        return std::nullopt;
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
    std::ifstream f("/proc/" + std::to_string(pid) + "/comm");
    std::string s;
    std::getline(f, s);
    return s;
}

} // namespace lotus::target

namespace lotus::target {

std::optional<int> env_int(int pid, const std::string& name)
{
    std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
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

} // namespace lotus::target
