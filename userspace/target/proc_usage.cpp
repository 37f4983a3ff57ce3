#include "proc_usage.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace lotus::target {

namespace {

// The whole of a small /proc file (one read: they are generated at open), or nullopt.
std::optional<std::string> slurp(const std::string& path)
{
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return std::nullopt;
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0)
        out.append(buf, static_cast<size_t>(n));
    close(fd);
    if (n < 0)
        return std::nullopt;
    return out;
}

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

} // namespace

std::optional<ProcUsage> read_proc_usage(int pid, bool with_pss)
{
    static const uint64_t tick_ns = 1'000'000'000ull / static_cast<uint64_t>(sysconf(_SC_CLK_TCK));
    std::string dir = "/proc/" + std::to_string(pid);
    auto stat = slurp(dir + "/stat");
    auto status = slurp(dir + "/status");
    if (!stat || !status)
        return std::nullopt;
    // After the command's closing parenthesis: state is field 3, utime 14, stime 15, num_threads 20.
    size_t close = stat->rfind(')');
    if (close == std::string::npos || close + 2 >= stat->size() || (*stat)[close + 2] == 'Z' || (*stat)[close + 2] == 'X')
        return std::nullopt;
    std::vector<uint64_t> fields; // fields[i]: field i + 3 (the state is field 3)
    for (const char* p = stat->c_str() + close + 2; *p;) {
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
    u.rss_kb = field(*status, "VmRSS").value_or(0);
    u.hwm_kb = field(*status, "VmHWM").value_or(0);
    if (auto io = slurp(dir + "/io")) {
        u.read_bytes = field(*io, "read_bytes").value_or(0);
        u.write_bytes = field(*io, "write_bytes").value_or(0);
    }
    // /proc/PID/status counts the main thread's switches only: each thread's are summed.
    if (DIR* d = opendir((dir + "/task").c_str())) {
        while (dirent* e = readdir(d)) {
            if (e->d_name[0] == '.')
                continue;
            if (auto ts = slurp(dir + "/task/" + e->d_name + "/status")) {
                u.nvcsw += field(*ts, "voluntary_ctxt_switches").value_or(0);
                u.nivcsw += field(*ts, "nonvoluntary_ctxt_switches").value_or(0);
            }
        }
        closedir(d);
    }
    if (with_pss)
        if (auto rollup = slurp(dir + "/smaps_rollup"))
            u.pss_kb = field(*rollup, "Pss");
    return u;
}

} // namespace lotus::target
