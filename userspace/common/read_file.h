// A whole file's bytes, read with read(2) (a /proc file is generated as it is read: no size to trust).
#pragma once
#include <optional>
#include <string>

namespace lotus::common {

// nullopt when the file cannot be opened or read.
std::optional<std::string> read_file(const std::string& path);

} // namespace lotus::common
