#include "cpython/cpython_layouts.h"

#include <cstdio>

#include <fmt/format.h>

namespace lotus::cpython {

namespace {

struct Row {
    int major, minor;
    lotus_py_layout layout;
    ObjectLayout objects;
    StackLayout stacks;
};

// One row per supported version, measured with offsetof() against that version's own headers by
// scripts/cpython-layouts.sh (ctest layouts.from_headers checks the file still matches them), x86_64. Each row
// is exercised by an integration test on a real interpreter of that version (tests/integration/test_versions.py).
// What changes between them:
// - 3.10: frames are PyFrameObjects; tstate->frame is the caller's frame at entry; no co_qualname (co_name),
//   locals' names in co_varnames; arguments captured by a nested scope moved into cells (co_cell2arg).
// - 3.11: _PyInterpreterFrame; tstate->cframe->current_frame; is_entry marks the evaluator's first frame.
// - 3.12: f_code first, C-stack shim frames (owner FRAME_OWNED_BY_CSTACK), str without wstr, tagged ints
//   (lv_tag).
// - 3.13: no _PyCFrame: tstate->current_frame; f_executable (a code object for Python frames).
// - 3.14: f_executable is a tagged _PyStackRef (Py_TAG_BITS cleared), frame fields after it moved
//   (stackpointer), the shim frames' owner renamed FRAME_OWNED_BY_INTERPRETER, tuples cache their hash (ob_item
//   32). The interpreter's own _Py_DebugOffsets, where present (3.13+), are read in preference.
// - 3.15: the same frame, code, str and int layout as 3.14 (FRAME_OWNED_BY_CSTACK, unused since 3.14, is gone;
//   the evaluator's entry frame is still owned by FRAME_OWNED_BY_INTERPRETER); the thread state and runtime grew
//   (runtime_tstate moves), and so did _Py_DebugOffsets (groups inserted before the frame's). Every thread's
//   stack now ends in the thread state's base_frame, a sentinel owned like the entry frame, code None: BPF's
//   walks stop at a shim below a shim. Its JIT (built in Debian's, off unless PYTHON_JIT=1) keeps the
//   evaluator's entry, the slot functions and tstate->current_frame as they are.
// Instances' attributes (ObjectLayout): 3.10 a dict at tp_dictoffset; 3.11 a managed dict or values pointer just
// below the object; 3.12 one tagged pointer there; 3.13+ values inline after the object, or that dict.
constexpr Row kRows[] = {
#include "cpython/cpython_layout_rows.inc"
};

struct CapsRow {
    int major, minor;
    VersionCaps caps;
};

// Written by hand (the layouts above are measured): inlined calls, trampoline, debug offsets, and 3.11's opcodes
// from its Include/opcode.h (RESUME 151, RESUME_QUICK 150, RETURN_VALUE 83).
const CapsRow kCaps[] = {
    // {major, minor, {inlines_calls, perf_trampoline, debug_offsets, inline_calls}}
    {3, 10, {false, false, false, {}}},
    {3, 11, {true, false, false, {{151, 150}, 83}}},
    {3, 12, {true, true, false, {}}},
    {3, 13, {true, true, true, {}}},
    {3, 14, {true, true, true, {}}},
    {3, 15, {true, true, true, {}}},
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

std::optional<ObjectLayout> object_layout_for(const PyVersion& v)
{
    for (const auto& r : kRows)
        if (r.major == v.major && r.minor == v.minor)
            return r.objects;
    return std::nullopt;
}

std::optional<StackLayout> stack_layout_for(const PyVersion& v)
{
    for (const auto& r : kRows)
        if (r.major == v.major && r.minor == v.minor)
            return r.stacks;
    return std::nullopt;
}

std::optional<VersionCaps> caps_for(const PyVersion& v)
{
    for (const auto& c : kCaps)
        if (c.major == v.major && c.minor == v.minor)
            return c.caps;
    return std::nullopt;
}

std::optional<PyVersion> parse_version(const std::string& text)
{
    PyVersion v{0, 0, -1};
    int n = 0;
    if (sscanf(text.c_str(), "%d.%d%n", &v.major, &v.minor, &n) < 2)
        return std::nullopt;
    if (text[static_cast<size_t>(n)] == '.' && sscanf(text.c_str() + n + 1, "%d", &v.micro) != 1)
        return std::nullopt;
    return v;
}

std::string supported_versions()
{
    std::string s;
    for (const auto& r : kRows)
        s += (s.empty() ? "" : ", ") + fmt::format("{}.{}", r.major, r.minor);
    return s;
}

PyVersion newest_supported()
{
    const auto& last = kRows[std::size(kRows) - 1];
    return {last.major, last.minor, -1};
}

} // namespace lotus::cpython
