// Reading CPython objects of a target, never writing: the readers below interpret objects and know nothing of
// how bytes are fetched (py-spy's split). A Memory is where the bytes come from: a process's memory through
// /proc/PID/mem (ProcessMemory), or, in tests, a buffer.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "lotus_abi.h"

namespace lotus::cpython {

class Memory {
public:
    virtual ~Memory() = default;
    // len bytes at addr into buf; false when any of them cannot be read.
    virtual bool read(uint64_t addr, void* buf, size_t len) const = 0;
    std::optional<uint64_t> ptr(uint64_t addr) const;
};

// A process's memory, read through /proc/PID/mem (opened at the first read), never written. Not process_vm_readv:
// it pins the pages it reads, and pinning a page a fork child still shares with its parent copies it for the child
// (Linux 5.19+, to keep the pin coherent), so every page read in a DataLoader worker would cost the job a page of
// memory and a TLB flush, and show in its PSS as its own.
class ProcessMemory : public Memory {
public:
    explicit ProcessMemory(int pid) : pid_(pid) {}
    bool read(uint64_t addr, void* buf, size_t len) const override;

private:
    int pid_;
    mutable common::UniqueFd mem_;
    mutable bool opened_ = false;
};

// An ASCII str object's text, or nullopt (non-ASCII or unreadable).
std::optional<std::string> read_ascii(const Memory& mem, uint64_t str, const lotus_py_layout& layout);
// A NUL-terminated C string at addr, at most size - 1 bytes (read page by page: the next page may be unmapped),
// into buf; false if unreadable.
bool read_cstr(const Memory& mem, uint64_t addr, char* buf, size_t size);
// A str object into buf as BPF's read_unicode does: its kind (0: ASCII, NUL-terminated; 1/2/4: bytes per
// character, at most size - 1 bytes), 0xff if unreadable.
uint8_t read_unicode(const Memory& mem, uint64_t str, const lotus_py_layout& layout, char* buf, size_t size);
// co_localsplusnames of a code object: the names of its local slots, in slot order.
std::optional<std::vector<std::string>> read_local_names(const Memory& mem, uint64_t code,
                                                         const lotus_py_layout& layout);

} // namespace lotus::cpython
