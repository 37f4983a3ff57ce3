// Where on a function its entry uprobe costs least. x86_64's kernel emulates a few instructions at a uprobe
// (a push of a register, direct jumps and calls) and runs any other one out of line, single-stepped: a
// second trap, several times dearer (docs/performance.md, "A trap's price on these VMs"). glibc's read and
// write begin with a compare (`cmpb $0, __libc_single_threaded(%rip)`) before their first jump; code built
// with -fcf-protection begins with endbr64 before its first push.
#pragma once
#include <cstdint>
#include <span>

namespace lotus::elf {

class ElfFile;

// Bytes to move a probe past a function's first instructions: nonzero only when they are instructions that
// change neither the stack nor any register but the flags (endbr64, a compare of memory with a constant),
// the next one is one the kernel emulates, and no byte sequence in `body` (the function's code from its
// start) reads as a direct jump or call to that point. The probe then sees the arguments and the return
// address as at the entry, and fires once per call.
uint64_t cheap_probe_shift(std::span<const uint8_t> body);

// The same for the function at `vaddr` in an ELF file, `size` bytes long (0: unknown, the next 4 KiB are
// scanned for jumps); 0 where its bytes cannot be read, or LOTUS_PROBE_AT_ENTRY=1 (the bench's comparison).
uint64_t cheap_probe_shift(const ElfFile& elf, uint64_t vaddr, uint64_t size);

} // namespace lotus::elf
