#include "cpython/python_stacks.h"

#include <cstring>
#include <fmt/format.h>
#include <set>

#include "cpython/line_table.h"

namespace lotus::cpython {

namespace {

constexpr int kMaxThreads = 512, kMaxFrames = 256;
constexpr int64_t kMaxLineTable = 1 << 20;

// A str object as UTF-8 (its kind's code points encoded), or nullopt.
std::optional<std::string> read_text(const Memory& mem, uint64_t str, const lotus_py_layout& layout)
{
    char buf[256];
    uint8_t kind = read_unicode(mem, str, layout, buf, sizeof(buf));
    if (kind == 0)
        return std::string(buf);
    if (kind != 1 && kind != 2 && kind != 4)
        return std::nullopt;
    std::string out;
    for (size_t i = 0; i + kind <= sizeof(buf) - 1; i += kind) {
        uint32_t cp = 0;
        memcpy(&cp, buf + i, kind);
        if (!cp)
            break;
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xc0 | cp >> 6);
            out += static_cast<char>(0x80 | (cp & 63));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xe0 | cp >> 12);
            out += static_cast<char>(0x80 | (cp >> 6 & 63));
            out += static_cast<char>(0x80 | (cp & 63));
        } else {
            out += static_cast<char>(0xf0 | cp >> 18);
            out += static_cast<char>(0x80 | (cp >> 12 & 63));
            out += static_cast<char>(0x80 | (cp >> 6 & 63));
            out += static_cast<char>(0x80 | (cp & 63));
        }
    }
    return out;
}

// Whether obj's type is named `name` (a code object is "code"): what tells a frame's code from a freed one.
bool type_named(const Memory& mem, uint64_t obj, const lotus_py_layout& layout, const char* name)
{
    auto type = mem.ptr(obj + layout.object_type);
    auto tp_name = type && *type ? mem.ptr(*type + layout.type_name) : std::nullopt;
    char buf[32];
    return tp_name && read_cstr(mem, *tp_name, buf, sizeof(buf)) && strcmp(buf, name) == 0;
}

// An int object's value where it is an int (not a subclass) that fits 60 bits, as BPF's int_value reads it.
std::optional<int64_t> int_value(const Memory& mem, uint64_t obj, const lotus_py_layout& layout)
{
    if (!obj || !type_named(mem, obj, layout, "int"))
        return std::nullopt;
    int64_t size = 0;
    uint32_t digits[2] = {};
    if (!mem.read(obj + layout.long_size, &size, sizeof(size)))
        return std::nullopt;
    int64_t ndigits, sign = 1;
    if (layout.long_tagged) {
        ndigits = static_cast<int64_t>(static_cast<uint64_t>(size) >> 3);
        if ((size & 3) == 1)
            return 0;
        if ((size & 3) == 2)
            sign = -1;
    } else {
        ndigits = size < 0 ? -size : size;
        sign = size < 0 ? -1 : 1;
    }
    if (ndigits == 0)
        return 0;
    if (ndigits > 2 || !mem.read(obj + layout.long_digits, digits, static_cast<size_t>(ndigits) * 4))
        return std::nullopt;
    int64_t v = digits[0] & 0x3fffffff;
    if (ndigits == 2)
        v |= static_cast<int64_t>(digits[1] & 0x3fffffff) << 30;
    return sign * v;
}

// The frame's positional arguments that hold ints.
std::vector<std::pair<std::string, int64_t>> int_args(const Memory& mem, uint64_t frame, uint64_t code,
                                                      const lotus_py_layout& layout, const StackLayout& s)
{
    std::vector<std::pair<std::string, int64_t>> out;
    int32_t argc = 0;
    if (!mem.read(code + s.code_argcount, &argc, sizeof(argc)) || argc <= 0 || argc > 64)
        return out;
    auto names = read_local_names(mem, code, layout);
    if (!names)
        return out;
    for (int32_t i = 0; i < argc && static_cast<size_t>(i) < names->size(); i++) {
        auto obj = mem.ptr(frame + layout.frame_localsplus + 8 * static_cast<uint64_t>(i));
        if (!obj)
            break;
        if (auto v = int_value(mem, *obj & ~layout.stackref_tag_mask, layout); v && !(*names)[i].empty())
            out.emplace_back((*names)[i], *v);
    }
    return out;
}

// The line a frame of `code` is at, or nullopt.
std::optional<int> frame_line(const Memory& mem, uint64_t frame, uint64_t code, const lotus_py_layout& layout,
                              const StackLayout& s)
{
    int32_t first = 0;
    auto table = mem.ptr(code + s.code_linetable);
    int64_t len = 0;
    if (!mem.read(code + layout.code_firstlineno, &first, sizeof(first)) || !table ||
        !mem.read(*table + layout.tuple_size, &len, sizeof(len)) || len < 0 || len > kMaxLineTable)
        return std::nullopt;
    std::vector<uint8_t> bytes(static_cast<size_t>(len));
    if (len && !mem.read(*table + layout.bytes_data, bytes.data(), bytes.size()))
        return std::nullopt;
    int64_t addr;
    if (s.frame_lasti >= 0) { // 3.10: the instruction's index
        int32_t lasti = 0;
        if (!mem.read(frame + s.frame_lasti, &lasti, sizeof(lasti)))
            return std::nullopt;
        addr = static_cast<int64_t>(lasti) * 2;
    } else {
        auto instr = mem.ptr(frame + s.frame_instr);
        if (!instr)
            return std::nullopt;
        // _PyInterpreterFrame_LASTI: code units from the code's first instruction (-1 before it starts)
        addr = (static_cast<int64_t>(*instr - (code + s.code_adaptive)) / 2) * 2;
        if (addr > 2 * kMaxLineTable * 8)
            return std::nullopt;
    }
    return line_for(bytes.data(), bytes.size(), s.linetable_format, first, static_cast<int>(addr));
}

// One thread's frames from its current frame down.
void walk(const Memory& mem, uint64_t frame, const lotus_py_layout& layout, const StackLayout& s, PyThreadStack& out)
{
    std::set<uint64_t> seen;
    for (int depth = 0; frame; depth++) {
        if (depth == kMaxFrames) {
            out.cut = fmt::format("deeper than {} frames", kMaxFrames);
            return;
        }
        if (!seen.insert(frame).second) {
            out.cut = "its frames changed while read (a loop)";
            return;
        }
        auto code = mem.ptr(frame + layout.frame_code);
        auto previous = mem.ptr(frame + layout.frame_previous);
        uint8_t owner = 0;
        if (!code || !previous || (layout.frame_owner >= 0 && !mem.read(frame + layout.frame_owner, &owner, 1))) {
            out.cut = fmt::format("frame {:#x} could not be read (the thread ran on)", frame);
            return;
        }
        uint64_t c = *code & ~layout.stackref_tag_mask;
        if (layout.owner_cstack >= 0 && owner == static_cast<uint8_t>(layout.owner_cstack)) {
            frame = *previous; // the evaluator's entry shim: no Python code of its own
            continue;
        }
        if (!c || !type_named(mem, c, layout, "code")) {
            out.cut = fmt::format("frame {:#x} holds no code object (the thread ran on)", frame);
            return;
        }
        auto name = read_text(mem, mem.ptr(c + layout.code_name).value_or(0), layout);
        auto file = read_text(mem, mem.ptr(c + layout.code_filename).value_or(0), layout);
        if (!name || !file) {
            out.cut = fmt::format("the code of frame {:#x} could not be read (the thread ran on)", frame);
            return;
        }
        out.frames.push_back({*name, *file, frame_line(mem, frame, c, layout, s), int_args(mem, frame, c, layout, s)});
        frame = *previous;
    }
}

} // namespace

std::optional<std::vector<PyThreadStack>> read_python_stacks(const Memory& mem, uint64_t runtime,
                                                             const lotus_py_layout& layout, const StackLayout& s,
                                                             std::string* why)
{
    auto interp = mem.ptr(runtime + s.runtime_interpreters_head);
    if (!interp || !*interp) {
        if (why)
            *why = "its interpreter state could not be read (not initialised, or finalising)";
        return std::nullopt;
    }
    auto tstate = mem.ptr(*interp + s.interp_threads_head);
    if (!tstate) {
        if (why)
            *why = "its thread list could not be read";
        return std::nullopt;
    }
    std::vector<PyThreadStack> threads;
    std::set<uint64_t> seen;
    for (uint64_t t = *tstate; t && threads.size() < kMaxThreads && seen.insert(t).second;) {
        PyThreadStack st;
        st.thread_id = mem.ptr(t + s.tstate_thread_id).value_or(0);
        if (s.tstate_native_thread_id >= 0)
            if (auto tid = mem.ptr(t + s.tstate_native_thread_id); tid && *tid && *tid < (1u << 31))
                st.tid = static_cast<uint32_t>(*tid);
        std::optional<uint64_t> frame;
        if (layout.tstate_cframe >= 0) {
            if (auto cf = mem.ptr(t + layout.tstate_cframe); cf && *cf)
                frame = mem.ptr(*cf + layout.cframe_current_frame);
            else if (cf)
                frame = 0;
        } else {
            frame = mem.ptr(t + layout.tstate_current_frame);
        }
        if (!frame)
            st.cut = "its thread state could not be read (the thread ended)";
        else
            walk(mem, *frame, layout, s, st);
        threads.push_back(std::move(st));
        auto next = mem.ptr(t + s.tstate_next);
        if (!next)
            break;
        t = *next;
    }
    return threads;
}

} // namespace lotus::cpython
