// `lotus-bpf diff A B`: each run a summary JSON (--summary-json) or a record file, reconstructed here.
#pragma once
#include <string>

namespace lotus::cli {

// Prints the comparison; returns the exit status (1 with one line on stderr when a run cannot be read).
// html: also write the comparison as an HTML page there (empty: none).
int run_diff(const std::string& a, const std::string& b, const std::string& html = "");

} // namespace lotus::cli
