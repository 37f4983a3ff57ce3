// CPython 3.13+ describes its own layout in _PyRuntime.debug_offsets (_Py_DebugOffsets, cookie "xdebugpy"),
// a static initializer stored in the interpreter's file. Reading it beats a table for versions that have it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "lotus_abi.h"

namespace lotus::target {

// Bytes of _Py_DebugOffsets that are read (3.13 layout, up to and including unicode_object).
constexpr size_t kDebugOffsetsBytes = 8 * (3 + 3 + 13 + 9 + 6 + 10 + 2 + 4 + 3 + 3 + 3 + 2 + 3 + 3 + 4);

// The layout described by a _Py_DebugOffsets buffer. `base` supplies what the structure does not hold
// (owner value of C-stack frames, str state bits, int tagging). Returns nullopt, with the reason in *why,
// when the buffer is not a sane _Py_DebugOffsets.
std::optional<lotus_py_layout> layout_from_debug_offsets(const uint8_t* buf, size_t len, const lotus_py_layout& base,
                                                         std::string* why);

} // namespace lotus::target
