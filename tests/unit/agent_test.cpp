// lotus-bpf agent's choices that need no BPF: whose jobs it takes (--users, --cgroup), a failure that is file
// descriptors running out, and its record directory kept within a size (--record-max-mb).
#include <gtest/gtest.h>

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <stdexcept>

#include "cli/agent.h"

using namespace lotus;
namespace fs = std::filesystem;

TEST(Agent, UsersAreNamesOrUidsAndAnUnknownNameIsRefused)
{
    EXPECT_EQ(cli::parse_users({"root"}), (std::vector<uint32_t>{0}));
    EXPECT_EQ(cli::parse_users({"0", "65534", "4000000"}), (std::vector<uint32_t>{0, 65534, 4000000}));
    if (passwd* pw = getpwnam("nobody")) // (Debian's: 65534)
        EXPECT_EQ(cli::parse_users({"root", "nobody"}), (std::vector<uint32_t>{0, pw->pw_uid}));
    EXPECT_TRUE(cli::parse_users({}).empty());
    EXPECT_THROW(cli::parse_users({"root", "no-such-user-lotus"}), std::invalid_argument);
    EXPECT_THROW(cli::parse_users({""}), std::invalid_argument);
    EXPECT_THROW(cli::parse_users({"99999999999999999999"}), std::invalid_argument);
    EXPECT_THROW(cli::parse_users({"4294967295"}), std::invalid_argument); // ((uid_t)-1: no user)
    try {
        cli::parse_users({"no-such-user-lotus"});
    } catch (const std::invalid_argument& e) {
        EXPECT_STREQ(e.what(), "no-such-user-lotus: no such user");
    }
}

TEST(Agent, ACgroupPrefixIsAbsoluteAndCleanAndMatchesWholeComponentsInAnyHierarchy)
{
    EXPECT_EQ(cli::cgroup_prefix("/slurm/uid_1000/job_42/"), "/slurm/uid_1000/job_42");
    EXPECT_EQ(cli::cgroup_prefix("//kubepods.slice//x"), "/kubepods.slice/x");
    EXPECT_EQ(cli::cgroup_prefix("/"), "/");
    EXPECT_THROW(cli::cgroup_prefix("slurm/job_42"), std::invalid_argument);
    EXPECT_THROW(cli::cgroup_prefix(""), std::invalid_argument);
    EXPECT_THROW(cli::cgroup_prefix("/slurm/../system.slice"), std::invalid_argument);
    EXPECT_THROW(cli::cgroup_prefix("/sys/fs/cgroup/slurm"), std::invalid_argument);

    const std::string v2 = "0::/slurm/uid_1000/job_42/step_0/user/task_0\n";
    EXPECT_TRUE(cli::in_cgroups(v2, {"/slurm/uid_1000/job_42"}));
    EXPECT_TRUE(cli::in_cgroups(v2, {"/slurm/uid_1000/job_42/step_0/user/task_0"})); // itself
    EXPECT_FALSE(cli::in_cgroups(v2, {"/slurm/uid_1000/job_4"}));                    // not a component
    EXPECT_FALSE(cli::in_cgroups(v2, {"/kubepods.slice", "/system.slice"}));
    EXPECT_TRUE(cli::in_cgroups(v2, {"/kubepods.slice", "/slurm"}));
    EXPECT_TRUE(cli::in_cgroups(v2, {"/"}));
    // v1: each controller's hierarchy has a line; a match in any one is enough.
    const std::string v1 = "12:memory:/slurm/uid_1000/job_7/step_batch\n"
                           "11:cpu,cpuacct:/slurm/uid_1000/job_7\n"
                           "1:name=systemd:/system.slice/slurmd.service\n";
    EXPECT_TRUE(cli::in_cgroups(v1, {"/slurm/uid_1000/job_7/step_batch"}));
    EXPECT_TRUE(cli::in_cgroups(v1, {"/system.slice"}));
    EXPECT_FALSE(cli::in_cgroups(v1, {"/slurm/uid_1000/job_8"}));
    EXPECT_TRUE(cli::in_cgroups("0::/a:b/c\n", {"/a:b"})); // (a path may hold ':')
    EXPECT_FALSE(cli::in_cgroups("", {"/"}));              // (gone: nothing to match)
}

TEST(Agent, TheRealUidIsStatussFirstUidField)
{
    EXPECT_EQ(cli::real_uid("Name:\tpython3\nUmask:\t0022\nState:\tS\nUid:\t1000\t0\t0\t0\nGid:\t100\t100\t100\t100\n"),
              1000u);
    EXPECT_EQ(cli::real_uid("Name:\tx\n"), std::nullopt);
    EXPECT_EQ(cli::real_uid(""), std::nullopt);
}

TEST(Agent, AFailureIsOutOfFileDescriptorsOnlyWhenItSaysSo)
{
    EXPECT_TRUE(cli::out_of_fds(fmt::format("cannot open the ring buffer: {}", strerror(EMFILE))));
    EXPECT_TRUE(cli::out_of_fds(fmt::format("cannot attach: {}", strerror(ENFILE))));
    EXPECT_FALSE(cli::out_of_fds(fmt::format("cannot open the ring buffer: {}", strerror(EPERM))));
    EXPECT_FALSE(cli::out_of_fds("PID 7 exited while lotus-bpf was attaching"));
}

namespace {

struct RecordDir {
    fs::path dir = fs::temp_directory_path() / fmt::format("lotus-record-budget-{}", getpid());
    RecordDir()
    {
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    ~RecordDir() { fs::remove_all(dir); }
    void write(const std::string& name, size_t bytes, char c = 'r') const
    {
        std::ofstream(dir / name, std::ios::binary) << std::string(bytes, c);
    }
    bool has(const std::string& name) const { return fs::exists(fs::symlink_status(dir / name)); }
};

} // namespace

TEST(Agent, RecordDirWithinItsSizeOldestFirstAndOnlyTheAgentsOwnFiles)
{
    RecordDir d;
    d.write("old-1.lbt", 400);
    d.write("foreign-1.lbt", 5000); // in the agent's pattern, but not written by it: never deleted, never counted
    d.write("notes.txt", 5000);
    cli::RecordBudget b(d.dir.string(), 1000);
    b.add("old-1.lbt");
    d.write("mid-1.lbt", 400);
    b.add("mid-1.lbt");
    EXPECT_EQ(b.bytes(), 800u);
    EXPECT_TRUE(b.enforce().empty()); // within: nothing goes
    d.write("new-1.lbt", 400);
    b.add("new-1.lbt");
    auto removed = b.enforce();
    ASSERT_EQ(removed.size(), 1u);
    EXPECT_EQ(removed[0].name, "old-1.lbt");
    EXPECT_EQ(removed[0].bytes, 400u);
    EXPECT_FALSE(d.has("old-1.lbt"));
    for (const char* kept : {"mid-1.lbt", "new-1.lbt", "foreign-1.lbt", "notes.txt"})
        EXPECT_TRUE(d.has(kept)) << kept;
    EXPECT_EQ(b.bytes(), 800u);
    // The notes: the agent's own, 0600.
    struct stat st{};
    ASSERT_EQ(lstat((d.dir / cli::RecordBudget::kNotes).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);

    // A noted file replaced by another (a new inode at its name) or rewritten is no longer the agent's: forgotten,
    // never deleted. A name outside the pattern or a link is not noted at all.
    fs::remove(d.dir / "mid-1.lbt");
    d.write("mid-1.lbt", 900, 'x');
    d.write("new-2.lbt", 500);
    b.add("new-2.lbt");
    fs::create_symlink(d.dir / "foreign-1.lbt", d.dir / "link-1.lbt");
    b.add("link-1.lbt");
    b.add("notes.txt");
    b.add("../escape.lbt");
    removed = b.enforce();
    ASSERT_EQ(removed.size(), 0u); // mid-1 forgotten: 400 + 500 fit
    EXPECT_EQ(b.files(), 2u);
    EXPECT_EQ(b.bytes(), 900u);
    EXPECT_TRUE(d.has("mid-1.lbt"));
    EXPECT_TRUE(d.has("foreign-1.lbt"));

    // A later run takes the notes up; a smaller size deletes the oldest first, the newest last.
    cli::RecordBudget later(d.dir.string(), 600);
    EXPECT_EQ(later.files(), 2u);
    removed = later.enforce();
    ASSERT_EQ(removed.size(), 1u);
    EXPECT_EQ(removed[0].name, "new-1.lbt");
    EXPECT_TRUE(d.has("new-2.lbt"));
    cli::RecordBudget tiny(d.dir.string(), 100);
    removed = tiny.enforce();
    ASSERT_EQ(removed.size(), 1u); // (a record larger than the whole size goes too: the size is kept)
    EXPECT_EQ(removed[0].name, "new-2.lbt");
    for (const char* kept : {"mid-1.lbt", "foreign-1.lbt", "notes.txt", "link-1.lbt"})
        EXPECT_TRUE(d.has(kept)) << kept;
}

TEST(Agent, NotesTheAgentDidNotWriteAreNotTakenUp)
{
    RecordDir d;
    d.write("victim-1.lbt", 800);
    struct stat st{};
    ASSERT_EQ(lstat((d.dir / "victim-1.lbt").c_str(), &st), 0);
    // Notes naming a file exactly as it is, but writable by others: anyone could have written them.
    std::string line = fmt::format("{} {} {} victim-1.lbt\n", st.st_ino, st.st_size,
                                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec);
    std::ofstream(d.dir / cli::RecordBudget::kNotes) << line;
    chmod((d.dir / cli::RecordBudget::kNotes).c_str(), 0666);
    cli::RecordBudget b(d.dir.string(), 100);
    EXPECT_EQ(b.files(), 0u);
    EXPECT_TRUE(b.enforce().empty());
    EXPECT_TRUE(d.has("victim-1.lbt"));
    // The same notes, the agent's own (0600): taken up, and the file is then the agent's to delete. (The positive
    // control of the case above.)
    fs::remove(d.dir / cli::RecordBudget::kNotes);
    std::ofstream(d.dir / cli::RecordBudget::kNotes) << line << "1 2 3 ../../etc/passwd\n";
    chmod((d.dir / cli::RecordBudget::kNotes).c_str(), 0600);
    cli::RecordBudget c(d.dir.string(), 100);
    EXPECT_EQ(c.files(), 1u);
    EXPECT_EQ(c.enforce().size(), 1u);
    EXPECT_FALSE(d.has("victim-1.lbt"));
    // A link at the notes' name is not followed.
    fs::remove(d.dir / cli::RecordBudget::kNotes);
    d.write("target-1.lbt", 10);
    fs::create_symlink(d.dir / "target-1.lbt", d.dir / cli::RecordBudget::kNotes);
    EXPECT_THROW(cli::RecordBudget(d.dir.string(), 100), std::runtime_error);
    EXPECT_TRUE(d.has("target-1.lbt"));
}
