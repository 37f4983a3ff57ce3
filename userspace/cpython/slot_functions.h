// Where CPython's type-slot functions for classes defined in Python are: slot_tp_call (calling an instance:
// t(img), an nn.Module), slot_tp_iter (iter(obj)), slot_tp_iternext (next(obj)).
// The default probes sit on them: only calls of objects pass there, not the Python functions, properties and
// helpers that enter the evaluator too. They are static functions, absent from a stripped interpreter's
// symbols, but the interpreter's table of slots (typeobject.c's `slotdefs`) holds each one's address next to
// a pointer to its dunder name and the offset of the PyTypeObject field it fills; that is how they are found,
// in every build.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "lotus_abi.h"

namespace lotus::elf {
class ElfFile;
}

namespace lotus::cpython {


struct SlotFunctions {
    std::array<uint64_t, LOTUS_SLOTS_PROBED> vaddr{}; // by LOTUS_SLOT_*; [0] unused
};

// The three functions' addresses in the file, or nullopt with the reason in *why.
std::optional<SlotFunctions> find_slot_functions(const elf::ElfFile& elf, std::string* why = nullptr);

} // namespace lotus::cpython
