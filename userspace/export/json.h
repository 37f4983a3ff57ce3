// JSON helpers: string literals for the streaming writers, and the values the summary JSON is built from
// (nlohmann::ordered_json: keys in the order they were set).
#pragma once
#include <nlohmann/json_fwd.hpp>
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

// x with `decimals` fixed decimals: the number a parser reads from fmt's "{:.Nf}" of it (so the rounding is
// fmt's), written by json_dump() without trailing zeros; with 0 decimals an integer. null where x is not finite
// (NaN or an infinity: not a JSON number).
nlohmann::ordered_json json_fixed(double x, int decimals);
// The number a parser reads from fmt's "{:g}" of x: an integer where that has no point or exponent.
nlohmann::ordered_json json_general(double x);
// A string value: valid UTF-8, each byte outside a valid sequence U+FFFD (as json_string() reads it).
nlohmann::ordered_json json_text(std::string_view s);
nlohmann::ordered_json json_texts(const std::vector<std::string>& v);
// Compact text (no spaces), non-ASCII UTF-8 as it is.
std::string json_dump(const nlohmann::ordered_json& j);

} // namespace lotus::exporter
