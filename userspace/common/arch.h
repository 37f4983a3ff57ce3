// What is x86_64's in user space (the BPF side's is bpf/arch/x86_64.bpf.h): the multiarch directory the
// dynamic loader searches, a relocation type. CPython layouts (target/cpython_layouts.cpp) were measured on x86_64 too.
#pragma once

#if !defined(__x86_64__)
#error "lotus-bpf supports x86_64 only"
#endif

namespace lotus::common {

inline constexpr const char* kMultiarchLibDirs[] = {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu"};
// The ELF relocation that stores the load address plus an addend (R_X86_64_RELATIVE).
inline constexpr unsigned kRelativeRelocation = 8;

} // namespace lotus::common
