// /proc/PID/maps and the process tree, read-only.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lotus::target {

struct Mapping {
    uint64_t start = 0, end = 0, offset = 0;
    std::string perms;
    std::string path; // empty for anonymous mappings
};

std::vector<Mapping> parse_maps(const std::string& text);
// Throws std::runtime_error when the file cannot be read.
std::vector<Mapping> read_maps(int pid);

bool process_exists(int pid);
std::optional<int> parent_pid(int pid);
// Every live descendant of pid (children, grandchildren, ...), from /proc/*/stat.
std::vector<int> descendants(int pid);
std::string read_comm(int pid);

} // namespace lotus::target
