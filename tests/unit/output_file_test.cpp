// Output files appear complete or not at all, never through a link, and fail alone with their reason.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>
#include <zlib.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/output_file.h"

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
        common::OutputFile out(path);
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
        common::OutputFile out(path);
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
        common::OutputFile out(path);
        out.write(std::string(1 << 20, 'x')); // past the buffer: really written to the temporary
    } // destroyed without commit: a failed run
    EXPECT_EQ(slurp(path), "previous");
    EXPECT_EQ(d.entries(), std::vector<std::string>{"trace.json"});
    {
        common::OutputFile out(d / "new.json");
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
        common::OutputFile out(path, {true, "-o"}, [&](const std::string& l) { told.push_back(l); });
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
        common::OutputFile out(path, {gz, "x"});
        out.write("hello");
        ASSERT_TRUE(out.commit());
        auto text = slurp(path);
        EXPECT_EQ(gz, text.size() > 2 && static_cast<unsigned char>(text[0]) == 0x1f) << path;
    }
}

TEST(OutputFile, EmptyPathAndDevNullKeepNothing)
{
    for (const char* path : {"", "/dev/null"}) {
        common::OutputFile out(path);
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
        common::OutputFile out(d / "t.json");
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

namespace {

// A file system of 20 MiB with 3 MiB free before the file (1 MiB of it the 5 % reserve): the file's own size
// is what it uses, so that the cut is exact and the same on any machine.
struct SmallFs {
    static constexpr uint64_t kTotal = 20 << 20, kFree = 3 << 20;
    common::OutputCuts cuts; // the run's
    // An output's options on this file system.
    common::OutputOptions on(const char* what, double reserve_pct = common::kDefaultDiskReserve)
    {
        return {true, what, 0666, reserve_pct, &cuts, [](int fd, common::FsSpace& s) {
                    struct stat st{};
                    fstat(fd, &st);
                    s = {kFree - static_cast<uint64_t>(st.st_size), kTotal};
                    return true;
                }};
    }
    static uint64_t free_after(const std::string& path) { return kFree - fs::file_size(path); }
};

std::string gunzip(const std::string& path)
{
    gzFile f = gzopen(path.c_str(), "rb");
    std::string text;
    char buf[65536];
    for (int n; f && (n = gzread(f, buf, sizeof(buf))) > 0;)
        text.append(buf, static_cast<size_t>(n));
    if (f)
        gzclose(f);
    return text;
}

} // namespace

// At the reserve an output that may be cut stops growing, keeps whole writes only and gets its writer's tail.
TEST(OutputFile, CutAtTheDiskReserveKeepsWholeWritesAndTheTail)
{
    TempDir d;
    SmallFs small;
    auto path = d / "trace.json";
    common::OutputFile out(path, small.on("-o"));
    out.allow_cut(1000);
    std::string chunk = "[" + std::string(100 << 10, 'x') + "]";
    for (int i = 0; i < 100; i++)
        out.write(chunk);
    EXPECT_TRUE(out.cut());
    out.write_tail("END");
    ASSERT_TRUE(out.commit());
    EXPECT_FALSE(out.failed());
    auto text = slurp(path);
    ASSERT_GT(text.size(), 3u);
    EXPECT_EQ(text.substr(text.size() - 3), "END");
    std::string body = text.substr(0, text.size() - 3);
    EXPECT_EQ(body.size() % chunk.size(), 0u); // whole writes
    EXPECT_GT(body.size(), 1u << 20);          // most of the room used
    EXPECT_GE(SmallFs::free_after(path), SmallFs::kTotal / 20); // never into the reserve
    auto cuts = small.cuts.list();
    ASSERT_EQ(cuts.size(), 1u);
    EXPECT_EQ(cuts.back().what, "-o");
    EXPECT_EQ(cuts.back().path, path);
    EXPECT_NE(cuts.back().why.find("would fall below 5 %"), std::string::npos) << cuts.back().why;
}

// The reserve is each output's own (OutputOptions::reserve_pct, --disk-reserve), not the process's: side by side
// on the same file system, one with 10 % is not written where one with none takes 2 MiB.
TEST(OutputFile, EachOutputKeepsItsOwnReserve)
{
    TempDir d;
    SmallFs small;
    std::vector<std::string> told;
    auto keep = [&](const std::string& l) { told.push_back(l); };
    common::OutputFile ten(d / "ten.json", small.on("--summary-json", 10), keep);
    common::OutputFile none(d / "none.json", small.on("--html", 0), keep);
    ten.write(std::string(2 << 20, 'x')); // 1 MiB would be left: under 10 % of 20 MiB
    none.write(std::string(2 << 20, 'y'));
    EXPECT_FALSE(ten.commit());
    EXPECT_TRUE(none.commit());
    ASSERT_EQ(told.size(), 1u);
    EXPECT_NE(told[0].find("--summary-json"), std::string::npos) << told[0];
    EXPECT_NE(told[0].find("would fall below 10 %"), std::string::npos) << told[0];
    EXPECT_EQ(fs::file_size(d / "none.json"), 2u << 20);
}

// An output its writer cannot complete (the summary JSON) is not written at all rather than cut.
TEST(OutputFile, AnOutputThatCannotBeCutFailsAtTheReserve)
{
    TempDir d;
    SmallFs small;
    auto path = d / "summary.json";
    spit(path, "previous");
    std::vector<std::string> told;
    common::OutputFile out(path, small.on("--summary-json"), [&](const std::string& l) { told.push_back(l); });
    out.write(std::string(4 << 20, 'x'));
    EXPECT_FALSE(out.commit());
    ASSERT_EQ(told.size(), 1u);
    EXPECT_NE(told[0].find("--disk-reserve"), std::string::npos) << told[0];
    EXPECT_EQ(slurp(path), "previous");
}

// gzip: the compressed size is what counts, and a cut stream is still a whole gzip file.
TEST(OutputFile, GzipCutAtTheReserveIsAWholeStream)
{
    TempDir d;
    SmallFs small;
    auto path = d / "trace.json.gz";
    common::OutputFile out(path, small.on("-o"));
    out.allow_cut(1000);
    uint32_t x = 12345;
    std::string all;
    int writes = 0;
    while (!out.cut() && writes < 10000) { // pseudo-random digits: about 2.3:1
        std::string w;
        for (int i = 0; i < 10000; i++)
            w += static_cast<char>('0' + (x = x * 1103515245 + 12345) % 10);
        w += '\n';
        all += w;
        out.write(w);
        writes++;
    }
    ASSERT_TRUE(out.cut());
    EXPECT_GT(all.size(), 3u << 20); // more than fits uncompressed
    out.write_tail("END");
    ASSERT_TRUE(out.commit());
    auto text = gunzip(path);
    ASSERT_GT(text.size(), 3u);
    EXPECT_EQ(text.substr(text.size() - 3), "END");
    std::string body = text.substr(0, text.size() - 3);
    EXPECT_EQ(body, all.substr(0, body.size())); // what it kept, as written
    EXPECT_EQ(body.back(), '\n');
    EXPECT_GT(body.size(), 2u << 20);
    EXPECT_GE(SmallFs::free_after(path), SmallFs::kTotal / 20);
}

// The same through a real file system of 1 MiB (a tmpfs), where there is one to mount.
TEST(OutputFile, CutOnARealSmallFileSystem)
{
    if (geteuid() != 0)
        GTEST_SKIP() << "needs root, to mount a tmpfs";
    TempDir d;
    auto mnt = d / "mnt";
    fs::create_directories(mnt);
    if (system(("mount -t tmpfs -o size=1m tmpfs " + mnt + " 2>/dev/null").c_str()) != 0)
        GTEST_SKIP() << "cannot mount a tmpfs here";
    auto path = mnt + "/trace.json";
    {
        common::OutputFile out(path, {true, "-o"});
        out.allow_cut(100);
        for (int i = 0; i < 200; i++)
            out.write(std::string(10 << 10, 'x'));
        EXPECT_TRUE(out.cut());
        out.write_tail("END");
        EXPECT_TRUE(out.commit());
    }
    struct statvfs v{};
    ASSERT_EQ(statvfs(mnt.c_str(), &v), 0);
    EXPECT_GE(static_cast<double>(v.f_bavail) / static_cast<double>(v.f_blocks), 0.05);
    auto text = slurp(path);
    EXPECT_EQ(text.substr(text.size() - 3), "END");
    EXPECT_EQ((text.size() - 3) % (10 << 10), 0u);
    system(("umount " + mnt).c_str());
}
