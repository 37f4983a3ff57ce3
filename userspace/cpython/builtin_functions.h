// Where CPython's os.read is: the C function `os_read(module, args, nargs)` of the posix module, static and absent
// from a stripped interpreter's symbols. multiprocessing's connections read their pipes with os.read alone (a
// DataLoader's queues), while file reads (an image's) go through io's FileIO; so a probe here sees every pickle
// received and none of a sample's file reads, which libc's read() probe trapped on (several a sample of the
// example: docs/performance.md, "The syscall-tracing path").
// Found through the module's method table: a PyMethodDef {ml_name, ml_meth, ml_flags, ml_doc} whose name is "read",
// whose flags say METH_FASTCALL and whose doc string is Argument Clinic's "read($module, fd, length, /)" (the
// same 3.10-3.15).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace lotus::elf {
class ElfFile;
}

namespace lotus::cpython {


// os_read's address in the file, or nullopt with the reason in *why.
std::optional<uint64_t> find_os_read(const elf::ElfFile& elf, std::string* why = nullptr);

} // namespace lotus::cpython
