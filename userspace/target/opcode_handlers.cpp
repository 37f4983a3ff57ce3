#include "opcode_handlers.h"

#include <cstring>

#include "elf_file.h"

namespace lotus::target {

namespace {

constexpr size_t kTable = 256;

std::optional<std::vector<uint64_t>> handlers_at(const ElfFile& elf, uint64_t table, uint64_t lo, uint64_t hi,
                                                 const std::vector<int>& opcodes)
{
    auto bytes = elf.read(table, kTable * 8);
    if (!bytes)
        return std::nullopt;
    std::vector<uint64_t> out;
    for (int op : opcodes) {
        if (op < 0 || op >= static_cast<int>(kTable))
            return std::nullopt;
        uint64_t target;
        memcpy(&target, bytes->data() + op * 8, 8);
        if (target < lo || target >= hi)
            return std::nullopt;
        auto off = elf.file_offset(target);
        if (!off)
            return std::nullopt;
        out.push_back(*off);
    }
    return out;
}

} // namespace

std::optional<std::vector<uint64_t>> find_opcode_handlers(const ElfFile& elf, const std::vector<int>& opcodes)
{
    auto eval = elf.symbol("_PyEval_EvalFrameDefault");
    if (!eval || !eval->size)
        return std::nullopt;
    uint64_t lo = eval->value, hi = eval->value + eval->size;
    // By name: a static array, "opcode_targets" or "opcode_targets.N" after the compiler's renaming.
    for (const auto& name : {"opcode_targets", "opcode_targets.0", "opcode_targets.1", "opcode_targets.2",
                             "opcode_targets.3", "opcode_targets.4", "opcode_targets.5"})
        if (auto sym = elf.symbol(name); sym && sym->size == kTable * 8)
            if (auto h = handlers_at(elf, sym->value, lo, hi, opcodes))
                return h;
    return std::nullopt;
}

} // namespace lotus::target
