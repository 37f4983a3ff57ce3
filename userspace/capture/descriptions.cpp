#include "descriptions.h"

#include <cstring>
#include <string_view>

#include "cpython/remote_memory.h"

namespace lotus::capture {

namespace {

void complete_type(lotus_type_info& t, const cpython::Memory& mem, const lotus_py_layout& layout)
{
    if (t.unread & 1) {
        auto name = mem.ptr(t.type + layout.type_name);
        if (name && cpython::read_cstr(mem, *name, t.name, sizeof(t.name)) && t.name[0])
            t.unread &= ~1;
    }
    uint64_t base = t.type;
    bool known = true; // the chain's links so far were read
    for (int i = 0; i < LOTUS_BASES; i++) {
        if (known && base) {
            auto next = mem.ptr(base + layout.type_base);
            known = next.has_value();
            base = next.value_or(0);
        }
        uint8_t bit = static_cast<uint8_t>(2 << i);
        if (!(t.unread & bit) || !known)
            continue;
        auto name = base ? mem.ptr(base + layout.type_name) : std::nullopt;
        if (!base || (name && cpython::read_cstr(mem, *name, t.bases[i], LOTUS_BASE_LEN) && t.bases[i][0]))
            t.unread &= ~bit; // named, or past the chain's end (object): nothing to name
    }
}

// Whether obj is a code object: a frame's executable that is not one (None, on 3.13+) is never named as code.
bool is_code(const cpython::Memory& mem, uint64_t obj, const lotus_py_layout& layout)
{
    char name[8] = {};
    auto type = mem.ptr(obj + layout.object_type);
    auto tp_name = type ? mem.ptr(*type + layout.type_name) : std::nullopt;
    return tp_name && cpython::read_cstr(mem, *tp_name, name, sizeof(name)) && std::string_view(name) == "code";
}

void complete_code(lotus_code_info& c, const cpython::Memory& mem, const lotus_py_layout& layout)
{
    if (!is_code(mem, c.code, layout))
        return;
    auto fill = [&](int64_t offset, uint8_t& kind, char* buf, size_t size) {
        if (kind != 0xff)
            return;
        if (auto str = mem.ptr(c.code + offset))
            kind = cpython::read_unicode(mem, *str, layout, buf, size);
    };
    fill(layout.code_name, c.name_kind, c.name, sizeof(c.name));
    fill(layout.code_filename, c.file_kind, c.file, sizeof(c.file));
}

bool complete(const void* data)
{
    auto* h = static_cast<const lotus_event_header*>(data);
    if (h->type == LOTUS_EV_TYPE)
        return !static_cast<const lotus_type_info*>(data)->unread;
    auto* c = static_cast<const lotus_code_info*>(data);
    return c->name_kind != 0xff && c->file_kind != 0xff;
}

} // namespace

bool incomplete_description(const void* data, size_t len)
{
    auto* h = static_cast<const lotus_event_header*>(data);
    if (len < sizeof(*h))
        return false;
    if (h->type == LOTUS_EV_TYPE)
        return len >= sizeof(lotus_type_info) && !complete(data);
    return h->type == LOTUS_EV_CODE && len >= sizeof(lotus_code_info) && !complete(data);
}

std::vector<char> complete_description(const void* data, size_t len, const std::vector<uint32_t>& pids,
                                       const lotus_py_layout& layout)
{
    std::vector<char> copy(static_cast<const char*>(data), static_cast<const char*>(data) + len);
    for (uint32_t pid : pids) {
        if (complete(copy.data()))
            break;
        cpython::ProcessMemory mem(static_cast<int>(pid));
        if (reinterpret_cast<lotus_event_header*>(copy.data())->type == LOTUS_EV_TYPE)
            complete_type(*reinterpret_cast<lotus_type_info*>(copy.data()), mem, layout);
        else
            complete_code(*reinterpret_cast<lotus_code_info*>(copy.data()), mem, layout);
    }
    return copy;
}

std::pair<const void*, size_t> Completion::complete(const void* data, size_t len)
{
    completed_.clear();
    model::dispatch(data, len, *this);
    if (completed_.empty())
        return {data, len};
    return {completed_.data(), completed_.size()};
}

void Completion::process_event(const lotus_proc_event& p)
{
    if (p.h.type == LOTUS_EV_FORK)
        tree_.add(p.h.tgid, p.parent_tgid);
}

void Completion::complete_one(const void* data, size_t len)
{
    if (incomplete_description(data, len))
        completed_ = complete_description(data, len, tree_.lineage(static_cast<const lotus_event_header*>(data)->tgid),
                                          layout_);
}

} // namespace lotus::capture
