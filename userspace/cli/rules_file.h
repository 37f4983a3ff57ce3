// --rules FILE: pipelines and spans from a JSON file (schemas/rules.schema.json).
#pragma once
#include <string>
#include <vector>

namespace lotus::cli {

struct RulesFile {
    std::vector<std::string> pipelines; // class-name globs, like --pipeline
    std::vector<std::string> spans;     // [FILE_GLOB:]QUALNAME_GLOB, like --span
};

// Throws std::runtime_error with a one-line reason (unreadable file, invalid JSON, wrong shape).
RulesFile load_rules_file(const std::string& path);

} // namespace lotus::cli
