#include "cpython_layouts.h"

#include <fmt/format.h>

namespace lotus::target {

namespace {

struct Row {
    int major, minor;
    lotus_py_layout layout;
};

// Offsets measured with offsetof() against each version's own headers (Include/internal/pycore_frame.h,
// cpython/code.h, cpython/unicodeobject.h, cpython/longintrepr.h, cpython/pystate.h, cpython/object.h,
// cpython/cellobject.h), x86_64. Each row is
// exercised by an integration test on a real interpreter of that version (tests/integration/test_versions.py).
constexpr Row kRows[] = {
    // 3.10: frames are PyFrameObjects; tstate->frame is the caller's frame at entry; no co_qualname.
    {3, 10, lotus_py_layout{
        .tstate_cframe = -1, .cframe_current_frame = -1, .tstate_current_frame = 24,
        .frame_code = 32, .frame_previous = 24, .frame_owner = -1, .frame_localsplus = 352,
        .owner_cstack = -1, .stackref_tag_mask = 0,
        .code_name = 112 /* co_name */, .code_filename = 104, .code_firstlineno = 40,
        .object_type = 8, .type_name = 24, .type_flags = 168,
        .unicode_state = 32, .unicode_length = 16, .unicode_ascii_data = 48, .unicode_compact_data = 72,
        .unicode_kind_shift = 2, .unicode_ascii_bit = 6,
        .long_size = 16, .long_digits = 24, .long_tagged = 0,
        .code_localsplusnames = 72 /* co_varnames */, .tuple_size = 16, .tuple_items = 24, .frame_is_entry = -1,
        .code_nlocals = 28, .code_cellvars = 88, .code_cell2arg = 96, .cell_ref = 16, .type_base = 256}},
    // 3.11: _PyInterpreterFrame; tstate->cframe->current_frame.
    {3, 11, lotus_py_layout{
        .tstate_cframe = 56, .cframe_current_frame = 8, .tstate_current_frame = -1,
        .frame_code = 32, .frame_previous = 48, .frame_owner = 69, .frame_localsplus = 72,
        .owner_cstack = -1, .stackref_tag_mask = 0,
        .code_name = 128 /* co_qualname */, .code_filename = 112, .code_firstlineno = 72,
        .object_type = 8, .type_name = 24, .type_flags = 168,
        .unicode_state = 32, .unicode_length = 16, .unicode_ascii_data = 48, .unicode_compact_data = 72,
        .unicode_kind_shift = 2, .unicode_ascii_bit = 6,
        .long_size = 16, .long_digits = 24, .long_tagged = 0,
        .code_localsplusnames = 96, .tuple_size = 16, .tuple_items = 24, .frame_is_entry = 68,
        .code_nlocals = -1, .code_cellvars = -1, .code_cell2arg = -1, .cell_ref = 16, .type_base = 256}},
    // 3.12: f_code first, C-stack shim frames (owner 3), str without wstr, tagged ints (lv_tag).
    {3, 12, lotus_py_layout{
        .tstate_cframe = 56, .cframe_current_frame = 0, .tstate_current_frame = -1,
        .frame_code = 0, .frame_previous = 8, .frame_owner = 70, .frame_localsplus = 72,
        .owner_cstack = 3, .stackref_tag_mask = 0,
        .code_name = 128, .code_filename = 112, .code_firstlineno = 68,
        .object_type = 8, .type_name = 24, .type_flags = 168,
        .unicode_state = 32, .unicode_length = 16, .unicode_ascii_data = 40, .unicode_compact_data = 56,
        .unicode_kind_shift = 2, .unicode_ascii_bit = 6,
        .long_size = 16, .long_digits = 24, .long_tagged = 1,
        .code_localsplusnames = 96, .tuple_size = 16, .tuple_items = 24, .frame_is_entry = -1,
        .code_nlocals = -1, .code_cellvars = -1, .code_cell2arg = -1, .cell_ref = 16, .type_base = 256}},
    // 3.13: no _PyCFrame: tstate->current_frame; f_executable (a code object for Python frames).
    {3, 13, lotus_py_layout{
        .tstate_cframe = -1, .cframe_current_frame = -1, .tstate_current_frame = 72,
        .frame_code = 0, .frame_previous = 8, .frame_owner = 70, .frame_localsplus = 72,
        .owner_cstack = 3, .stackref_tag_mask = 0,
        .code_name = 128, .code_filename = 112, .code_firstlineno = 68,
        .object_type = 8, .type_name = 24, .type_flags = 168,
        .unicode_state = 32, .unicode_length = 16, .unicode_ascii_data = 40, .unicode_compact_data = 56,
        .unicode_kind_shift = 2, .unicode_ascii_bit = 6,
        .long_size = 16, .long_digits = 24, .long_tagged = 1,
        .code_localsplusnames = 96, .tuple_size = 16, .tuple_items = 24, .frame_is_entry = -1,
        .code_nlocals = -1, .code_cellvars = -1, .code_cell2arg = -1, .cell_ref = 16, .type_base = 256}},
    // 3.14: f_executable is a tagged _PyStackRef (low bit; cleared with the low two), frame fields after it
    // moved (stackpointer), tuples cache their hash (ob_item 32). Values from 3.14.10's _Py_DebugOffsets.
    {3, 14, lotus_py_layout{
        .tstate_cframe = -1, .cframe_current_frame = -1, .tstate_current_frame = 72,
        .frame_code = 0, .frame_previous = 8, .frame_owner = 74, .frame_localsplus = 80,
        .owner_cstack = 3, .stackref_tag_mask = 3,
        .code_name = 128, .code_filename = 112, .code_firstlineno = 68,
        .object_type = 8, .type_name = 24, .type_flags = 168,
        .unicode_state = 32, .unicode_length = 16, .unicode_ascii_data = 40, .unicode_compact_data = 56,
        .unicode_kind_shift = 2, .unicode_ascii_bit = 6,
        .long_size = 16, .long_digits = 24, .long_tagged = 1,
        .code_localsplusnames = 96, .tuple_size = 16, .tuple_items = 32, .frame_is_entry = -1,
        .code_nlocals = -1, .code_cellvars = -1, .code_cell2arg = -1, .cell_ref = 16, .type_base = 256}},
};

} // namespace

std::string PyVersion::str() const
{
    return micro >= 0 ? fmt::format("{}.{}.{}", major, minor, micro) : fmt::format("{}.{}", major, minor);
}

std::optional<lotus_py_layout> layout_for(const PyVersion& v)
{
    for (const auto& r : kRows)
        if (r.major == v.major && r.minor == v.minor)
            return r.layout;
    return std::nullopt;
}

InlineCallOpcodes inline_call_opcodes(const PyVersion& v)
{
    // Include/opcode.h of 3.11: RESUME 151, RESUME_QUICK 150, RETURN_VALUE 83.
    if (v.major == 3 && v.minor == 11)
        return {{151, 150}, 83};
    return {};
}

std::string supported_versions()
{
    std::string s;
    for (const auto& r : kRows)
        s += (s.empty() ? "" : ", ") + fmt::format("{}.{}", r.major, r.minor);
    return s;
}

} // namespace lotus::target
