#include "cpython/opcode_handlers.h"

#include <cstring>

#include <fmt/format.h>

#include <stdexcept>

#include "cpython/cpython_layouts.h"
#include "elf/elf_file.h"
#include "cpython/interpreter.h"

namespace lotus::cpython {

namespace {

constexpr size_t kTable = 256;

std::optional<std::vector<uint64_t>> handlers_at(const elf::ElfFile& elf, uint64_t table, uint64_t lo, uint64_t hi,
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

std::optional<std::vector<uint64_t>> find_opcode_handlers(const elf::ElfFile& elf, const std::vector<int>& opcodes)
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

std::vector<uint64_t> inline_call_handlers(const Interpreter& interp)
{
    const auto& ops = interp.caps.inline_calls;
    if (ops.resume.empty())
        return {};
    auto wanted = ops.resume;
    wanted.push_back(ops.return_value);
    auto handlers = find_opcode_handlers(elf::ElfFile(interp.object_path), wanted);
    if (!handlers)
        throw std::runtime_error(fmt::format("--all-calls: no opcode_targets symbol in {} (a stripped CPython {}): "
                                             "cannot see inlined calls; use an interpreter with its symbols (e.g. "
                                             "pyenv)",
                                             interp.object_path, interp.version.str()));
    return *handlers;
}

} // namespace lotus::cpython
