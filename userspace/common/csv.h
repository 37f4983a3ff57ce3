// CSV text for the CSV outputs (--op-csv, --waits-csv).
#pragma once
#include <string>

namespace lotus::common {

// A CSV field (RFC 4180): quoted where it holds a comma, a quote or a line break, its quotes doubled.
inline std::string csv_field(const std::string& s)
{
    if (s.find_first_of(",\"\r\n") == std::string::npos)
        return s;
    std::string q = "\"";
    for (char c : s)
        q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
}

} // namespace lotus::common
