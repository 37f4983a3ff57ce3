// CPython 3.13+ describes its own layout in _PyRuntime.debug_offsets (_Py_DebugOffsets, cookie "xdebugpy"),
// a static initializer stored in the interpreter's file. Reading it beats a table for versions that have it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "cpython/cpython_layouts.h"
#include "lotus_abi.h"

namespace lotus::cpython {

// Where each group of _Py_DebugOffsets that lotus-bpf reads starts, in u64 words, for one CPython minor
// version: the structure grows groups and fields between versions (3.14 added set_object, frame
// stackpointer/tlbc_index, code co_tlbc, interpreter threads_main and generation counters; 3.15 thread-state
// fields, err_stackitem, heap_type_object and type/unicode sizes), in the middle as well as at the end: the groups
// of a version after the last known one cannot be placed.
struct DebugOffsetsGroups {
    int minor;
    size_t thread_state, interpreter_frame, code_object, pyobject, type_object, tuple_object, long_object,
        unicode_object, end;
};
// The groups of a minor version, or nullptr when its layout is not known.
const DebugOffsetsGroups* debug_offsets_groups(int minor);
// Bytes to read from the target: enough for every known version (a shorter buffer is checked per version).
constexpr size_t kDebugOffsetsBytes = 8 * 94;

// The layout described by a _Py_DebugOffsets buffer. `base` supplies what the structure does not hold
// (owner value of C-stack frames, str state bits, int tagging). Returns nullopt, with the reason in *why,
// when the buffer is not a sane _Py_DebugOffsets.
std::optional<lotus_py_layout> layout_from_debug_offsets(const uint8_t* buf, size_t len, const lotus_py_layout& base,
                                                         std::string* why);

// Why an interpreter of version v, which the table has no row for, is not traced: one line. `runtime` is the
// start of its _PyRuntime (nullptr when its file has none). A version newer than the table (3.16 to this build)
// is refused even when it carries _Py_DebugOffsets: where that version keeps their groups is not known, and they
// leave out part of what the probes read (see the .cpp).
std::string unsupported_version(const PyVersion& v, const uint8_t* runtime, size_t len);

} // namespace lotus::cpython
