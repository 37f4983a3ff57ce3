// The CFI unwinder on this very process: a copy of the stack taken three calls deep gives back the return
// addresses those calls pushed, in order, from the test binary's and libc's .eh_frame.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "elf/cfi_unwinder.h"
#include "proc/proc_maps.h"

namespace {

using lotus::elf::CfiUnwinder;
using lotus::elf::CodePlace;
using lotus::elf::StackCopy;

alignas(16) uint8_t g_stack[8192];
StackCopy g_copy;
uint64_t g_returns[3]; // where inner(), middle() and outer() return to

std::optional<CodePlace> locate(uint64_t ip)
{
    for (const auto& m : lotus::proc::read_maps(getpid()))
        if (m.start <= ip && ip < m.end && !m.path.empty() && m.path[0] == '/')
        {
            lotus::common::UniqueFd fd(open(m.path.c_str(), O_RDONLY | O_CLOEXEC));
            auto id = lotus::common::file_id(fd.get());
            return id ? std::optional<CodePlace>(CodePlace{m.path, *id, ip - m.start + m.offset}) : std::nullopt;
        }
    return std::nullopt;
}

// The registers here, and the stack above them as the sampler copies it (into memory off the stack, so
// that copying changes none of the frames above).
__attribute__((noinline)) void inner()
{
    uint64_t ip, sp, bp;
    asm volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2" : "=r"(ip), "=r"(sp), "=r"(bp));
    size_t len = sizeof(g_stack);
    for (const auto& m : lotus::proc::read_maps(getpid())) // the stack may end sooner (the main thread's does)
        if (m.start <= sp && sp < m.end)
            len = std::min<size_t>(len, m.end - sp);
    memcpy(g_stack, reinterpret_cast<const void*>(sp), len);
    g_copy = StackCopy{ip, sp, bp, g_stack, len};
    g_returns[0] = reinterpret_cast<uint64_t>(__builtin_return_address(0));
    asm volatile("" ::: "memory");
}

__attribute__((noinline)) void middle(int n)
{
    volatile char pad[300]; // a frame of its own size
    pad[n] = 1;
    inner();
    g_returns[1] = reinterpret_cast<uint64_t>(__builtin_return_address(0));
    asm volatile("" ::: "memory");
}

__attribute__((noinline)) void outer()
{
    middle(3);
    g_returns[2] = reinterpret_cast<uint64_t>(__builtin_return_address(0));
    asm volatile("" ::: "memory");
}

} // namespace

TEST(CfiUnwinder, FindsTheReturnAddressesOfItsOwnCallsFromACopyOfTheStack)
{
    outer();
    CfiUnwinder u;
    auto callers = u.callers(g_copy, 16, locate);
    ASSERT_GE(callers.size(), 3u);
    EXPECT_EQ(callers[0], g_returns[0]);
    EXPECT_EQ(callers[1], g_returns[1]);
    EXPECT_EQ(callers[2], g_returns[2]);
    EXPECT_LE(callers.size(), 16u);
}

TEST(CfiUnwinder, StopsWhereTheCopyOrTheMapsEnd)
{
    outer();
    CfiUnwinder u;
    StackCopy short_copy = g_copy;
    short_copy.len = 8; // inner()'s return address lies beyond the copy
    EXPECT_TRUE(u.callers(short_copy, 16, locate).empty());
    // No file holds the code: nothing is guessed.
    EXPECT_TRUE(u.callers(g_copy, 16, [](uint64_t) { return std::optional<CodePlace>(); }).empty());
    EXPECT_EQ(u.callers(g_copy, 2, locate).size(), 2u);
    EXPECT_TRUE(u.callers(g_copy, 0, locate).empty());
}

// A file is known by what it is, not by its path: a place whose path opens another file than it says (the path
// came to name a new one) gives no callers.
TEST(CfiUnwinder, ReadsNoFileThatIsNotTheOneMapped)
{
    outer();
    CfiUnwinder u;
    auto elsewhere = [](uint64_t ip) {
        auto p = locate(ip);
        if (p)
            p->file.mtime_ns += 1;
        return p;
    };
    EXPECT_TRUE(u.callers(g_copy, 16, elsewhere).empty());
    EXPECT_EQ(u.callers(g_copy, 16, locate).size() >= 3, true);
}

namespace {

uint64_t g_after_raise; // where raiser()'s call of raise() returns to

void on_usr1(int)
{
    inner();
    asm volatile("" ::: "memory");
}

__attribute__((noinline)) void raiser()
{
    raise(SIGUSR1);
    g_after_raise = reinterpret_cast<uint64_t>(__builtin_return_address(0));
    asm volatile("" ::: "memory");
}

} // namespace

// A handler's caller is the kernel's signal frame (glibc's __restore_rt): the interrupted code above it is not
// guessed at (its pc is exact, no call precedes it), so the walk ends at the handler.
TEST(CfiUnwinder, EndsAtASignalFrame)
{
    struct sigaction sa = {}, old = {};
    sa.sa_handler = on_usr1;
    ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
    raiser();
    sigaction(SIGUSR1, &old, nullptr);
    CfiUnwinder u;
    auto callers = u.callers(g_copy, 16, locate);
    ASSERT_GE(callers.size(), 1u);
    EXPECT_EQ(callers[0], g_returns[0]); // into the handler
    EXPECT_EQ(callers.size(), 1u);       // and not the trampoline it returns to
    for (uint64_t ra : callers)
        EXPECT_NE(ra, g_after_raise);
}
