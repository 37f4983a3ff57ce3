#include "rules_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/output_file.h"
#include "lotus_abi.h"
#include "outputs.h"

namespace lotus::cli {

namespace fw = model::framework;

namespace {

std::vector<std::string> strings(const nlohmann::json& doc, const char* key, const std::string& path,
                                 bool allow_empty = false)
{
    std::vector<std::string> out;
    if (!doc.contains(key))
        return out;
    const auto& v = doc.at(key);
    if (!v.is_array())
        throw std::runtime_error(path + ": \"" + key + "\" must be a list of strings");
    for (const auto& item : v) {
        if (!item.is_string() || (!allow_empty && item.get<std::string>().empty()))
            throw std::runtime_error(path + ": \"" + key + "\" must be a list of non-empty strings");
        out.push_back(item.get<std::string>());
    }
    return out;
}

std::string string_at(const nlohmann::json& j, const char* key, const std::string& where, bool required = true)
{
    if (!j.contains(key)) {
        if (required)
            throw std::runtime_error(where + ": \"" + key + "\" is missing");
        return {};
    }
    if (!j.at(key).is_string())
        throw std::runtime_error(where + ": \"" + key + "\" must be a string");
    return j.at(key).get<std::string>();
}

void only_keys(const nlohmann::json& j, std::initializer_list<const char*> keys, const std::string& where)
{
    for (const auto& [key, value] : j.items())
        if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; }))
            throw std::runtime_error(where + ": unknown key \"" + key + "\"");
}

fw::CodeRow parse_row(const nlohmann::json& j, const std::string& where)
{
    if (!j.is_object())
        throw std::runtime_error(where + ": a code row must be an object");
    only_keys(j, {"file", "class", "name", "match", "kind", "flags", "emitted", "locals"}, where);
    fw::CodeRow row;
    row.file = string_at(j, "file", where, false);
    row.cls = string_at(j, "class", where, false);
    row.name = string_at(j, "name", where);
    if (row.name.empty())
        throw std::runtime_error(where + ": \"name\" must not be empty");
    if (!fw::match_of(string_at(j, "match", where), row.match))
        throw std::runtime_error(where + ": \"match\" must be exact, method or contains");
    std::string kind = string_at(j, "kind", where);
    if (!fw::kind_of(kind, row.kind) || row.kind == model::CodeKind::Span || row.kind == model::CodeKind::ObjectCall ||
        row.kind == model::CodeKind::Scope)
        throw std::runtime_error(where + ": unknown kind \"" + kind + "\"");
    for (const auto& f : strings(j, "flags", where)) {
        const auto& names = fw::role_flag_names();
        auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return f == n.first; });
        if (it == names.end())
            throw std::runtime_error(where + ": unknown flag \"" + f + "\"");
        row.flags |= it->second;
    }
    if (j.contains("emitted") && !j.at("emitted").is_boolean())
        throw std::runtime_error(where + ": \"emitted\" must be true or false");
    row.emitted = j.value("emitted", false);
    row.locals = strings(j, "locals", where);
    // Knowledge that would do nothing is refused: BPF reports a capturing row's first locals, the engine reads
    // the first as the worker id or the rank.
    bool capture = row.flags & LOTUS_ROLE_CAPTURE;
    if (capture != !row.locals.empty())
        throw std::runtime_error(where + ": the \"capture\" flag and \"locals\" go together");
    if (row.locals.size() > LOTUS_SLOTS_PER_ROLE)
        throw std::runtime_error(where + fmt::format(": at most {} locals", LOTUS_SLOTS_PER_ROLE));
    if ((row.kind == model::CodeKind::WorkerLoop || row.kind == model::CodeKind::RankMain) && !capture)
        throw std::runtime_error(where + ": a " + fw::kind_name(row.kind) + " row captures its local (\"capture\", \"locals\")");
    return row;
}

} // namespace

nlohmann::ordered_json framework_json(const fw::Framework& f)
{
    using J = nlohmann::ordered_json;
    J code = J::array();
    for (const auto& r : f.code) {
        J flags = J::array();
        for (const auto& [name, bit] : fw::role_flag_names())
            if (r.flags & bit)
                flags.push_back(name);
        J row = J::object();
        row["file"] = r.file;
        row["class"] = r.cls;
        row["name"] = r.name;
        row["match"] = fw::match_name(r.match);
        row["kind"] = fw::kind_name(r.kind);
        row["flags"] = std::move(flags);
        row["emitted"] = r.emitted;
        row["locals"] = r.locals;
        code.push_back(std::move(row));
    }
    J native = J::array();
    for (const auto& n : f.native_set)
        native.push_back(J{{"library", n.library}, {"symbol", n.symbol}});
    J o = J::object();
    o["code"] = std::move(code);
    o["object_call_methods"] = f.object_call_methods;
    o["scope_names"] = f.scope_names;
    o["container_classes"] = f.container_classes;
    o["pipeline_class"] = f.pipeline_class;
    o["loader_class"] = f.loader_class;
    o["loader_iterator_suffix"] = f.loader_iterator_suffix;
    o["single_process_mark"] = f.single_process_mark;
    o["worker_module"] = f.worker_module;
    o["resume_global"] = f.resume_global;
    o["iterable_stop_global"] = f.iterable_stop_global;
    o["native_set"] = std::move(native);
    o["sample_anchors"] = f.sample_anchors;
    J helpers = J::array();
    for (const auto& h : f.helpers)
        helpers.push_back(J{{"command", h.command}, {"role", h.role}});
    o["helpers"] = std::move(helpers);
    return o;
}

// Every key is required: a file that leaves one out would silently run without that knowledge.
fw::Framework parse_framework(const nlohmann::json& j, const std::string& where)
{
    const std::string at = where + ": \"framework\"";
    if (!j.is_object())
        throw std::runtime_error(at + " must be an object");
    only_keys(j,
              {"code", "object_call_methods", "scope_names", "container_classes", "pipeline_class", "loader_class",
               "loader_iterator_suffix", "single_process_mark", "worker_module", "resume_global",
               "iterable_stop_global", "native_set", "sample_anchors", "helpers"},
              at);
    for (const char* key : {"code", "object_call_methods", "scope_names", "container_classes", "native_set", "helpers"})
        if (!j.contains(key))
            throw std::runtime_error(at + ": \"" + key + "\" is missing");
    fw::Framework f;
    if (!j.at("code").is_array())
        throw std::runtime_error(at + ": \"code\" must be a list of rows");
    size_t i = 0;
    for (const auto& row : j.at("code"))
        f.code.push_back(parse_row(row, at + " code row " + std::to_string(i++)));
    f.object_call_methods = strings(j, "object_call_methods", at);
    f.scope_names = strings(j, "scope_names", at);
    f.container_classes = strings(j, "container_classes", at);
    f.pipeline_class = string_at(j, "pipeline_class", at);
    f.loader_class = string_at(j, "loader_class", at);
    f.loader_iterator_suffix = string_at(j, "loader_iterator_suffix", at);
    f.single_process_mark = string_at(j, "single_process_mark", at);
    f.worker_module = string_at(j, "worker_module", at);
    f.resume_global = string_at(j, "resume_global", at);
    f.iterable_stop_global = string_at(j, "iterable_stop_global", at);
    if (!j.at("native_set").is_array())
        throw std::runtime_error(at + ": \"native_set\" must be a list of {library, symbol}");
    for (const auto& n : j.at("native_set")) {
        if (!n.is_object())
            throw std::runtime_error(at + ": \"native_set\" must be a list of {library, symbol}");
        only_keys(n, {"library", "symbol"}, at + " native_set");
        fw::NativeRow row{string_at(n, "library", at + " native_set"), string_at(n, "symbol", at + " native_set")};
        if (row.library.empty() || row.symbol.empty())
            throw std::runtime_error(at + ": a native_set row needs a library and a symbol");
        f.native_set.push_back(std::move(row));
    }
    // Optional: files written before it have none (and lotus-bpf then named no sample after a caller's pattern).
    if (j.contains("sample_anchors"))
        f.sample_anchors = strings(j, "sample_anchors", at);
    if (!j.at("helpers").is_array())
        throw std::runtime_error(at + ": \"helpers\" must be a list of {command, role}");
    for (const auto& h : j.at("helpers")) {
        if (!h.is_object())
            throw std::runtime_error(at + ": \"helpers\" must be a list of {command, role}");
        only_keys(h, {"command", "role"}, at + " helpers");
        fw::HelperRow row{string_at(h, "command", at + " helpers"), string_at(h, "role", at + " helpers")};
        if (row.command.empty() || row.role.empty())
            throw std::runtime_error(at + ": a helpers row needs a command and a role");
        f.helpers.push_back(std::move(row));
    }
    return f;
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
        throw std::runtime_error(path + ": expected a JSON object with \"pipelines\", \"spans\" and/or \"framework\"");
    only_keys(doc, {"pipelines", "spans", "framework", "$schema"}, path);
    RulesFile out{strings(doc, "pipelines", path), strings(doc, "spans", path), nullptr};
    if (doc.contains("framework"))
        out.framework = std::make_shared<const fw::Framework>(parse_framework(doc.at("framework"), path));
    return out;
}

int write_builtin_rules(const std::string& path)
{
    nlohmann::ordered_json doc = nlohmann::ordered_json::object();
    doc["pipelines"] = nlohmann::ordered_json::array();
    doc["spans"] = nlohmann::ordered_json::array();
    doc["framework"] = framework_json(fw::builtin());
    std::string text = doc.dump(2) + "\n";
    if (path.empty() || path == "-") {
        fwrite(text.data(), 1, text.size(), stdout);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    try {
        common::OutputFile out(path); // (a link, a missing directory: one line, nothing written)
        out.write(text);
        return out.commit() ? 0 : kExitOutputFailed;
    } catch (const std::runtime_error& e) {
        fmt::print(stderr, "lotus-bpf: {}\n", e.what());
        return kExitOutputFailed;
    }
}

} // namespace lotus::cli
