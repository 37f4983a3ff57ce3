#include "debug_offsets.h"

#include <cstring>
#include <fmt/format.h>

namespace lotus::target {

namespace {

// Field positions (in u64 words) of the 3.13 _Py_DebugOffsets (Include/internal/pycore_runtime.h).
enum Word : size_t {
    kCookie = 0, kVersion = 1, kFreeThreaded = 2,
    kTstate = 3 + 3 + 13,             // thread_state: size, prev, next, interp, current_frame, ...
    kFrame = kTstate + 9,             // interpreter_frame: size, previous, executable, instr_ptr, localsplus, owner
    kCode = kFrame + 6,               // code_object: size, filename, name, qualname, linetable, firstlineno,
                                      //   argcount, localsplusnames, localspluskinds, co_code_adaptive
    kObject = kCode + 10,             // pyobject: size, ob_type
    kType = kObject + 2,              // type_object: size, tp_name, tp_repr, tp_flags
    kTuple = kType + 4,               // tuple_object: size, ob_item, ob_size
    kList = kTuple + 3,
    kDict = kList + 3,
    kFloat = kDict + 3,
    kLong = kFloat + 2,               // long_object: size, lv_tag, ob_digit
    kBytes = kLong + 3,
    kUnicode = kBytes + 3,            // unicode_object: size, state, length, asciiobject_size
    kEnd = kUnicode + 4,
};
static_assert(kEnd * 8 == kDebugOffsetsBytes);

} // namespace

std::optional<lotus_py_layout> layout_from_debug_offsets(const uint8_t* buf, size_t len, const lotus_py_layout& base,
                                                         std::string* why)
{
    auto fail = [&](std::string reason) -> std::optional<lotus_py_layout> {
        if (why)
            *why = std::move(reason);
        return std::nullopt;
    };
    if (!buf || len < kDebugOffsetsBytes)
        return fail("too short");
    if (memcmp(buf, "xdebugpy", 8) != 0)
        return fail("no \"xdebugpy\" cookie");
    auto w = [&](size_t i) {
        uint64_t v;
        memcpy(&v, buf + i * 8, 8);
        return v;
    };
    uint64_t version = w(kVersion);
    if ((version >> 24) != 3 || ((version >> 16) & 0xff) < 13)
        return fail(fmt::format("version {:#x} is not 3.13 or later", version));
    if (w(kFreeThreaded))
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
        {kTstate, 4, 1 << 16, &lotus_py_layout::tstate_current_frame, "thread_state.current_frame"},
        {kFrame, 1, 4096, &lotus_py_layout::frame_previous, "interpreter_frame.previous"},
        {kFrame, 2, 4096, &lotus_py_layout::frame_code, "interpreter_frame.executable"},
        {kCode, 1, 4096, &lotus_py_layout::code_filename, "code_object.filename"},
        {kCode, 3, 4096, &lotus_py_layout::code_name, "code_object.qualname"},
        {kCode, 7, 4096, &lotus_py_layout::code_localsplusnames, "code_object.localsplusnames"},
        {kObject, 1, 4096, &lotus_py_layout::object_type, "pyobject.ob_type"},
        {kType, 1, 4096, &lotus_py_layout::type_name, "type_object.tp_name"},
        {kType, 3, 4096, &lotus_py_layout::type_flags, "type_object.tp_flags"},
        {kTuple, 1, 4096, &lotus_py_layout::tuple_items, "tuple_object.ob_item"},
        {kTuple, 2, 4096, &lotus_py_layout::tuple_size, "tuple_object.ob_size"},
        {kLong, 1, 4096, &lotus_py_layout::long_size, "long_object.lv_tag"},
        {kUnicode, 1, 4096, &lotus_py_layout::unicode_state, "unicode_object.state"},
        {kUnicode, 2, 4096, &lotus_py_layout::unicode_length, "unicode_object.length"},
    };
    lotus_py_layout l = base;
    for (const auto& want : wants) {
        auto v = field(want.group, want.index, want.max, want.what);
        if (!v)
            return fail(fmt::format("{} is out of bounds", want.what));
        l.*want.dst = *v;
    }
    // Fields that are not 8 bytes wide or lie at the end of their structure.
    uint64_t frame_size = w(kFrame), code_size = w(kCode);
    uint64_t localsplus = w(kFrame + 4), owner = w(kFrame + 5), firstlineno = w(kCode + 5);
    uint64_t digits = w(kLong + 2), ascii_size = w(kUnicode + 3);
    if (localsplus == 0 || localsplus > frame_size || owner >= frame_size || firstlineno + 4 > code_size ||
        digits == 0 || digits > w(kLong) || ascii_size < 24 || ascii_size > 256)
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

} // namespace lotus::target
