#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <set>
#include <tuple>

#include "cpython/cpython_layouts.h"
#include "elf/elf_file.h"
#include "cpython/interpreter.h"
#include "proc/proc_maps.h"
#include "cpython/builtin_functions.h"
#include "cpython/slot_functions.h"

using namespace lotus::cpython;
using namespace lotus::elf;
using namespace lotus::proc;

TEST(ProcMaps, ParsesPathsWithSpacesAndAnonymousMappings)
{
    auto maps = parse_maps(
        "55d0c0000000-55d0c0021000 r-xp 00001000 fd:01 1234   /usr/bin/python3.11\n"
        "7f00-8f00 rw-p 00000000 00:00 0 \n"
        "7f0000000000-7f0000001000 r-xp 00002000 fd:01 99   /opt/my env/lib/libpython3.11.so.1.0\n"
        "garbage line\n"
        "7f0000002000-7f0000003000 r--p 00000000 00:00 0\n" // no path, not even the space before one
        "7f0000004000-7f0000005000 rw-p 00000000 08:1f 77 [heap]");
    ASSERT_EQ(maps.size(), 5u);
    EXPECT_EQ(maps[0].start, 0x55d0c0000000u);
    EXPECT_EQ(maps[0].offset, 0x1000u);
    EXPECT_EQ(maps[0].perms, "r-xp");
    EXPECT_EQ(maps[0].path, "/usr/bin/python3.11");
    EXPECT_EQ(maps[1].path, "");
    EXPECT_EQ(maps[2].path, "/opt/my env/lib/libpython3.11.so.1.0");
    EXPECT_EQ(maps[0].end, 0x55d0c0021000u);
    EXPECT_EQ(maps[0].inode, 1234u);
    EXPECT_EQ(maps[0].dev_major, 0xfdu);
    EXPECT_EQ(maps[0].dev_minor, 1u);
    EXPECT_EQ(maps[2].offset, 0x2000u);
    EXPECT_EQ(maps[3].start, 0x7f0000002000u);
    EXPECT_EQ(maps[3].perms, "r--p");
    EXPECT_EQ(maps[3].path, "");
    EXPECT_EQ(maps[4].dev_minor, 0x1fu);
    EXPECT_EQ(maps[4].inode, 77u);
    EXPECT_EQ(maps[4].path, "[heap]");
    // Damaged lines are skipped, never half read.
    EXPECT_TRUE(parse_maps("7f00-8f00 rw-p 00000000 00:00\n7f00-8f00\n-8f00 r 0 0:0 0\n7f00-8f00 r 0 0:0 x\n").empty());
}

TEST(ProcMaps, OwnProcessAndTree)
{
    EXPECT_TRUE(process_exists(getpid()));
    EXPECT_FALSE(process_exists(0));
    EXPECT_EQ(parent_pid(getpid()).value_or(-1), getppid());
    EXPECT_FALSE(read_maps(getpid()).empty());
}

// A /proc reader never throws: a process that goes between the open and the read makes read(2) fail (ESRCH),
// which a stream turned into an exception that ended the tracer (50 quick subprocesses, the modern stack).
TEST(ProcMaps, ReadersOfAProcessThatGoesSayNothingAndNeverThrow)
{
    EXPECT_FALSE(read_comm(getpid()).empty());
    EXPECT_EQ(read_comm(getpid()).find('\n'), std::string::npos);
    EXPECT_FALSE(command_line(getpid()).empty());
    for (int i = 0; i < 200; i++) {
        pid_t child = fork();
        ASSERT_GE(child, 0);
        if (child == 0)
            _exit(0);
        if (i % 2)
            waitpid(child, nullptr, 0); // gone before the reads, or (else) while they run
        EXPECT_NO_THROW({
            (void)parent_pid(child);
            (void)read_comm(child);
            (void)command_line(child);
            (void)env_int(child, "LOTUS_READER_TEST");
        });
        if (i % 2 == 0)
            waitpid(child, nullptr, 0);
        EXPECT_EQ(parent_pid(child), std::nullopt);
        EXPECT_EQ(read_comm(child), "");
        EXPECT_EQ(command_line(child), "");
        EXPECT_EQ(env_int(child, "LOTUS_READER_TEST"), std::nullopt);
    }
}

TEST(ProcMaps, ExecutableFileMappingsQueriedOneByOneAreThoseOfTheMapsText)
{
    auto queried = exec_file_maps(getpid(), [](const Mapping&) { return false; });
    if (!queried)
        GTEST_SKIP() << "no PROCMAP_QUERY (Linux 6.11+)";
    std::vector<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t, std::string, std::string>> text, asked;
    for (const auto& m : read_maps(getpid()))
        if (m.inode && m.perms.find('x') != std::string::npos)
            text.emplace_back(m.start, m.end, m.offset, m.inode, m.perms, m.path);
    for (const auto& m : *queried)
        asked.emplace_back(m.start, m.end, m.offset, m.inode, m.perms, m.path);
    ASSERT_FALSE(asked.empty());
    EXPECT_EQ(asked, text);
    // files already known come without their path
    auto known = exec_file_maps(getpid(), [](const Mapping& m) { return m.inode != 0; });
    ASSERT_TRUE(known);
    EXPECT_EQ(known->size(), queried->size());
    for (const auto& m : *known)
        EXPECT_TRUE(m.path.empty()) << m.start;
    EXPECT_THROW(exec_file_maps(0, [](const Mapping&) { return false; }), std::runtime_error);
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
    auto open_fds = [] {
        size_t n = 0;
        for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
            n += !e.path().empty();
        return n;
    };
    size_t before = open_fds();
    EXPECT_THROW(ElfFile("/proc/self/status"), std::runtime_error);
    EXPECT_THROW(ElfFile("/no/such/file"), std::runtime_error);
    EXPECT_EQ(open_fds(), before); // a refused file leaves no descriptor open
}

TEST(Layouts, OneRowPerSupportedVersion)
{
    auto l = layout_for({3, 11, 2});
    ASSERT_TRUE(l);
    EXPECT_EQ(l->frame_code, 32);
    EXPECT_EQ(l->frame_localsplus, 72);
    for (int minor : {10, 11, 12, 13, 14, 15}) {
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

#include <cstring>

#include "cpython/debug_offsets.h"

namespace {

// A _Py_DebugOffsets buffer as CPython 3.<minor> would lay it out, from a layout row.
std::vector<uint8_t> crafted(const lotus_py_layout& l, int minor = 13)
{
    const DebugOffsetsGroups* g = debug_offsets_groups(minor);
    std::vector<uint64_t> w(g->end, 0);
    memcpy(w.data(), "xdebugpy", 8);
    w[1] = 0x030000F0 | uint64_t(minor) << 16;
    size_t t = g->thread_state, f = g->interpreter_frame, c = g->code_object, o = g->pyobject, ty = g->type_object,
           tu = g->tuple_object, lo = g->long_object, u = g->unicode_object;
    w[t] = 400, w[t + 4] = static_cast<uint64_t>(l.tstate_current_frame);
    w[f] = 88, w[f + 1] = static_cast<uint64_t>(l.frame_previous), w[f + 2] = static_cast<uint64_t>(l.frame_code);
    w[f + 4] = static_cast<uint64_t>(l.frame_localsplus), w[f + 5] = static_cast<uint64_t>(l.frame_owner);
    w[c] = 200, w[c + 1] = static_cast<uint64_t>(l.code_filename), w[c + 3] = static_cast<uint64_t>(l.code_name);
    w[c + 5] = static_cast<uint64_t>(l.code_firstlineno), w[c + 7] = static_cast<uint64_t>(l.code_localsplusnames);
    w[o] = 16, w[o + 1] = 8;
    w[ty] = 400, w[ty + 1] = 24, w[ty + 3] = 168;
    w[tu] = 40, w[tu + 1] = static_cast<uint64_t>(l.tuple_items), w[tu + 2] = 16;
    w[lo] = 32, w[lo + 1] = 16, w[lo + 2] = 24;
    w[u] = 40, w[u + 1] = 32, w[u + 2] = 16, w[u + 3] = 40;
    std::vector<uint8_t> out(w.size() * 8);
    memcpy(out.data(), w.data(), out.size());
    return out;
}

} // namespace

TEST(DebugOffsets, ParsesAValidBuffer)
{
    auto row = *layout_for({3, 13, 0});
    auto buf = crafted(row);
    std::string why;
    auto l = layout_from_debug_offsets(buf.data(), buf.size(), row, &why);
    ASSERT_TRUE(l) << why;
    EXPECT_EQ(l->tstate_current_frame, row.tstate_current_frame);
    EXPECT_EQ(l->frame_code, row.frame_code);
    EXPECT_EQ(l->frame_localsplus, row.frame_localsplus);
    EXPECT_EQ(l->code_name, row.code_name);
    EXPECT_EQ(l->unicode_ascii_data, row.unicode_ascii_data);
    EXPECT_EQ(l->unicode_compact_data, row.unicode_compact_data);
    EXPECT_EQ(l->long_digits, row.long_digits);
}

TEST(DebugOffsets, EachKnownVersionHasItsOwnGroupPositions)
{
    for (int minor : {13, 14, 15}) {
        auto row = *layout_for({3, minor, 0});
        auto buf = crafted(row, minor);
        std::string why;
        auto l = layout_from_debug_offsets(buf.data(), buf.size(), row, &why);
        ASSERT_TRUE(l) << minor << ": " << why;
        EXPECT_EQ(0, memcmp(&*l, &row, sizeof(row))) << minor;
    }
    // 3.14's buffer read with 3.13's positions would be garbage: the version decides, not the length
    auto row14 = *layout_for({3, 14, 0});
    EXPECT_EQ(row14.tuple_items, 32);
    EXPECT_EQ(row14.stackref_tag_mask, 3u);
    // 3.15 inserted groups before the frame's: 3.14's positions read garbage there
    EXPECT_GT(debug_offsets_groups(15)->interpreter_frame, debug_offsets_groups(14)->interpreter_frame);
    // a version whose structure is not known is refused with a reason (the caller falls back to a row, if any)
    auto row15 = *layout_for({3, 15, 0});
    auto future = crafted(row15, 15);
    future[8 + 2] = 16;
    std::string why;
    EXPECT_FALSE(layout_from_debug_offsets(future.data(), future.size(), row15, &why));
    EXPECT_EQ(why, "no known _Py_DebugOffsets layout for 3.16");
}

TEST(DebugOffsets, RejectsCorruptBuffersWithAReason)
{
    auto row = *layout_for({3, 13, 0});
    std::string why;
    auto bad_cookie = crafted(row);
    bad_cookie[0] = 'y';
    EXPECT_FALSE(layout_from_debug_offsets(bad_cookie.data(), bad_cookie.size(), row, &why));
    EXPECT_NE(why.find("cookie"), std::string::npos);
    auto short_buf = crafted(row);
    EXPECT_FALSE(layout_from_debug_offsets(short_buf.data(), 100, row, &why));
    auto old = crafted(row);
    old[8 + 2] = 0x0B; // version 3.11
    EXPECT_FALSE(layout_from_debug_offsets(old.data(), old.size(), row, &why));
    auto insane = crafted(row);
    uint64_t huge = 1ull << 40;
    memcpy(insane.data() + debug_offsets_groups(13)->interpreter_frame * 8, &huge, 8);
    EXPECT_FALSE(layout_from_debug_offsets(insane.data(), insane.size(), row, &why));
    EXPECT_NE(why.find("out of bounds"), std::string::npos);
    auto ft = crafted(row);
    ft[16] = 1;
    EXPECT_FALSE(layout_from_debug_offsets(ft.data(), ft.size(), row, &why));
    EXPECT_EQ(why, "free-threaded build");
}

TEST(DebugOffsets, RealCPython313AgreesWithTheTable)
{
    const char* lib = "/root/.pyenv/versions/3.13.0/lib/libpython3.13.so.1.0";
    if (access(lib, R_OK) != 0)
        GTEST_SKIP() << "no pyenv CPython 3.13 on this machine";
    auto i = find_interpreter_in_executable("/root/.pyenv/versions/3.13.0/bin/python3.13", "");
    EXPECT_EQ(i.layout_source, "_Py_DebugOffsets");
    auto row = *layout_for({3, 13, 0});
    EXPECT_EQ(0, memcmp(&i.layout, &row, sizeof(row)));
}

// Debian's own 3.14 and 3.15 (static, stripped), installed by scripts/install-python.sh for the version tests.
static std::string debian_python(int minor)
{
    return fmt::format("/opt/lotus-bpf/python3.{0}/usr/bin/python3.{0}", minor);
}

TEST(DebugOffsets, RealCPython314And315AgreeWithTheTable)
{
    for (int minor : {14, 15}) {
        std::string exe = debian_python(minor);
        if (access(exe.c_str(), R_OK) != 0)
            GTEST_SKIP() << "no CPython 3." << minor << " installed (scripts/install-python.sh 3." << minor << ")";
        auto i = find_interpreter_in_executable(exe, "");
        EXPECT_EQ(i.layout_source, "_Py_DebugOffsets") << minor;
        EXPECT_EQ(i.version.minor, minor);
        auto row = *layout_for({3, minor, 0});
        EXPECT_EQ(0, memcmp(&i.layout, &row, sizeof(row))) << minor;
    }
}

// A CPython newer than the table (3.16 to this build), even one whose _Py_DebugOffsets lotus-bpf reads, is refused
// with one line that says so (the decision: debug_offsets.h, unsupported_version). The interpreter is Debian's
// 3.15 with its two version words (Py_Version, _Py_DebugOffsets.version) rewritten to say 3.16.0.
TEST(DebugOffsets, ANewerVersionThanTheTableIsRefusedInOneLine)
{
    EXPECT_EQ(newest_supported().minor, 15);
    EXPECT_EQ(unsupported_version({3, 9, 18}, nullptr, 0), "CPython 3.9 is not supported (supported: " +
                                                               supported_versions() + ")");
    EXPECT_EQ(unsupported_version({3, 16, 0}, nullptr, 0),
              "CPython 3.16.0 is newer than this lotus-bpf knows (supported: " + supported_versions() +
                  ") and is not traced");
    std::string exe = debian_python(15);
    if (access(exe.c_str(), R_OK) != 0)
        GTEST_SKIP() << "no CPython 3.15 installed (scripts/install-python.sh 3.15)";
    auto dir = std::filesystem::temp_directory_path() / fmt::format("lotus-py316-{}", getpid());
    std::filesystem::create_directories(dir);
    auto copy = dir / "python3.16";
    std::filesystem::copy_file(exe, copy);
    {
        ElfFile elf(exe);
        uint32_t hex = 0x031000F0; // 3.16.0 final
        uint64_t words[] = {*elf.file_offset(elf.symbol("Py_Version")->value),
                            *elf.file_offset(elf.symbol("_PyRuntime")->value + 8)};
        FILE* f = fopen(copy.c_str(), "r+b");
        ASSERT_TRUE(f);
        for (uint64_t at : words) {
            fseek(f, static_cast<long>(at), SEEK_SET);
            fwrite(&hex, 4, 1, f);
        }
        fclose(f);
    }
    std::string line;
    try {
        find_interpreter_in_executable(copy.string(), "");
    } catch (const TargetError& e) {
        line = e.what();
    }
    std::filesystem::remove_all(dir);
    EXPECT_NE(line.find("CPython 3.16.0 is newer than this lotus-bpf knows (supported: 3.10, 3.11, 3.12, 3.13, "
                        "3.14, 3.15) and is not traced: its _Py_DebugOffsets (version 3.16) were read"),
              std::string::npos)
        << line;
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
}

// pyenv's CPython 3.10-3.13 on this machine, which keep their static symbols: (version, libpython, executable).
static std::vector<std::array<std::string, 3>> pyenv_interpreters()
{
    std::vector<std::array<std::string, 3>> out;
    for (std::string v : {"3.10.13", "3.11.7", "3.12.1", "3.13.0"}) {
        std::string minor = v.substr(0, v.rfind('.'));
        std::string lib = fmt::format("/root/.pyenv/versions/{}/lib/libpython{}.so.1.0", v, minor);
        if (access(lib.c_str(), R_OK) == 0)
            out.push_back({v, lib, fmt::format("/root/.pyenv/versions/{}/bin/python{}", v, minor)});
    }
    return out;
}

// The slot table gives the same functions as the static symbols of interpreters that keep them (pyenv's): each
// version's slot_tp_call, slot_tp_iter and slot_tp_iternext, through the relocations of a shared
// libpython.
TEST(SlotFunctions, AgreeWithTheSymbolsOfEveryPyenvCPython)
{
    const std::pair<int, const char*> names[] = {{LOTUS_SLOT_CALL, "slot_tp_call"},
                                                 {LOTUS_SLOT_ITER, "slot_tp_iter"},
                                                 {LOTUS_SLOT_NEXT, "slot_tp_iternext"}};
    int checked = 0;
    for (const auto& [v, lib, exe] : pyenv_interpreters()) {
        SCOPED_TRACE(lib);
        ElfFile elf(lib);
        std::string why;
        auto slots = find_slot_functions(elf, &why);
        ASSERT_TRUE(slots) << why;
        for (auto [slot, name] : names) {
            auto sym = elf.symbol(name);
            ASSERT_TRUE(sym) << name;
            EXPECT_EQ(slots->vaddr[slot], sym->value) << name;
        }
        auto i = find_interpreter_in_executable(exe, "");
        ASSERT_TRUE(i.slots);
        EXPECT_EQ(i.slots->tstate_vaddr, elf.symbol("_PyRuntime")->value + static_cast<uint64_t>(i.layout.runtime_tstate));
        EXPECT_EQ(i.slots->offset[LOTUS_SLOT_CALL], *elf.file_offset(elf.symbol("slot_tp_call")->value));
        checked++;
    }
    if (!checked)
        GTEST_SKIP() << "no pyenv CPython 3.10-3.13 on this machine";
}

// Stripped static interpreters (Debian's 3.11, 3.14 and 3.15, non-PIE): found from the table alone, inside the
// evaluator's file and distinct.
TEST(SlotFunctions, FoundInStrippedStaticInterpreters)
{
    int checked = 0;
    for (std::string exe : {std::string("/usr/bin/python3.11"), debian_python(14), debian_python(15)}) {
        if (access(exe.c_str(), R_OK) != 0)
            continue;
        SCOPED_TRACE(exe);
        ElfFile elf(exe);
        EXPECT_FALSE(elf.symbol("slot_tp_call")); // stripped: only the table tells
        auto i = find_interpreter_in_executable(exe, "");
        ASSERT_TRUE(i.slots) << i.slots_missing;
        std::set<uint64_t> distinct;
        for (int k = 1; k < LOTUS_SLOTS_PROBED; k++) {
            EXPECT_GT(i.slots->offset[k], 0u);
            distinct.insert(i.slots->vaddr[k]);
        }
        EXPECT_EQ(distinct.size(), 3u);
        // ...and they are the functions the interpreter itself puts in a Python class's tp_call, tp_iter and
        // tp_iternext (PyTypeObject offsets 128, 216, 224), and os.read's ml_meth (PyCFunctionObject.m_ml at 16):
        // these executables are not position-independent, so their run-time addresses are the file's.
        const char* script = "import ctypes, os\n"
                             "class C:\n"
                             "    def __call__(self): pass\n"
                             "    def __iter__(self): return self\n"
                             "    def __next__(self): raise StopIteration\n"
                             "rd = lambda a: ctypes.c_uint64.from_address(a).value\n"
                             "print(rd(id(C) + 128), rd(id(C) + 216), rd(id(C) + 224), rd(rd(id(os.read) + 16) + 8))\n";
        FILE* p = popen(fmt::format("{} -S -c '{}'", exe, script).c_str(), "r");
        ASSERT_TRUE(p);
        unsigned long long call = 0, iter = 0, next = 0, os_read = 0;
        int n = fscanf(p, "%llu %llu %llu %llu", &call, &iter, &next, &os_read);
        pclose(p);
        ASSERT_EQ(n, 4);
        auto fns = find_slot_functions(elf);
        ASSERT_TRUE(fns);
        EXPECT_EQ(fns->vaddr[LOTUS_SLOT_CALL], call);
        EXPECT_EQ(fns->vaddr[LOTUS_SLOT_ITER], iter);
        EXPECT_EQ(fns->vaddr[LOTUS_SLOT_NEXT], next);
        EXPECT_EQ(find_os_read(elf), os_read);
        checked++;
    }
    if (!checked)
        GTEST_SKIP() << "none of Debian's CPython 3.11, 3.14, 3.15 is installed";
}

// os.read through the posix module's method table: the same function as the static symbol os_read of the
// interpreters that keep it (pyenv's), and found in the stripped ones (Debian's 3.11, 3.14, 3.15), where the
// interpreter's description carries its probe's file offset.
TEST(BuiltinFunctions, OsReadAgreesWithTheSymbolsAndIsFoundInStrippedInterpreters)
{
    int checked = 0;
    for (const auto& [v, lib, exe] : pyenv_interpreters()) {
        SCOPED_TRACE(lib);
        ElfFile elf(lib);
        std::string why;
        auto os_read = find_os_read(elf, &why);
        ASSERT_TRUE(os_read) << why;
        ASSERT_TRUE(elf.symbol("os_read"));
        EXPECT_EQ(*os_read, elf.symbol("os_read")->value);
        EXPECT_NE(*os_read, elf.symbol("os_write")->value);
        checked++;
    }
    for (std::string exe : {std::string("/usr/bin/python3.11"), debian_python(14), debian_python(15)}) {
        if (access(exe.c_str(), R_OK) != 0)
            continue;
        SCOPED_TRACE(exe);
        EXPECT_FALSE(ElfFile(exe).symbol("os_read")); // stripped: only the table tells
        auto i = find_interpreter_in_executable(exe, "");
        ASSERT_TRUE(i.os_read_offset) << i.os_read_missing;
        EXPECT_GT(*i.os_read_offset, 0u);
        checked++;
    }
    if (!checked)
        GTEST_SKIP() << "no CPython 3.10-3.15 on this machine";
    ElfFile self("/proc/self/exe");
    std::string why;
    EXPECT_FALSE(find_os_read(self, &why));
    EXPECT_FALSE(why.empty());
}

TEST(SlotFunctions, AFileWithoutTheTableSaysWhy)
{
    ElfFile self("/proc/self/exe");
    std::string why;
    EXPECT_FALSE(find_slot_functions(self, &why));
    EXPECT_FALSE(why.empty());
}

TEST(VersionCaps, EverySupportedVersionHasItsRow)
{
    // The layout table's versions and the capability table's are the same list.
    for (int minor = 0; minor < 30; minor++) {
        PyVersion v{3, minor, 0};
        EXPECT_EQ(layout_for(v).has_value(), caps_for(v).has_value()) << v.str();
    }
    EXPECT_FALSE(caps_for({3, 10, 0})->inlines_calls);
    EXPECT_EQ(caps_for({3, 11, 0})->inline_calls.resume, (std::vector<int>{151, 150}));
    EXPECT_FALSE(caps_for({3, 11, 0})->perf_trampoline);
    EXPECT_TRUE(caps_for({3, 12, 0})->perf_trampoline);
    EXPECT_FALSE(caps_for({3, 12, 0})->debug_offsets);
    EXPECT_TRUE(caps_for({3, 13, 0})->debug_offsets);
    EXPECT_TRUE(caps_for({3, 12, 0})->inline_calls.resume.empty());
}

TEST(VersionCaps, ParsesARecordFilesVersion)
{
    auto v = parse_version("3.11.2");
    ASSERT_TRUE(v);
    EXPECT_EQ(std::tie(v->major, v->minor, v->micro), std::make_tuple(3, 11, 2));
    v = parse_version("3.14");
    ASSERT_TRUE(v);
    EXPECT_EQ(std::tie(v->major, v->minor, v->micro), std::make_tuple(3, 14, -1));
    EXPECT_FALSE(parse_version(""));
    EXPECT_FALSE(parse_version("python"));
    EXPECT_FALSE(parse_version("3.12.x"));
}

#include "cpython/remote_memory.h"

namespace {

// Bytes at chosen addresses, as a target's memory would hold them; nothing else is readable.
class FakeMemory : public Memory {
public:
    void put(uint64_t addr, const void* data, size_t len)
    {
        auto* p = static_cast<const uint8_t*>(data);
        for (size_t i = 0; i < len; i++)
            bytes_[addr + i] = p[i];
    }
    template <typename T>
    void put_value(uint64_t addr, T v) { put(addr, &v, sizeof(v)); }
    bool read(uint64_t addr, void* buf, size_t len) const override
    {
        auto* out = static_cast<uint8_t*>(buf);
        for (size_t i = 0; i < len; i++) {
            auto it = bytes_.find(addr + i);
            if (it == bytes_.end())
                return false;
            out[i] = it->second;
        }
        return true;
    }

private:
    std::map<uint64_t, uint8_t> bytes_;
};

// An ASCII str object of 3.11's layout at addr.
void put_ascii(FakeMemory& m, uint64_t addr, const std::string& s, const lotus_py_layout& l)
{
    m.put_value<uint32_t>(addr + static_cast<uint64_t>(l.unicode_state), 1u << l.unicode_ascii_bit);
    m.put_value<int64_t>(addr + static_cast<uint64_t>(l.unicode_length), static_cast<int64_t>(s.size()));
    std::string padded = s + std::string(64, '\0'); // what follows a str in memory is readable too
    m.put(addr + static_cast<uint64_t>(l.unicode_ascii_data), padded.data(), padded.size());
}

} // namespace

TEST(ObjectReads, LocalNamesOfACodeObjectFromAnyMemory)
{
    auto l = *layout_for({3, 11, 0});
    FakeMemory m;
    const uint64_t code = 0x1000, tuple = 0x2000, a = 0x3000, b = 0x4000;
    m.put_value<uint64_t>(code + static_cast<uint64_t>(l.code_localsplusnames), tuple);
    m.put_value<int64_t>(tuple + static_cast<uint64_t>(l.tuple_size), 2);
    m.put_value<uint64_t>(tuple + static_cast<uint64_t>(l.tuple_items), a);
    m.put_value<uint64_t>(tuple + static_cast<uint64_t>(l.tuple_items) + 8, b);
    put_ascii(m, a, "self", l);
    put_ascii(m, b, "worker_id", l);
    auto names = read_local_names(m, code, l);
    ASSERT_TRUE(names);
    EXPECT_EQ(*names, (std::vector<std::string>{"self", "worker_id"}));
    char buf[16];
    EXPECT_EQ(read_unicode(m, b, l, buf, sizeof(buf)), 0); // ASCII
    EXPECT_STREQ(buf, "worker_id");
    EXPECT_FALSE(read_local_names(m, 0x9000, l)); // unreadable: nothing invented
    EXPECT_FALSE(m.ptr(0x9000));
}
