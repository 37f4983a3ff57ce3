// Native calls ended by probes on their own return instructions: where those are (decoded with Capstone), and
// how the engine pairs an entry with its return by the stack pointer, dropping calls left by an exception or a
// tail call instead of ending them at a wrong time.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "elf/elf_file.h"
#include "elf/native_functions.h"
#include "elf/return_points.h"
#include "lotus_abi.h"
#include "model/engine.h"

using namespace lotus;
using model::Span;
using model::SpanKind;

TEST(ReturnPoints, OnlyWholeReturnInstructionsAreFound)
{
    const std::vector<uint8_t> code = {
        0xf3, 0x0f, 0x1e, 0xfa,       // 0: endbr64
        0x55,                         // 4: push %rbp
        0xb8, 0xc3, 0x00, 0x00, 0x00, // 5: mov $0xc3, %eax (a 0xc3 byte inside an instruction: not a return)
        0x5d,                         // 10: pop %rbp
        0xc3,                         // 11: ret
        0x0f, 0x1f, 0x00,             // 12: nop
        0xc2, 0x08, 0x00,             // 15: ret $8
        0xf3, 0xc3,                   // 18: rep ret
    };
    auto exits = elf::code_exits(code, 0x1000);
    ASSERT_TRUE(exits);
    EXPECT_EQ(exits->returns, (std::vector<uint64_t>{0x100b, 0x100f, 0x1012}));
    EXPECT_TRUE(exits->jumps_out.empty());
    // cut inside an instruction: nothing is trusted
    EXPECT_FALSE(elf::code_exits(std::span(code.data(), 7), 0x1000));
}

TEST(ReturnPoints, JumpsOutAreTheirTargets)
{
    const std::vector<uint8_t> code = {
        0x75, 0x02,                         // 0: jne +2 (to 4: inside)
        0x74, 0x10,                         // 2: je +16 (to 0x14: outside, a cold part)
        0xff, 0xe0,                         // 4: jmp *%rax (a jump table: inside)
        0xff, 0x25, 0x00, 0x00, 0x00, 0x00, // 6: jmp *0(%rip) (through memory: a GOT entry)
        0xe9, 0x00, 0x10, 0x00, 0x00,       // 12: jmp rel32 (to 0x1011: a tail call)
    };
    auto exits = elf::code_exits(code, 0);
    ASSERT_TRUE(exits);
    EXPECT_TRUE(exits->returns.empty());
    EXPECT_EQ(exits->jumps_out, (std::vector<uint64_t>{0x14, 0x1011}));
    EXPECT_EQ(exits->through_memory, 1u);
}

TEST(ReturnPoints, ARealLibrarysFunctionHasThem)
{
    auto fns = elf::resolve_native({{"libc.so*", "getpid"}}, "/lib/x86_64-linux-gnu/libc.so.6");
    ASSERT_EQ(fns.size(), 1u);
    ASSERT_FALSE(fns[0].returns.empty());
    for (uint64_t r : fns[0].returns)
        EXPECT_GT(r, fns[0].offset);
}

namespace {

struct NativeRun {
    model::Rules rules;
    std::vector<Span> spans;
    model::Engine e{rules, [this](const Span& s) { spans.push_back(s); }};

    NativeRun()
    {
        for (uint32_t f = 0; f < 3; f++) {
            model::RecordNativeFunc r{};
            r.type = model::kRecordNativeFunc;
            r.func = f;
            snprintf(r.name, sizeof(r.name), "f%u", f);
            strcpy(r.library, "libx.so");
            e.consume(&r, sizeof(r));
        }
    }
    void point(uint32_t type, uint64_t ts, uint32_t func, uint64_t sp)
    {
        lotus_native n{};
        n.h = {type, 1, 5, 0, ts};
        n.func = func;
        n.sp = sp;
        e.consume(&n, sizeof(n));
    }
    void enter(uint64_t ts, uint32_t func, uint64_t sp) { point(LOTUS_EV_NATIVE_ENTRY, ts, func, sp); }
    void leave(uint64_t ts, uint32_t func, uint64_t sp) { point(LOTUS_EV_NATIVE_RETURN, ts, func, sp); }
};

} // namespace

TEST(NativeReturns, ACallThatAnExceptionLeftEndsNoSpan)
{
    NativeRun r;
    r.enter(100, 0, 0x8000); // f0, the outer call
    r.enter(200, 1, 0x7f00); // f1 inside it: throws, caught in f0
    r.enter(300, 1, 0x7f00); // f0 calls f1 again at the same depth: the first is over, unended
    r.leave(400, 1, 0x7f00); // ...and this one returns
    r.enter(500, 2, 0x7e00); // f2 inside f0: throws past f0's frame too
    r.leave(900, 0, 0x8000); // f0 returns: f2 is dropped, f0 ends here
    r.e.finish();
    ASSERT_EQ(r.spans.size(), 2u);
    EXPECT_EQ(r.spans[0].name, "f1");
    EXPECT_EQ(r.spans[0].start_ns, 300u);
    EXPECT_EQ(r.spans[0].end_ns, 400u);
    EXPECT_EQ(r.spans[1].name, "f0");
    EXPECT_EQ(r.spans[1].start_ns, 100u);
    EXPECT_EQ(r.spans[1].end_ns, 900u);
    EXPECT_EQ(r.e.counters().native_unended, 2u);
    EXPECT_EQ(r.e.counters().native_unmatched, 0u);
}

TEST(NativeReturns, ATailCallAndAReturnOfAnotherFrame)
{
    NativeRun r;
    r.enter(100, 0, 0x8000);  // f0 ends by a jump to f1: f1's entry has f0's sp
    r.enter(150, 1, 0x8000);
    r.leave(200, 1, 0x8000);  // f1's return is the return to f0's caller: f1 is a span, f0 is not
    r.leave(250, 2, 0x8000);  // a return with nothing open at its sp: counted, no span
    r.enter(300, 2, 0x9000);
    r.leave(350, 1, 0x9000);  // a return point in code f2 jumped to (a tail call's): f2 returns by it
    r.leave(400, 1, 0xa000);  // some other call's return, above nothing open
    r.e.finish();
    ASSERT_EQ(r.spans.size(), 2u);
    EXPECT_EQ(r.spans[0].name, "f1");
    EXPECT_EQ(r.spans[1].name, "f2");
    EXPECT_EQ(r.spans[1].end_ns, 350u);
    EXPECT_EQ(r.e.counters().native_unended, 1u);
    EXPECT_EQ(r.e.counters().native_unmatched, 2u);
}

TEST(NativeReturns, ASampleAboveACallsFrameFindsItOver)
{
    NativeRun r;
    model::RecordSymbol sym{};
    sym.type = model::kRecordSymbol;
    sym.tgid = 1;
    sym.ip = 0x100; // a hidden function: no name
    strcpy(sym.library, "libx.so");
    r.e.consume(&sym, sizeof(sym));
    auto sample = [&](uint64_t ts, uint64_t sp) {
        lotus_sample s{};
        s.h = {LOTUS_EV_SAMPLE, 1, 5, 0, ts};
        s.nr_ips = 1;
        s.ip[0] = 0x100;
        s.sp = sp;
        r.e.consume(&s, sizeof(s));
    };
    r.enter(100, 0, 0x8000);
    sample(150, 0x7ff0); // inside f0: named after it
    sample(200, 0x8010); // above f0's frame: f0 was left (an exception), the sample is not f0's
    r.leave(300, 0, 0x8000);
    r.e.finish();
    EXPECT_TRUE(r.spans.empty());
    EXPECT_EQ(r.e.counters().native_unended, 1u);
    auto t = r.e.native_map().table();
    ASSERT_EQ(t.size(), 1u);
    EXPECT_EQ(t[0].samples, 2u);
    EXPECT_EQ(t[0].named, 1u);
}

TEST(ReturnPoints, AFunctionsColdPartIsNoFunction)
{
    // -O2 moves may_throw's throw to may_throw.cold (entered by a jump, never called): only the function itself is
    // selected, with its own return.
    elf::ElfFile lib(LOTUS_TEST_THROWER);
    bool has_cold = false;
    for (const auto& [raw, sym] : lib.functions())
        has_cold = has_cold || raw.find("may_throw") != std::string::npos && raw.ends_with(".cold");
    EXPECT_TRUE(has_cold); // (else this test shows nothing)
    auto fns = elf::resolve_native({{"liblotus_test_thrower*", "lotus_test::may_throw"}}, LOTUS_TEST_THROWER);
    ASSERT_EQ(fns.size(), 1u);
    EXPECT_EQ(fns[0].name, "lotus_test::may_throw");
    EXPECT_EQ(fns[0].returns.size(), 1u); // its own: the cold part throws, and returns nowhere
}

TEST(ReturnPoints, ATailCallIntoAStaticFunctionIsFollowed)
{
    // libjpeg's jpeg_start_decompress mostly leaves by a jump into a static function (no symbol in Debian's
    // stripped library: its extent from the unwind table): that function's returns are its calls' returns too.
    const char* lib = "/usr/lib/x86_64-linux-gnu/libjpeg.so.62";
    elf::ElfFile f(lib);
    auto own = f.symbol("jpeg_start_decompress");
    ASSERT_TRUE(own);
    auto bytes = f.read(own->value, own->size);
    ASSERT_TRUE(bytes);
    auto exits = elf::code_exits(*bytes, own->value);
    ASSERT_TRUE(exits);
    ASSERT_FALSE(exits->jumps_out.empty()); // (else this test shows nothing)
    auto fns = elf::resolve_native({{"libjpeg*", "jpeg_start_decompress"}}, lib);
    ASSERT_EQ(fns.size(), 1u);
    EXPECT_GT(fns[0].returns.size(), exits->returns.size());
}
