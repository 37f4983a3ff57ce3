#include "json.h"

#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/utf8.h"

namespace lotus::exporter {

namespace {
bool plain(unsigned char c) { return c >= 0x20 && c < 0x7f && c != '"' && c != '\\'; }

// The number JSON text `s` (fmt's output for a finite value) stands for: an integer where it has only digits.
nlohmann::ordered_json parsed_number(const std::string& s)
{
    const char* end = s.data() + s.size();
    if (s.find_first_not_of("-0123456789") == std::string::npos) {
        if (s[0] == '-') {
            int64_t i = 0;
            if (auto r = std::from_chars(s.data(), end, i); r.ec == std::errc() && r.ptr == end)
                return i;
        } else {
            uint64_t u = 0;
            if (auto r = std::from_chars(s.data(), end, u); r.ec == std::errc() && r.ptr == end)
                return u;
        }
    }
    double d = 0;
    std::from_chars(s.data(), end, d); // correctly rounded, whatever the locale
    return d;
}
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

nlohmann::ordered_json json_fixed(double x, int decimals)
{
    if (!std::isfinite(x))
        return nullptr;
    return parsed_number(fmt::format("{:.{}f}", x, decimals));
}

nlohmann::ordered_json json_general(double x)
{
    if (!std::isfinite(x))
        return nullptr;
    return parsed_number(fmt::format("{:g}", x));
}

nlohmann::ordered_json json_text(std::string_view s) { return common::valid_utf8(s); }

nlohmann::ordered_json json_texts(const std::vector<std::string>& v)
{
    auto out = nlohmann::ordered_json::array();
    for (const auto& s : v)
        out.push_back(json_text(s));
    return out;
}

std::string json_dump(const nlohmann::ordered_json& j)
{
    // Strings are valid UTF-8 already (json_text); the handler keeps a stray one from throwing.
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

} // namespace lotus::exporter
