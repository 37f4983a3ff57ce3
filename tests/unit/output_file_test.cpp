// Output files appear complete or not at all, never through a link, and fail alone with their reason.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "export/output_file.h"

using namespace lotus;
namespace fs = std::filesystem;

namespace {

struct TempDir {
    fs::path dir;
    TempDir() : dir(fs::temp_directory_path() / ("lotus-out-" + std::to_string(getpid())))
    {
        fs::remove_all(dir);
        fs::create_directories(dir);
    }
    ~TempDir() { fs::remove_all(dir); }
    std::string operator/(const std::string& name) const { return (dir / name).string(); }
    std::vector<std::string> entries() const
    {
        std::vector<std::string> out;
        for (const auto& e : fs::directory_iterator(dir))
            out.push_back(e.path().filename().string());
        std::sort(out.begin(), out.end());
        return out;
    }
};

std::string slurp(const std::string& path)
{
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string refusal(const std::string& path)
{
    try {
        exporter::OutputFile out(path);
    } catch (const std::runtime_error& e) {
        std::string msg = e.what();
        EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        return msg;
    }
    ADD_FAILURE() << path << " was accepted";
    return "";
}

} // namespace

TEST(OutputFile, AppearsOnlyWhenCommitted)
{
    TempDir d;
    auto path = d / "trace.json";
    spit(path, "previous");
    {
        exporter::OutputFile out(path);
        out.write("new contents");
        EXPECT_EQ(slurp(path), "previous"); // while it is written, the old file stays
        EXPECT_TRUE(out.commit());
    }
    EXPECT_EQ(slurp(path), "new contents");
    EXPECT_EQ(d.entries(), std::vector<std::string>{"trace.json"}); // no temporary left
}

TEST(OutputFile, AbandonedRunKeepsThePreviousFile)
{
    TempDir d;
    auto path = d / "trace.json";
    spit(path, "previous");
    {
        exporter::OutputFile out(path);
        out.write(std::string(1 << 20, 'x')); // past the buffer: really written to the temporary
    } // destroyed without commit: a failed run
    EXPECT_EQ(slurp(path), "previous");
    EXPECT_EQ(d.entries(), std::vector<std::string>{"trace.json"});
    {
        exporter::OutputFile out(d / "new.json");
        out.write("x");
        out.abandon();
        EXPECT_FALSE(fs::exists(d / "new.json"));
    }
    EXPECT_EQ(d.entries(), std::vector<std::string>{"trace.json"});
}

TEST(OutputFile, NeverWritesThroughALink)
{
    TempDir d;
    auto target = d / "victim";
    spit(target, "precious");
    auto link = d / "trace.json";
    fs::create_symlink(target, link);
    EXPECT_NE(refusal(link).find("symbolic link"), std::string::npos);
    EXPECT_EQ(slurp(target), "precious");
    auto dangling = d / "dangling.json";
    fs::create_symlink(d / "nowhere", dangling);
    refusal(dangling);
    EXPECT_FALSE(fs::exists(d / "nowhere"));
    EXPECT_TRUE(fs::is_symlink(dangling));
}

TEST(OutputFile, RefusesWhatIsNotARegularFile)
{
    TempDir d;
    auto fifo = d / "fifo";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_NE(refusal(fifo).find("a FIFO"), std::string::npos); // at once: a FIFO without reader never blocks us
    EXPECT_NE(refusal(d.dir.string()).find("a directory"), std::string::npos);
    EXPECT_NE(refusal("/dev/zero").find("a device"), std::string::npos);
    EXPECT_NE(refusal("/nonexistent-dir/trace.json").find("No such file or directory"), std::string::npos);
}

TEST(OutputFile, AFailedWriteIsToldOnceWithItsReasonAndKeepsThePreviousFile)
{
    TempDir d;
    auto path = d / "trace.json";
    spit(path, "previous");
    std::vector<std::string> told;
    {
        exporter::OutputFile out(path, {true, "-o"}, [&](const std::string& l) { told.push_back(l); });
        // A file size limit fails writes with EFBIG, as a full disk fails them with ENOSPC.
        rlimit old{};
        getrlimit(RLIMIT_FSIZE, &old);
        auto old_handler = signal(SIGXFSZ, SIG_IGN);
        rlimit small{64 << 10, old.rlim_max};
        ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
        for (int i = 0; i < 8; i++)
            out.write(std::string(256 << 10, 'x'));
        bool committed = out.commit();
        setrlimit(RLIMIT_FSIZE, &old);
        signal(SIGXFSZ, old_handler);
        EXPECT_FALSE(committed);
        EXPECT_TRUE(out.failed());
    }
    ASSERT_EQ(told.size(), 1u);
    EXPECT_NE(told[0].find("-o " + path), std::string::npos) << told[0];
    EXPECT_NE(told[0].find(strerror(EFBIG)), std::string::npos) << told[0];
    EXPECT_EQ(slurp(path), "previous");
    EXPECT_EQ(d.entries(), std::vector<std::string>{"trace.json"});
}

TEST(OutputFile, GzipByNameOnlyWhenAsked)
{
    TempDir d;
    for (bool gz : {true, false}) {
        auto path = d / (gz ? "a.json.gz" : "b.lbt.gz");
        exporter::OutputFile out(path, {gz, "x"});
        out.write("hello");
        ASSERT_TRUE(out.commit());
        auto text = slurp(path);
        EXPECT_EQ(gz, text.size() > 2 && static_cast<unsigned char>(text[0]) == 0x1f) << path;
    }
}

TEST(OutputFile, EmptyPathAndDevNullKeepNothing)
{
    for (const char* path : {"", "/dev/null"}) {
        exporter::OutputFile out(path);
        out.write("x");
        EXPECT_TRUE(out.discards());
        EXPECT_TRUE(out.commit());
    }
    struct stat st{};
    ASSERT_EQ(stat("/dev/null", &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)); // untouched
}

TEST(OutputFile, BelongsToTheSudoUser)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root (CI runs the tests as root)";
    TempDir d;
    setenv("SUDO_UID", "4321", 1);
    setenv("SUDO_GID", "8765", 1);
    {
        exporter::OutputFile out(d / "t.json");
        out.write("x");
        EXPECT_TRUE(out.commit());
    }
    unsetenv("SUDO_UID");
    unsetenv("SUDO_GID");
    struct stat st{};
    ASSERT_EQ(stat((d / "t.json").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4321u);
    EXPECT_EQ(st.st_gid, 8765u);
}
