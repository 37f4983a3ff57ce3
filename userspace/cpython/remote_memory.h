// Reading (never writing) a target process's memory with process_vm_readv.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lotus_abi.h"

namespace lotus::cpython {

bool read_remote(int pid, uint64_t addr, void* buf, size_t len);
std::optional<uint64_t> read_remote_ptr(int pid, uint64_t addr);
// An ASCII str object's text, or nullopt (non-ASCII or unreadable).
std::optional<std::string> read_remote_ascii(int pid, uint64_t str, const lotus_py_layout& layout);
// A NUL-terminated C string at addr, at most size - 1 bytes (read page by page: the next page may be unmapped),
// into buf; false if unreadable.
bool read_remote_cstr(int pid, uint64_t addr, char* buf, size_t size);
// A str object into buf as BPF's read_unicode does: its kind (0: ASCII, NUL-terminated; 1/2/4: bytes per
// character, at most size - 1 bytes), 0xff if unreadable.
uint8_t read_remote_unicode(int pid, uint64_t str, const lotus_py_layout& layout, char* buf, size_t size);
// co_localsplusnames of a code object: the names of its local slots, in slot order.
std::optional<std::vector<std::string>> read_local_names(int pid, uint64_t code, const lotus_py_layout& layout);

} // namespace lotus::cpython
