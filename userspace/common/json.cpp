#include "json.h"

#include <fmt/format.h>

namespace lotus::exporter {

std::string json_string(std::string_view s)
{
    std::string out;
    out.reserve(s.size() + 2);
    out += '"';
    for (unsigned char c : s) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
            if (c < 0x20 || c >= 0x7f)
                out += fmt::format("\\u{:04x}", c); // bytes from the target are not trusted to be UTF-8
            else
                out += static_cast<char>(c);
        }
    }
    out += '"';
    return out;
}

} // namespace lotus::exporter
