// Finding static functions of an interpreter through the tables that point at them (typeobject.c's slot table, a
// module's method table): the addresses of strings in .rodata, and the words of the file that hold an address
// (relocated words of a position-independent file, else words stored as they are).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "elf/elf_file.h"

namespace lotus::elf {

class StaticTables {
public:
    explicit StaticTables(const ElfFile& elf);
    // Every address in .rodata where `bytes` occurs (the linker may have merged a string into the tail of a longer
    // one, so any occurrence counts); nullopt when .rodata cannot be read.
    std::optional<std::set<uint64_t>> rodata(std::string_view bytes) const;
    // The addresses of the words that hold one of `targets` once loaded: (where, target).
    std::vector<std::pair<uint64_t, uint64_t>> words_to(const std::set<uint64_t>& targets) const;
    // The word at `at` once loaded (its relocation's value in a position-independent file).
    std::optional<uint64_t> word(uint64_t at) const;
    bool executable(uint64_t vaddr) const;
    const ElfFile& elf() const { return elf_; }

private:
    const ElfFile& elf_;
    std::vector<ElfSection> sections_;
    std::map<uint64_t, uint64_t> relocated_; // where -> value
};

} // namespace lotus::elf
