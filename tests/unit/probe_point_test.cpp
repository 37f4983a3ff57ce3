// Where an entry uprobe goes: past endbr64 or a compare only onto an instruction the kernel emulates, never
// where code might jump.
#include <gtest/gtest.h>

#include <vector>

#include "elf/probe_point.h"

using lotus::elf::cheap_probe_shift;

namespace {
std::vector<uint8_t> code(std::initializer_list<uint8_t> b) { return b; }
} // namespace

TEST(ProbePoint, PastEndbr64OntoAPush)
{
    EXPECT_EQ(cheap_probe_shift(code({0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0xc3})), 4u); // push %rbp
    EXPECT_EQ(cheap_probe_shift(code({0xf3, 0x0f, 0x1e, 0xfa, 0x41, 0x57, 0xc3})), 4u);             // push %r15
}

TEST(ProbePoint, PastGlibcsSingleThreadCheckOntoItsJump)
{
    // read: cmpb $0x0, __libc_single_threaded(%rip); je +0x17; xor %eax,%eax; syscall
    EXPECT_EQ(cheap_probe_shift(code({0x80, 0x3d, 0x31, 0x33, 0x0e, 0x00, 0x00, 0x74, 0x17, 0x31, 0xc0, 0x0f, 0x05})),
              7u);
    // with endbr64 first: both stepped over
    EXPECT_EQ(cheap_probe_shift(code({0xf3, 0x0f, 0x1e, 0xfa, 0x80, 0x3d, 0, 0, 0, 0, 0, 0x0f, 0x84, 0, 0, 0, 0})),
              11u);
}

TEST(ProbePoint, StaysAtTheEntry)
{
    EXPECT_EQ(cheap_probe_shift(code({0x55, 0x48, 0x89, 0xe5})), 0u);             // already a push
    EXPECT_EQ(cheap_probe_shift(code({0xb8, 0x6e, 0x00, 0x00, 0x00, 0x0f, 0x05})), 0u); // getppid: mov first
    EXPECT_EQ(cheap_probe_shift(code({0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x78})), 0u); // then sub %rsp
    EXPECT_EQ(cheap_probe_shift(code({0x48, 0x83, 0xec, 0x58, 0x55})), 0u); // a stack change before the push
    EXPECT_EQ(cheap_probe_shift(code({0xf3, 0x0f, 0x1e, 0xfa})), 0u);       // nothing after
    EXPECT_EQ(cheap_probe_shift(code({})), 0u);
}

TEST(ProbePoint, StaysWhereCodeMayJumpToThePoint)
{
    // endbr64; push %rbp; ...; jmp back to the push (rel8: 0x08 + 2 - 6 = 4)
    EXPECT_EQ(cheap_probe_shift(code({0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x90, 0x90, 0x90, 0xeb, 0xfa})), 0u);
    // the same by a rel32 jcc (0x08 + 6 - 10 = 4)
    EXPECT_EQ(cheap_probe_shift(code({0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x90, 0x90, 0x90, 0x0f, 0x85, 0xf6, 0xff, 0xff,
                                      0xff})),
              0u);
    // a call to it (0x08 + 5 - 9 = 4)
    EXPECT_EQ(cheap_probe_shift(code({0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x90, 0x90, 0x90, 0xe8, 0xf7, 0xff, 0xff, 0xff})),
              0u);
    // a jump elsewhere changes nothing
    EXPECT_EQ(cheap_probe_shift(code({0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x90, 0x90, 0x90, 0xeb, 0xf0})), 4u);
}
