// Where the evaluator's opcode handlers are (--all-calls on 3.11): CPython's computed-goto dispatch table
// `opcode_targets` holds 256 label addresses inside _PyEval_EvalFrameDefault. Found by its symbol, so only in
// interpreters that keep their static symbols (pyenv, python.org builds). A stripped one (Debian's
// /usr/bin/python3.11) has a look-alike table in its data whose entries were never hit when probed: guessing
// by shape is not safe, so it is refused.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lotus::elf {
class ElfFile;
}

namespace lotus::cpython {

struct Interpreter;

// File offsets (for uprobes) of the handlers of these opcodes, in order; nullopt when no table is found.
std::optional<std::vector<uint64_t>> find_opcode_handlers(const elf::ElfFile& elf, const std::vector<int>& opcodes);

// What --all-calls probes in this interpreter where calls are inlined (3.11): the RESUME handlers' offsets, then
// RETURN_VALUE's. Empty where its version needs none; throws where they are needed and its table is not found.
std::vector<uint64_t> inline_call_handlers(const Interpreter& interp);

} // namespace lotus::cpython
