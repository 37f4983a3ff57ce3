// --rules FILE: pipelines, spans and (optionally) the torch/torchvision knowledge from a JSON file
// (schemas/rules.schema.json). `lotus-bpf rules` writes the built-in knowledge out as such a file.
#pragma once
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "model/framework.h"

namespace lotus::cli {

struct RulesFile {
    std::vector<std::string> pipelines; // class-name globs, like --pipeline
    std::vector<std::string> spans;     // [FILE_GLOB:]QUALNAME_GLOB, like --span
    // Its "framework" object, in place of the built-in one; null where it has none.
    std::shared_ptr<const model::framework::Framework> framework;
};

// Throws std::runtime_error with a one-line reason (unreadable file, invalid JSON, wrong shape).
RulesFile load_rules_file(const std::string& path);

// The "framework" object of a rules file (and of a record file's header), and back. parse_framework throws
// std::runtime_error naming `where` and the key at fault.
nlohmann::ordered_json framework_json(const model::framework::Framework& fw);
model::framework::Framework parse_framework(const nlohmann::json& j, const std::string& where);

// `lotus-bpf rules`: the built-in rules as a rules file, to stdout or into `path` (written whole or not at all).
int write_builtin_rules(const std::string& path);

} // namespace lotus::cli
