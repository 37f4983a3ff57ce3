#include "printable.h"

#include "utf8.h"

namespace lotus::common {

namespace {

constexpr char kHex[] = "0123456789abcdef";

void append_hex(std::string& out, unsigned char c)
{
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 0xf];
}

// s with its control characters and invalid bytes escaped; '\n' kept where keep_newline.
std::string escape(std::string_view s, bool keep_newline)
{
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        auto c = static_cast<unsigned char>(s[i]);
        size_t len = utf8_sequence(s, i);
        if (len == 0) { // not UTF-8: the byte as it is, in hex
            append_hex(out, c);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            switch (c) {
            case '\n':
                out += keep_newline ? "\n" : "\\n";
                break;
            case '\a': out += "\\a"; break;
            case '\b': out += "\\b"; break;
            case '\t': out += "\\t"; break;
            case '\v': out += "\\v"; break;
            case '\f': out += "\\f"; break;
            case '\r': out += "\\r"; break;
            case 0x1b: out += "\\e"; break;
            default: append_hex(out, c);
            }
            i++;
        } else if (c == 0xc2 && static_cast<unsigned char>(s[i + 1]) < 0xa0) { // U+0080-U+009F: C1 controls
            auto cp = static_cast<unsigned char>(s[i + 1]);
            out += "\\u00";
            out += kHex[cp >> 4];
            out += kHex[cp & 0xf];
            i += 2;
        } else {
            out.append(s.data() + i, len);
            i += len;
        }
    }
    return out;
}

} // namespace

std::string printable(std::string_view s) { return escape(s, false); }

std::string printable_lines(std::string_view s) { return escape(s, true); }

} // namespace lotus::common
