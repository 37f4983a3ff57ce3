// Minimal JSON text helpers for the streaming writers.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace lotus::exporter {

// A JSON string literal, quotes included.
std::string json_string(std::string_view s);
// The same, appended to `out` (the exporters' inner loops).
void append_json_string(std::string& out, std::string_view s);
// A JSON array of string literals.
std::string json_strings(const std::vector<std::string>& v);

} // namespace lotus::exporter
