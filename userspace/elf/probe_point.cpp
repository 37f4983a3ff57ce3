#include "elf/probe_point.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "elf/elf_file.h"
#include "common/knobs.h"

namespace lotus::elf {

namespace {

// Length of an instruction that may be stepped over, at p (n bytes left), else 0.
size_t skippable(const uint8_t* p, size_t n)
{
    static constexpr uint8_t kEndbr64[] = {0xf3, 0x0f, 0x1e, 0xfa};
    if (n >= 4 && memcmp(p, kEndbr64, 4) == 0)
        return 4;
    // cmpb $imm8, disp32(%rip) / cmpl $imm8, disp32(%rip): flags only
    if (n >= 7 && (p[0] == 0x80 || p[0] == 0x83) && p[1] == 0x3d)
        return 7;
    return 0;
}

// Whether the kernel emulates the instruction at p: push %reg, jcc/jmp/call with a relative target.
bool emulated(const uint8_t* p, size_t n)
{
    if (n >= 1 && ((p[0] >= 0x50 && p[0] <= 0x57) || (p[0] >= 0x70 && p[0] <= 0x7f) || p[0] == 0xeb ||
                   p[0] == 0xe8 || p[0] == 0xe9))
        return true;
    if (n >= 2 && p[0] == 0x41 && p[1] >= 0x50 && p[1] <= 0x57)
        return true;
    return n >= 2 && p[0] == 0x0f && p[1] >= 0x80 && p[1] <= 0x8f;
}

// Whether some byte sequence of body reads as a direct jump or call landing at `to` (a false alarm only
// keeps the probe where it was).
bool jumped_to(std::span<const uint8_t> body, uint64_t to)
{
    auto rel32 = [&](size_t at) {
        int32_t d;
        memcpy(&d, body.data() + at, 4);
        return d;
    };
    for (size_t i = 0; i < body.size(); i++) {
        uint8_t b = body[i];
        if (((b >= 0x70 && b <= 0x7f) || b == 0xeb) && i + 2 <= body.size() &&
            static_cast<int64_t>(i) + 2 + static_cast<int8_t>(body[i + 1]) == static_cast<int64_t>(to))
            return true;
        if ((b == 0xe8 || b == 0xe9) && i + 5 <= body.size() &&
            static_cast<int64_t>(i) + 5 + rel32(i + 1) == static_cast<int64_t>(to))
            return true;
        if (b == 0x0f && i + 6 <= body.size() && body[i + 1] >= 0x80 && body[i + 1] <= 0x8f &&
            static_cast<int64_t>(i) + 6 + rel32(i + 2) == static_cast<int64_t>(to))
            return true;
    }
    return false;
}

} // namespace

uint64_t cheap_probe_shift(std::span<const uint8_t> body)
{
    const uint8_t* p = body.data();
    size_t n = body.size(), at = 0;
    if (n && emulated(p, n))
        return 0; // already cheap
    for (int k = 0; k < 2 && at < n; k++) {
        size_t len = skippable(p + at, n - at);
        if (!len)
            break;
        at += len;
        if (at < n && emulated(p + at, n - at))
            return jumped_to(body, at) ? 0 : at;
    }
    return 0;
}

uint64_t cheap_probe_shift(const ElfFile& elf, uint64_t vaddr, uint64_t size)
{
    if (common::knob_on("LOTUS_PROBE_AT_ENTRY"))
        return 0; // the bench's comparison
    constexpr uint64_t kUnknownSize = 4096;
    uint64_t len = size ? size : kUnknownSize;
    auto bytes = elf.read(vaddr, len);
    if (!bytes && !size) // near the end of its segment
        for (uint64_t l = len / 2; !bytes && l >= 16; l /= 2)
            bytes = elf.read(vaddr, l);
    return bytes ? cheap_probe_shift(*bytes) : 0;
}

} // namespace lotus::elf
