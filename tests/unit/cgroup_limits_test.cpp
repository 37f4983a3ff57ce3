// launch::read_process_cgroup: a process's cgroup limits and throttling, read from outside, against the cgroup files
// the test reads (or writes) itself.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "launch/cgroup.h"

using namespace lotus;

namespace {

std::string slurp(const std::string& path)
{
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return in ? s.str() : std::string();
}

bool write_text(const std::string& path, const std::string& text)
{
    std::ofstream out(path);
    out << text;
    out.flush();
    return static_cast<bool>(out);
}

// This process's path in the v1 hierarchy of `controller`, from /proc/self/cgroup; "" where there is none.
std::string v1_path(const std::string& controller)
{
    std::istringstream in(slurp("/proc/self/cgroup"));
    for (std::string line; std::getline(in, line);) {
        auto a = line.find(':'), b = line.find(':', a + 1);
        std::string ctrls = "," + line.substr(a + 1, b - a - 1) + ",";
        if (ctrls.find("," + controller + ",") != std::string::npos)
            return line.substr(b + 1);
    }
    return "";
}

} // namespace

TEST(CgroupLimits, CpuListsAreCounted)
{
    EXPECT_EQ(launch::count_cpu_list("0-3\n"), 4u);
    EXPECT_EQ(launch::count_cpu_list("0-1,4,6-7"), 5u);
    EXPECT_EQ(launch::count_cpu_list("5"), 1u);
    EXPECT_EQ(launch::count_cpu_list(""), 0u);
    EXPECT_EQ(launch::count_cpu_list("3-1"), 0u);
    EXPECT_EQ(launch::count_cpu_list("x"), 0u);
}

// This process's own memory limit (v1 here), the tightest of its cgroup's and its ancestors', as the files say.
TEST(CgroupLimits, OwnMemoryLimitAsItsFilesSay)
{
    std::string path = v1_path("memory");
    if (path.empty() || slurp("/sys/fs/cgroup/memory/memory.limit_in_bytes").empty())
        GTEST_SKIP() << "no cgroup v1 memory hierarchy here";
    uint64_t tightest = UINT64_MAX;
    for (std::string p = path == "/" ? "" : path;; p = p.substr(0, p.rfind('/'))) {
        std::string t = slurp("/sys/fs/cgroup/memory" + p + "/memory.limit_in_bytes");
        uint64_t v = t.empty() ? 0 : std::stoull(t);
        if (v && v < (1ull << 62))
            tightest = std::min(tightest, v);
        if (p.empty())
            break;
    }
    auto cg = launch::read_process_cgroup(getpid());
    ASSERT_TRUE(cg);
    EXPECT_TRUE(cg->v1);
    EXPECT_TRUE(cg->have_memory);
    EXPECT_EQ(cg->memory_limit, tightest);
    EXPECT_FALSE(launch::read_process_cgroup(-5)); // no such process
}

// A child put in a cgroup of the test's own with a quota of half a CPU and a cpuset of one CPU: both read back;
// in a cgroup below it without a quota of its own, the ancestor's still holds. Its throttling is the cgroup's
// cpu.stat.
TEST(CgroupLimits, AChildsQuotaAndCpusetIncludingAnAncestorsQuota)
{
    const std::string cpu = "/sys/fs/cgroup/cpu", cpuset = "/sys/fs/cgroup/cpuset";
    std::string name = "/lotus-unit-" + std::to_string(getpid());
    std::string cpu_parent = cpu + v1_path("cpu"), cpuset_parent = cpuset + v1_path("cpuset");
    if (cpu_parent.back() == '/')
        cpu_parent.pop_back();
    if (cpuset_parent.back() == '/')
        cpuset_parent.pop_back();
    std::string outer = cpu_parent + name, inner = outer + "/inner", set = cpuset_parent + name;
    if (geteuid() != 0 || mkdir(outer.c_str(), 0755) != 0)
        GTEST_SKIP() << "cannot make a cgroup v1 cpu cgroup here (root, a cpu hierarchy)";
    bool made_set = mkdir(set.c_str(), 0755) == 0;
    ASSERT_EQ(mkdir(inner.c_str(), 0755), 0);
    ASSERT_TRUE(write_text(outer + "/cpu.cfs_period_us", "100000"));
    ASSERT_TRUE(write_text(outer + "/cpu.cfs_quota_us", "50000"));
    if (made_set) {
        ASSERT_TRUE(write_text(set + "/cpuset.mems", slurp(cpuset_parent + "/cpuset.mems")));
        ASSERT_TRUE(write_text(set + "/cpuset.cpus", "0"));
    }
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    ASSERT_TRUE(write_text(outer + "/cgroup.procs", std::to_string(child)));
    if (made_set)
        ASSERT_TRUE(write_text(set + "/cgroup.procs", std::to_string(child)));
    auto cg = launch::read_process_cgroup(child);
    ASSERT_TRUE(cg);
    EXPECT_TRUE(cg->have_quota);
    EXPECT_EQ(cg->quota_us, 50000);
    EXPECT_EQ(cg->period_us, 100000u);
    EXPECT_EQ(cg->path, v1_path("cpu") == "/" ? name : v1_path("cpu") + name);
    EXPECT_TRUE(cg->have_throttle);
    std::string stat = slurp(outer + "/cpu.stat");
    EXPECT_NE(stat.find("nr_throttled " + std::to_string(cg->throttled_periods)), std::string::npos) << stat;
    if (made_set) {
        EXPECT_TRUE(cg->have_cpuset);
        EXPECT_EQ(cg->cpuset, "0");
        EXPECT_EQ(cg->cpuset_cpus, 1u);
    }
    ASSERT_TRUE(write_text(inner + "/cgroup.procs", std::to_string(child)));
    cg = launch::read_process_cgroup(child);
    ASSERT_TRUE(cg);
    EXPECT_EQ(cg->quota_us, 50000); // the ancestor's: it applies
    EXPECT_EQ(cg->path.substr(cg->path.size() - 6), "/inner");
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    rmdir(inner.c_str());
    rmdir(outer.c_str());
    if (made_set)
        rmdir(set.c_str());
}
