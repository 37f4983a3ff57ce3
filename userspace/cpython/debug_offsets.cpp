#include "cpython/debug_offsets.h"

#include "cpython/cpython_layouts.h"

#include <cstring>
#include <fmt/format.h>

namespace lotus::cpython {

namespace {

// Include/internal/pycore_runtime.h (3.13) and pycore_debug_offsets.h (3.14, 3.15), counted in u64 words (and
// for 3.14 and 3.15 with offsetof against their headers); checked against the _PyRuntime of real 3.13.0, 3.14.10
// and 3.15.2 interpreters (tests/unit/target_test.cpp, test_versions.py).
// Within a group the fields read keep their index: thread_state.current_frame 4; interpreter_frame previous 1,
// executable 2, localsplus 4, owner 5; code_object filename 1, qualname 3, firstlineno 5, localsplusnames 7;
// pyobject ob_type 1; type_object tp_name 1, tp_flags 3; tuple_object ob_item 1, ob_size 2; long_object lv_tag 1,
// ob_digit 2; unicode_object state 1, length 2, asciiobject_size 3.
constexpr DebugOffsetsGroups kGroups[] = {
    // cookie, version, free_threaded | runtime_state 3 | interpreter_state 13 | thread_state 9 | frame 6 | code 10
    // | pyobject 2 | type 4 | tuple 3 | list 3 | dict 3 | float 2 | long 3 | bytes 3 | unicode 4
    {13, 19, 28, 34, 44, 46, 50, 61, 67, 71},
    // interpreter_state 16 | thread_state 9 | frame 8 | code 11 | pyobject 2 | type 4 | tuple 3 | list 3 | set 4
    // | dict 3 | float 2 | long 3 | bytes 3 | unicode 4
    {14, 22, 31, 39, 50, 52, 56, 71, 77, 81},
    // interpreter_state 16 | thread_state 16 (base_frame, last_profiled_frame(_seq) after current_frame; holds_gil,
    // gil_requested, current_exception, exc_state at the end) | err_stackitem 1 | frame 8 | code 11 | pyobject 2 |
    // type 6 (tp_basicsize, tp_dictoffset) | heap_type 2 | tuple 3 | list 3 | set 4 | dict 3 | float 2 | long 3 |
    // bytes 3 | unicode 5 (compactunicodeobject_size)
    {15, 22, 39, 47, 58, 60, 68, 83, 89, 94},
};
static_assert([] {
    for (const auto& g : kGroups)
        if (g.end * 8 > kDebugOffsetsBytes)
            return false;
    return true;
}());

} // namespace

const DebugOffsetsGroups* debug_offsets_groups(int minor)
{
    for (const auto& g : kGroups)
        if (g.minor == minor)
            return &g;
    return nullptr;
}

std::optional<lotus_py_layout> layout_from_debug_offsets(const uint8_t* buf, size_t len, const lotus_py_layout& base,
                                                         std::string* why)
{
    auto fail = [&](std::string reason) -> std::optional<lotus_py_layout> {
        if (why)
            *why = std::move(reason);
        return std::nullopt;
    };
    if (!buf || len < 24)
        return fail("too short");
    if (memcmp(buf, "xdebugpy", 8) != 0)
        return fail("no \"xdebugpy\" cookie");
    auto w = [&](size_t i) {
        uint64_t v;
        memcpy(&v, buf + i * 8, 8);
        return v;
    };
    uint64_t version = w(1);
    int minor = static_cast<int>((version >> 16) & 0xff);
    auto caps = caps_for({3, minor, -1}); // a version after the table's last is looked up in the groups below
    if ((version >> 24) != 3 || (caps && !caps->debug_offsets))
        return fail(fmt::format("version {:#x} is not 3.13 or later", version));
    const DebugOffsetsGroups* g = debug_offsets_groups(minor);
    if (!g)
        return fail(fmt::format("no known _Py_DebugOffsets layout for 3.{}", minor));
    if (len < g->end * 8)
        return fail("too short");
    if (w(2))
        return fail("free-threaded build");
    // Each offset must lie inside its structure, and the structures must have believable sizes.
    auto field = [&](size_t group, size_t index, uint64_t max_size, const char* what) -> std::optional<int32_t> {
        uint64_t size = w(group), off = w(group + index);
        if (size == 0 || size > max_size || off + 8 > size)
            return std::nullopt;
        (void)what;
        return static_cast<int32_t>(off);
    };
    struct Want {
        size_t group, index;
        uint64_t max;
        int32_t lotus_py_layout::*dst;
        const char* what;
    };
    const Want wants[] = {
        {g->thread_state, 4, 1 << 16, &lotus_py_layout::tstate_current_frame, "thread_state.current_frame"},
        {g->interpreter_frame, 1, 4096, &lotus_py_layout::frame_previous, "interpreter_frame.previous"},
        {g->interpreter_frame, 2, 4096, &lotus_py_layout::frame_code, "interpreter_frame.executable"},
        {g->code_object, 1, 4096, &lotus_py_layout::code_filename, "code_object.filename"},
        {g->code_object, 3, 4096, &lotus_py_layout::code_name, "code_object.qualname"},
        {g->code_object, 7, 4096, &lotus_py_layout::code_localsplusnames, "code_object.localsplusnames"},
        {g->pyobject, 1, 4096, &lotus_py_layout::object_type, "pyobject.ob_type"},
        {g->type_object, 1, 4096, &lotus_py_layout::type_name, "type_object.tp_name"},
        {g->type_object, 3, 4096, &lotus_py_layout::type_flags, "type_object.tp_flags"},
        {g->tuple_object, 1, 4096, &lotus_py_layout::tuple_items, "tuple_object.ob_item"},
        {g->tuple_object, 2, 4096, &lotus_py_layout::tuple_size, "tuple_object.ob_size"},
        {g->long_object, 1, 4096, &lotus_py_layout::long_size, "long_object.lv_tag"},
        {g->unicode_object, 1, 4096, &lotus_py_layout::unicode_state, "unicode_object.state"},
        {g->unicode_object, 2, 4096, &lotus_py_layout::unicode_length, "unicode_object.length"},
    };
    lotus_py_layout l = base;
    for (const auto& want : wants) {
        auto v = field(want.group, want.index, want.max, want.what);
        if (!v)
            return fail(fmt::format("{} is out of bounds", want.what));
        l.*want.dst = *v;
    }
    // Fields that are not 8 bytes wide or lie at the end of their structure.
    uint64_t frame_size = w(g->interpreter_frame), code_size = w(g->code_object);
    uint64_t localsplus = w(g->interpreter_frame + 4), owner = w(g->interpreter_frame + 5), firstlineno = w(g->code_object + 5);
    uint64_t digits = w(g->long_object + 2), ascii_size = w(g->unicode_object + 3);
    if (localsplus == 0 || localsplus > frame_size || owner >= frame_size || firstlineno + 4 > code_size ||
        digits == 0 || digits > w(g->long_object) || ascii_size < 24 || ascii_size > 256)
        return fail("frame, code, int or str sizes are out of bounds");
    l.frame_localsplus = static_cast<int32_t>(localsplus);
    l.frame_owner = static_cast<int32_t>(owner);
    l.code_firstlineno = static_cast<int32_t>(firstlineno);
    l.long_digits = static_cast<int32_t>(digits);
    l.unicode_ascii_data = static_cast<int32_t>(ascii_size);
    l.unicode_compact_data = static_cast<int32_t>(ascii_size + 16); // + utf8_length, utf8
    l.tstate_cframe = -1;
    l.cframe_current_frame = -1;
    return l;
}

std::string unsupported_version(const PyVersion& v, const uint8_t* runtime, size_t len)
{
    PyVersion newest = newest_supported();
    if (v.major != newest.major || v.minor <= newest.minor)
        return fmt::format("CPython {}.{} is not supported (supported: {})", v.major, v.minor, supported_versions());
    std::string line = fmt::format("CPython {} is newer than this lotus-bpf knows (supported: {}) and is not traced",
                                   v.str(), supported_versions());
    if (!runtime || len < 16 || memcmp(runtime, "xdebugpy", 8) != 0)
        return line;
    // Its _Py_DebugOffsets are there, but they do not suffice: 3.15 inserted groups and fields before the frame's
    // (so a newer version's positions cannot be assumed), and they never carried the entry frame's owner value
    // (an enum 3.14 and 3.15 both changed), the stack-reference tag bits, or where the GIL holder's thread state
    // is kept, which the probes read too. A guess would give wrong spans silently; a row from its headers won't.
    uint64_t version;
    memcpy(&version, runtime + 8, 8);
    return line + fmt::format(": its _Py_DebugOffsets (version {}.{}) were read, but where that version keeps "
                              "their groups is not known, and they leave out part of what the probes read "
                              "(frame owners, stack-reference tags, the GIL holder)",
                              version >> 24 & 0xff, version >> 16 & 0xff);
}

} // namespace lotus::cpython
