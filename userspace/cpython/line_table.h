// A code object's line for an instruction, from its co_linetable bytes (as PyCode_Addr2Line computes it), for
// stacks read from outside the process. Pure: bytes in, a line out.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>

namespace lotus::cpython {

// The line of the instruction at byte offset `addr` (code units × 2) of a code object whose first line is
// `firstlineno`, in the table's format (StackLayout::linetable_format: 310 or 311). nullopt where the table gives
// the instruction no line or does not cover it (a table read while the code object was being freed).
std::optional<int> line_for(const uint8_t* table, size_t len, int format, int firstlineno, int addr);

} // namespace lotus::cpython
