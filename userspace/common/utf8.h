// UTF-8 for text from the target (paths, names) and from record files, which are not trusted to be UTF-8:
// valid sequences pass through unchanged, each byte that is not part of one becomes U+FFFD.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lotus::common {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD"; // U+FFFD

// The length of the valid UTF-8 sequence starting at s[i] (no overlong forms, surrogates or code points past
// U+10FFFF), or 0 when s[i] does not start one.
size_t utf8_sequence(std::string_view s, size_t i);
std::string valid_utf8(std::string_view s);
// Appends code point `cp` encoded as UTF-8 (U+FFFD for a surrogate or a value past U+10FFFF).
void append_code_point(std::string& out, uint32_t cp);

} // namespace lotus::common
