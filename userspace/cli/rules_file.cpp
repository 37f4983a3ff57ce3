#include "rules_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace lotus::cli {

static std::vector<std::string> strings(const nlohmann::json& doc, const char* key, const std::string& path)
{
    std::vector<std::string> out;
    if (!doc.contains(key))
        return out;
    const auto& v = doc.at(key);
    if (!v.is_array())
        throw std::runtime_error(path + ": \"" + key + "\" must be a list of strings");
    for (const auto& item : v) {
        if (!item.is_string() || item.get<std::string>().empty())
            throw std::runtime_error(path + ": \"" + key + "\" must be a list of non-empty strings");
        out.push_back(item.get<std::string>());
    }
    return out;
}

RulesFile load_rules_file(const std::string& path)
{
    std::ifstream in(path);
    if (!in)
        throw std::runtime_error("cannot read rules file " + path + ": " + strerror(errno));
    nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
    if (doc.is_discarded())
        throw std::runtime_error(path + ": not valid JSON");
    if (!doc.is_object())
        throw std::runtime_error(path + ": expected a JSON object with \"pipelines\" and/or \"spans\"");
    for (const auto& [key, value] : doc.items())
        if (key != "pipelines" && key != "spans" && key != "$schema")
            throw std::runtime_error(path + ": unknown key \"" + key + "\"");
    return RulesFile{strings(doc, "pipelines", path), strings(doc, "spans", path)};
}

} // namespace lotus::cli
