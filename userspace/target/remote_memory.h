// Reading (never writing) a target process's memory with process_vm_readv.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lotus_abi.h"

namespace lotus::target {

bool read_remote(int pid, uint64_t addr, void* buf, size_t len);
std::optional<uint64_t> read_remote_ptr(int pid, uint64_t addr);
// An ASCII str object's text, or nullopt (non-ASCII or unreadable).
std::optional<std::string> read_remote_ascii(int pid, uint64_t str, const lotus_py_layout& layout);
// co_localsplusnames of a code object: the names of its local slots, in slot order.
std::optional<std::vector<std::string>> read_local_names(int pid, uint64_t code, const lotus_py_layout& layout);

} // namespace lotus::target
