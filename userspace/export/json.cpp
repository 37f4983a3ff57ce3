#include "json.h"

#include <fmt/format.h>

#include "common/utf8.h"

namespace lotus::exporter {

namespace {
bool plain(unsigned char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; }
} // namespace

std::string json_string(std::string_view s)
{
    std::string out;
    out.reserve(s.size() + 2);
    append_json_string(out, s);
    return out;
}

void append_json_string(std::string& out, std::string_view s)
{
    out += '"';
    size_t i = 0;
    while (i < s.size()) {
        // Runs of characters that need no escaping are copied at once (names and paths nearly always are).
        size_t j = i;
        while (j < s.size() && plain(static_cast<unsigned char>(s[j])))
            j++;
        out.append(s.data() + i, j - i);
        if (j == s.size())
            break;
        auto c = static_cast<unsigned char>(s[j]);
        if (c >= 0x80) { // UTF-8 passes through as it is; a byte outside a valid sequence becomes U+FFFD
            size_t len = common::utf8_sequence(s, j);
            if (len)
                out.append(s.data() + j, len);
            else
                out += "\\ufffd";
            i = j + (len ? len : 1);
            continue;
        }
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default: out += fmt::format("\\u{:04x}", c); // control characters and DEL
        }
        i = j + 1;
    }
    out += '"';
}

std::string json_strings(const std::vector<std::string>& v)
{
    std::string out;
    for (const auto& s : v)
        out += (out.empty() ? "" : ",") + json_string(s);
    return "[" + out + "]";
}

} // namespace lotus::exporter
