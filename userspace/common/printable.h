// Text from the target (class and op names, command lines, file paths, thread and library names) on its way to a
// terminal or a text file: the traced process chooses these bytes, so none of its control characters may reach
// the operator's terminal raw (an escape sequence could retitle the window, move the cursor, hide lines or answer
// back). The one choke point of every text output (the summary, `top`, log lines on stderr); JSON outputs are
// escaped by their JSON writer instead and keep the exact name.
//
// Escaped: C0 controls (U+0000-U+001F) as \a \b \t \n \v \f \r \e or \xNN, DEL as \x7f, C1 controls
// (U+0080-U+009F, in UTF-8) as \u0080-\u009f, and each byte that is not part of valid UTF-8 as \xNN (\x80-\xff).
// Valid UTF-8 printable text, backslashes included, is kept as is: printable(printable(s)) == printable(s).
#pragma once
#include <string>
#include <string_view>

namespace lotus::common {

std::string printable(std::string_view s);
// The same, but '\n' kept: for a whole text whose line breaks are the writer's own (the summary, a log line
// from a library). A name that could hold a newline goes through printable() where it is formatted.
std::string printable_lines(std::string_view s);

} // namespace lotus::common
