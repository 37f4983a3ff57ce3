// Which processes are the agent's jobs: its --match globs, --users and --cgroup filters, and a run that failed for
// want of file descriptors.
#include "agent.h"

#include <fnmatch.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "common/printable.h"

namespace lotus::cli {

std::vector<uint32_t> parse_users(const std::vector<std::string>& names)
{
    std::vector<uint32_t> out;
    for (const auto& name : names) {
        if (name.empty())
            throw std::invalid_argument("an empty user name");
        if (name.find_first_not_of("0123456789") == std::string::npos) {
            errno = 0;
            char* end = nullptr;
            unsigned long uid = strtoul(name.c_str(), &end, 10);
            if (errno || *end || uid >= static_cast<unsigned long>(static_cast<uid_t>(-1)))
                throw std::invalid_argument(fmt::format("{}: no uid", name));
            out.push_back(static_cast<uint32_t>(uid));
            continue;
        }
        passwd pw{}, *found = nullptr;
        std::vector<char> buf(16384);
        if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found)
            throw std::invalid_argument(fmt::format("{}: no such user", common::printable(name)));
        out.push_back(found->pw_uid);
    }
    return out;
}

std::string cgroup_prefix(const std::string& path)
{
    if (path.empty() || path[0] != '/')
        throw std::invalid_argument(fmt::format("{}: a cgroup path starts with '/' (as /proc/PID/cgroup shows it)",
                                                common::printable(path)));
    if (path == "/sys/fs/cgroup" || path.rfind("/sys/fs/cgroup/", 0) == 0)
        throw std::invalid_argument(fmt::format("{}: give the cgroup's path as /proc/PID/cgroup shows it, not where "
                                                "its hierarchy is mounted", common::printable(path)));
    std::string out;
    for (size_t at = 1; at <= path.size();) {
        size_t end = std::min(path.find('/', at), path.size());
        std::string part = path.substr(at, end - at);
        if (part == "." || part == "..")
            throw std::invalid_argument(fmt::format("{}: no '.' or '..' in a cgroup path", common::printable(path)));
        if (!part.empty())
            out += "/" + part;
        at = end + 1;
    }
    return out.empty() ? "/" : out;
}

bool in_cgroups(const std::string& proc_cgroup, const std::vector<std::string>& prefixes)
{
    std::istringstream in(proc_cgroup);
    for (std::string line; std::getline(in, line);) {
        // hierarchy-ID:controllers:path (the path may hold ':')
        size_t first = line.find(':');
        size_t second = first == std::string::npos ? first : line.find(':', first + 1);
        if (second == std::string::npos)
            continue;
        std::string path = line.substr(second + 1);
        for (const auto& p : prefixes)
            if (p == "/" || path == p || (path.size() > p.size() && path.compare(0, p.size(), p) == 0 &&
                                          path[p.size()] == '/'))
                return true;
    }
    return false;
}

std::optional<uint32_t> real_uid(const std::string& status)
{
    std::istringstream in(status);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("Uid:", 0) != 0)
            continue;
        std::istringstream fields(line.substr(4));
        unsigned long uid = 0;
        if (fields >> uid)
            return static_cast<uint32_t>(uid);
        return std::nullopt;
    }
    return std::nullopt;
}

bool out_of_fds(const std::string& reason)
{
    return reason.find(strerror(EMFILE)) != std::string::npos || reason.find(strerror(ENFILE)) != std::string::npos;
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

} // namespace lotus::cli
