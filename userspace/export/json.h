// Minimal JSON text helpers for the streaming writers.
#pragma once
#include <string>
#include <string_view>

namespace lotus::exporter {

// A JSON string literal, quotes included.
std::string json_string(std::string_view s);
// The same, appended to `out` (the exporters' inner loops).
void append_json_string(std::string& out, std::string_view s);

} // namespace lotus::exporter
