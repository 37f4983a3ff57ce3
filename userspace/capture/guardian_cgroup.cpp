#include "guardian_cgroup.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <sstream>

#include "common/read_file.h"

namespace lotus::capture {

namespace {

std::vector<std::string> split(const std::string& text, char sep)
{
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string item; std::getline(in, item, sep);)
        out.push_back(item);
    return out;
}

// mountinfo escapes a space, tab, newline and backslash in a path as \ooo.
std::string unescape(const std::string& s)
{
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3') {
            out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
        } else {
            out += s[i];
        }
    }
    return out;
}

// Whether cgroup path a is b or below it.
bool within(const std::string& a, const std::string& b)
{
    return a == b || b == "/" || a.rfind(b + "/", 0) == 0;
}

// A path outside the reader's cgroup namespace ("/../x") names no directory here.
bool visible(const std::string& p) { return p.find("/..") == std::string::npos; }

std::string parent(const std::string& p)
{
    auto slash = p.rfind('/');
    return slash == 0 || slash == std::string::npos ? "/" : p.substr(0, slash);
}

// Whether a mount shows the hierarchy of a /proc/PID/cgroup line: cgroup2 for "", else a v1 mount whose options
// hold each of the line's controllers ("cpu,cpuacct" on "rw,cpu,cpuacct").
bool shows(const CgroupMount& m, const std::string& controllers)
{
    if (controllers.empty() || m.controllers.empty())
        return controllers.empty() && m.controllers.empty();
    auto options = split(m.controllers, ',');
    for (const auto& c : split(controllers, ','))
        if (std::find(options.begin(), options.end(), c) == options.end())
            return false;
    return true;
}

// One write(2) of the pid, as the kernel wants it; the error's text, or empty.
std::string join(const std::string& procs, pid_t pid)
{
    std::string text = std::to_string(pid);
    int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return strerror(errno);
    std::string err = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) ? "" : strerror(errno);
    close(fd);
    return err;
}

// The guardian into the first of the candidates that takes it, in the hierarchy mounted at m.
GuardianCgroup place_in(const CgroupMount& m, GuardianCgroup g, pid_t guardian)
{
    g.guardian = g.tracer;
    auto candidates = guardian_candidates(g.tracer, g.job, m.root);
    if (candidates.empty()) {
        g.why = g.job == g.tracer ? "the job's cgroup is the tracer's" : "the job's cgroup is within the tracer's";
        return g;
    }
    std::string refused; // the first refusal's reason
    for (const auto& c : candidates) {
        std::string err = join(m.dir + (m.root == "/" ? c : c.substr(m.root.size())) + "/cgroup.procs", guardian);
        if (err.empty()) {
            g.guardian = c;
            if (c != g.job)
                g.why = refused.empty() ? "the job's cgroup is not visible here"
                                        : fmt::format("the job's cgroup refused it: {}", refused);
            return g;
        }
        if (refused.empty())
            refused = err;
    }
    g.stuck = true;
    g.why = fmt::format("the job's cgroup and those above it refused it: {}", refused);
    return g;
}

} // namespace

std::vector<CgroupLine> parse_proc_cgroup(const std::string& text)
{
    std::vector<CgroupLine> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        auto a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b != std::string::npos)
            lines.push_back({line.substr(a + 1, b - a - 1), line.substr(b + 1)});
    }
    return lines;
}

std::vector<CgroupMount> parse_cgroup_mounts(const std::string& mountinfo)
{
    std::vector<CgroupMount> mounts;
    std::istringstream in(mountinfo);
    for (std::string line; std::getline(in, line);) {
        auto dash = line.find(" - ");
        if (dash == std::string::npos)
            continue;
        std::istringstream left(line.substr(0, dash)), right(line.substr(dash + 3));
        std::string id, parent_id, dev, root, dir, fstype, source, options;
        if (!(left >> id >> parent_id >> dev >> root >> dir) || !(right >> fstype >> source >> options))
            continue;
        if (fstype == "cgroup2")
            mounts.push_back({"", unescape(root), unescape(dir)});
        else if (fstype == "cgroup")
            mounts.push_back({options, unescape(root), unescape(dir)});
    }
    return mounts;
}

std::vector<std::string> guardian_candidates(const std::string& tracer, const std::string& job,
                                             const std::string& mount_root)
{
    std::vector<std::string> out;
    if (within(job, tracer))
        return out;
    for (std::string p = job;; p = parent(p)) {
        if (visible(p) && within(p, mount_root) && !within(p, tracer))
            out.push_back(p);
        if (p == "/")
            break;
    }
    // The job's cgroup out of this mount's sight: the hierarchy's root as mounted here.
    if ((out.empty() || out.back() != mount_root) && !within(mount_root, tracer))
        out.push_back(mount_root);
    return out;
}

std::vector<GuardianCgroup> place_guardian(pid_t guardian, pid_t job)
{
    std::vector<GuardianCgroup> placed;
    auto own = parse_proc_cgroup(common::read_file("/proc/self/cgroup").value_or(""));
    auto jobs_text = common::read_file("/proc/" + std::to_string(job) + "/cgroup");
    auto jobs = parse_proc_cgroup(jobs_text.value_or(""));
    auto mounts = parse_cgroup_mounts(common::read_file("/proc/self/mountinfo").value_or(""));
    for (const auto& line : own) {
        GuardianCgroup g;
        g.hierarchy = line.controllers.empty() ? "cgroup2" : line.controllers;
        g.tracer = g.guardian = line.path;
        for (const auto& j : jobs)
            if (j.controllers == line.controllers)
                g.job = j.path;
        const CgroupMount* mount = nullptr;
        for (const auto& m : mounts)
            if (!mount && shows(m, line.controllers) && within(line.path, m.root))
                mount = &m;
        if (g.job.empty()) {
            g.stuck = true;
            g.why = jobs_text ? "the job is in no cgroup of it" : "the job's cgroups cannot be read";
        } else if (!mount) {
            g.stuck = !within(g.job, g.tracer);
            g.why = "not mounted here";
        } else {
            g = place_in(*mount, g, guardian);
        }
        placed.push_back(std::move(g));
    }
    return placed;
}

std::optional<std::string> stuck_note(const std::vector<GuardianCgroup>& placed)
{
    std::string where;
    for (const auto& g : placed)
        if (g.stuck)
            where += fmt::format("{}{} {} ({})", where.empty() ? "" : "; ", g.hierarchy, g.tracer, g.why);
    if (where.empty())
        return std::nullopt;
    return fmt::format("the guardian could not leave the tracer's cgroup for the job's ({}): if that cgroup is "
                       "killed whole, the tracer and the guardian die together and a child held then stays stopped",
                       where);
}

} // namespace lotus::capture
