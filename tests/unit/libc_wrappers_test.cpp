// libc's wrappers of the watched syscalls, found in this process's own libc: the file offsets lotus-bpf would
// probe are where this process's read, write and getppid are loaded.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <link.h>

#include <span>
#include <unistd.h>

#include "lotus_abi.h"
#include "elf/libc_wrappers.h"
#include "elf/probe_point.h"
#include "proc/proc_maps.h"

using namespace lotus::elf;
using namespace lotus::proc;

namespace {

uint64_t file_offset_of(const void* addr);

// Where lotus-bpf probes a loaded function: its entry, or past its first instructions (target/probe_point.h),
// judged on the loaded code and the symbol's size.
uint64_t probe_offset_of(const void* fn)
{
    Dl_info info{};
    ElfW(Sym)* sym = nullptr;
    if (!dladdr1(fn, &info, reinterpret_cast<void**>(&sym), RTLD_DL_SYMENT) || !sym || !sym->st_size)
        return 0;
    std::span<const uint8_t> code(static_cast<const uint8_t*>(fn), sym->st_size);
    return file_offset_of(fn) + cheap_probe_shift(code);
}

// The file offset of a loaded address, from this process's maps.
uint64_t file_offset_of(const void* addr)
{
    auto a = reinterpret_cast<uint64_t>(addr);
    for (const auto& m : read_maps(getpid()))
        if (a >= m.start && a < m.end)
            return a - m.start + m.offset;
    return 0;
}

} // namespace

TEST(LibcWrappers, FoundWhereThisProcessLoadsThem)
{
    auto libc = mapped_libc(getpid());
    ASSERT_TRUE(libc);
    auto w = libc_wrappers(libc->path);
    ASSERT_TRUE(w);
    ASSERT_GE(w->offsets.size(), 5u);
    ASSERT_EQ(w->offsets.size(), w->cookies.size());
    EXPECT_EQ(w->cookies[0], LOTUS_LIBC_READ);
    EXPECT_EQ(w->offsets[0], probe_offset_of(reinterpret_cast<const void*>(&::read)));
    EXPECT_EQ(w->cookies[1], LOTUS_LIBC_WRITE);
    EXPECT_EQ(w->offsets[1], probe_offset_of(reinterpret_cast<const void*>(&::write)));
    EXPECT_EQ(w->cookies[2], LOTUS_LIBC_GETPPID);
    EXPECT_EQ(w->offsets[2], probe_offset_of(reinterpret_cast<const void*>(&::getppid)));
    EXPECT_TRUE(links_libc("/proc/self/exe"));
}

TEST(LibcWrappers, DlopenWhereLibcHasIt)
{
    auto libc = mapped_libc(getpid());
    ASSERT_TRUE(libc);
    auto w = libc_wrappers(libc->path);
    ASSERT_TRUE(w);
    // glibc 2.34+ (this machine's) has dlopen in libc itself
    ASSERT_TRUE(w->dlopen);
    EXPECT_EQ(*w->dlopen, probe_offset_of(reinterpret_cast<const void*>(&::dlopen)));
}

TEST(LibcWrappers, TheLibcAnExecutableLinksUnderItsRoot)
{
    // This test's own executable links libc.so.6: found where the loader looks, and under /proc/PID/root when
    // named through it (a process in another root).
    auto plain = linked_libc("/proc/self/exe");
    ASSERT_TRUE(plain);
    EXPECT_TRUE(plain->ends_with("/libc.so.6")) << *plain;
    EXPECT_EQ(plain->find("/proc/"), std::string::npos) << *plain; // /proc/self/exe is not a root prefix
    std::string root = "/proc/" + std::to_string(getpid()) + "/root";
    auto rooted = linked_libc(root + "/proc/self/exe");
    ASSERT_TRUE(rooted);
    EXPECT_EQ(*rooted, root + *plain);
    EXPECT_FALSE(linked_libc("/nonexistent"));
}

TEST(LibcWrappers, NoneInAFileThatIsNotALibc)
{
    EXPECT_FALSE(libc_wrappers("/proc/self/exe")); // no read/write/getppid defined in it
    EXPECT_FALSE(libc_wrappers("/nonexistent"));
    EXPECT_FALSE(links_libc("/nonexistent"));
}
