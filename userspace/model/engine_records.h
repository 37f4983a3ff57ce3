// What the engine's files share: reading a record's fields (engine.cpp and its parts by concern).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "common/utf8.h"

namespace lotus::model {
namespace {

inline std::string decode(const char* buf, size_t cap, uint8_t kind)
{
    if (kind != 0 && kind != 1 && kind != 2 && kind != 4)
        return "?"; // unreadable (0xff), or a corrupt record
    // Bytes (paths, UTF-8 names): valid sequences kept, others replaced, so outputs stay valid UTF-8 JSON.
    if (kind == 0)
        return common::valid_utf8(std::string_view(buf, strnlen(buf, cap)));
    // A non-ASCII compact str: its code points (Latin-1, UCS-2 or UCS-4 units), encoded as UTF-8.
    std::string out;
    for (size_t i = 0; i + kind <= cap; i += kind) {
        uint32_t cp = 0;
        memcpy(&cp, buf + i, kind);
        if (cp == 0)
            break;
        common::append_code_point(out, cp);
    }
    return out;
}

template <typename T>
const T* as(const void* data, size_t len)
{
    return len >= sizeof(T) ? static_cast<const T*>(data) : nullptr;
}

} // namespace
} // namespace lotus::model
