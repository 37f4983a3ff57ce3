#include <gtest/gtest.h>

#include <unistd.h>

#include "target/cpython_layouts.h"
#include "target/elf_file.h"
#include "target/interpreter.h"
#include "target/proc_maps.h"

using namespace lotus::target;

TEST(ProcMaps, ParsesPathsWithSpacesAndAnonymousMappings)
{
    auto maps = parse_maps(
        "55d0c0000000-55d0c0021000 r-xp 00001000 fd:01 1234   /usr/bin/python3.11\n"
        "7f00-8f00 rw-p 00000000 00:00 0 \n"
        "7f0000000000-7f0000001000 r-xp 00002000 fd:01 99   /opt/my env/lib/libpython3.11.so.1.0\n"
        "garbage line\n");
    ASSERT_EQ(maps.size(), 3u);
    EXPECT_EQ(maps[0].start, 0x55d0c0000000u);
    EXPECT_EQ(maps[0].offset, 0x1000u);
    EXPECT_EQ(maps[0].perms, "r-xp");
    EXPECT_EQ(maps[0].path, "/usr/bin/python3.11");
    EXPECT_EQ(maps[1].path, "");
    EXPECT_EQ(maps[2].path, "/opt/my env/lib/libpython3.11.so.1.0");
}

TEST(ProcMaps, OwnProcessAndTree)
{
    EXPECT_TRUE(process_exists(getpid()));
    EXPECT_FALSE(process_exists(0));
    EXPECT_EQ(parent_pid(getpid()).value_or(-1), getppid());
    EXPECT_FALSE(read_maps(getpid()).empty());
}

TEST(ElfFile, FindsOwnSymbolsAndFileOffsets)
{
    ElfFile self("/proc/self/exe");
    auto sym = self.symbol("main");
    ASSERT_TRUE(sym);
    EXPECT_TRUE(sym->function);
    auto off = self.file_offset(sym->value);
    ASSERT_TRUE(off);
    EXPECT_LE(*off, sym->value);
    EXPECT_FALSE(self.symbol("no_such_symbol_anywhere"));
}

TEST(ElfFile, RejectsNonElf)
{
    EXPECT_THROW(ElfFile("/proc/self/status"), std::runtime_error);
    EXPECT_THROW(ElfFile("/no/such/file"), std::runtime_error);
}

TEST(Layouts, OneRowPerSupportedVersion)
{
    auto l = layout_for({3, 11, 2});
    ASSERT_TRUE(l);
    EXPECT_EQ(l->frame_code, 32);
    EXPECT_EQ(l->frame_localsplus, 72);
    for (int minor : {10, 11, 12, 13}) {
        auto row = layout_for({3, minor, 0});
        ASSERT_TRUE(row) << minor;
        // exactly one way to find the caller's frame per row
        EXPECT_NE(row->tstate_cframe >= 0, row->tstate_current_frame >= 0) << minor;
        EXPECT_EQ(row->long_tagged, minor >= 12 ? 1u : 0u) << minor;
    }
    EXPECT_FALSE(layout_for({3, 9, 18}));
    EXPECT_FALSE(layout_for({2, 7, 18}));
    EXPECT_FALSE(layout_for({3, 99, 0}));
    EXPECT_NE(supported_versions().find("3.11"), std::string::npos);
}

TEST(Interpreter, DebianPythonIsFound)
{
    if (access("/usr/bin/python3.11", R_OK) != 0)
        GTEST_SKIP() << "no /usr/bin/python3.11 on this machine";
    auto i = find_interpreter_in_executable("/usr/bin/python3.11", "");
    EXPECT_EQ(i.version.major, 3);
    EXPECT_EQ(i.version.minor, 11);
    EXPECT_FALSE(i.shared);
    EXPECT_GT(i.eval_offset, 0u);
}

TEST(Interpreter, NotPythonIsRefused)
{
    try {
        find_interpreter_in_executable("/proc/self/exe", "");
        FAIL();
    } catch (const TargetError& e) {
        EXPECT_NE(std::string(e.what()).find("not a CPython"), std::string::npos);
    }
    EXPECT_THROW(find_interpreter(999999999), TargetError);
}
