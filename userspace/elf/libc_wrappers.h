// libc's wrappers of the syscalls lotus-bpf watches (read, write, open, openat, getppid), found in a process's
// mapped libc: where per-process probes take the place of syscall events (no other task then pays the kernel's
// syscall-tracing path).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lotus::elf {

// A libc file a process maps: openable by us, and which file it is.
struct LibcMapping {
    std::string path;
    uint64_t inode = 0;
    uint32_t dev_major = 0, dev_minor = 0;
};

// The wrappers' file offsets in one libc, each with its cookie: read, write, getppid, open, openat
// (LOTUS_LIBC_READ, ..._WRITE, ..._GETPPID, ..._OPEN, ..._OPENAT), and glibc's __open64_nocancel where it
// exports it (LOTUS_LIBC_OPEN).
struct LibcWrappers {
    std::vector<uint64_t> offsets;
    std::vector<uint64_t> cookies;
    std::optional<uint64_t> dlopen; // where libc has it (glibc 2.34+, musl; before, libdl's): LOTUS_LIBC_DLOPEN
};

// The libc pid maps (glibc's libc.so.6, musl's libc.so or ld-musl), or nullopt when it maps none (yet: a process
// stopped at its exec, before the dynamic loader ran) or its maps cannot be read.
std::optional<LibcMapping> mapped_libc(int pid);
// The wrappers of the libc at path; nullopt when it is not an ELF file or lacks one of them.
std::optional<LibcWrappers> libc_wrappers(const std::string& path);
// Whether an ELF file (an interpreter) links a libc dynamically: its processes will map one.
bool links_libc(const std::string& path);
// The libc an ELF file (an interpreter) links, found where the dynamic loader looks for it (the system's
// library directories, under the /proc/PID/root the file's path may begin with); nullopt if not found.
std::optional<std::string> linked_libc(const std::string& path);

} // namespace lotus::elf
