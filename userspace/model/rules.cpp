#include "rules.h"

#include <fnmatch.h>

#include "lotus_abi.h"
#include "model/framework.h"

namespace lotus::model {

namespace {

bool ends_with(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Code objects carry a qualified name from 3.11 on ("Class.method"); 3.10's carry the bare name.
bool unqualified(const CodeInfo& code) { return code.name.find('.') == std::string::npos; }

// "Class.method" (class as a suffix), or the bare method name where the version has no qualnames.
bool method_is(const CodeInfo& code, const std::string& cls_suffix, const std::string& method)
{
    return ends_with(code.name, cls_suffix + "." + method) || code.name == method;
}

std::string last_part(const std::string& qualname)
{
    auto dot = qualname.rfind('.');
    return dot == std::string::npos ? qualname : qualname.substr(dot + 1);
}

bool one_of(const std::string& s, const std::vector<std::string>& names)
{
    for (auto n : names)
        if (s == n)
            return true;
    return false;
}

bool matches(const framework::CodeRow& row, const CodeInfo& code)
{
    if (code.file.find(row.file) == std::string::npos)
        return false;
    switch (row.match) {
    case framework::NameMatch::Exact:
        return code.name == row.name;
    case framework::NameMatch::Method:
        return method_is(code, row.cls, row.name);
    case framework::NameMatch::Contains:
        return code.name.find(row.name) != std::string::npos;
    }
    return false;
}

} // namespace

const SlotCode* slot_code(uint64_t code)
{
    static const auto codes = [] {
        std::vector<SlotCode> v(LOTUS_SLOTS);
        auto set = [&](int slot, const char* name, CodeKind kind) {
            v[static_cast<size_t>(slot)] = SlotCode{CodeInfo{name, "", 0}, CodeRole{}};
            v[static_cast<size_t>(slot)].role.flags = lotus_slot_role(static_cast<uint64_t>(slot));
            v[static_cast<size_t>(slot)].role.kind = kind;
        };
        set(LOTUS_SLOT_CALL, "__call__", CodeKind::ObjectCall);
        set(LOTUS_SLOT_ITER, "__iter__", CodeKind::LoaderIter);
        set(LOTUS_SLOT_NEXT, "__next__", CodeKind::LoaderNext);
        set(LOTUS_SLOT_INIT, "__init__", CodeKind::IterInit);
        return v;
    }();
    return code > 0 && code < LOTUS_SLOTS ? &codes[code] : nullptr;
}

bool glob_match(const std::string& pattern, const std::string& text)
{
    return fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

std::string class_name(const std::string& tp_name) { return last_part(tp_name); }

Rules::Rules(std::vector<std::string> pipeline_classes, std::vector<std::string> spans,
             std::shared_ptr<const framework::Framework> fw)
    : fw_(fw ? std::move(fw) : std::shared_ptr<const framework::Framework>(&framework::builtin(), [](auto*) {})),
      pipeline_classes_(std::move(pipeline_classes))
{
    if (!fw_->pipeline_class.empty())
        pipeline_classes_.insert(pipeline_classes_.begin(), fw_->pipeline_class);
    for (auto& s : spans) {
        auto colon = s.find(':');
        spans_.push_back(colon == std::string::npos ? SpanRule{s, "*", s}
                                                    : SpanRule{s, s.substr(0, colon), s.substr(colon + 1)});
    }
}

CodeRole Rules::classify(const CodeInfo& code) const
{
    CodeRole role;
    role.flags = LOTUS_ROLE_CLASSIFIED;
    role.internal = code.file.rfind("<frozen ", 0) == 0;
    for (size_t i = 0; i < spans_.size(); i++) {
        const auto& r = spans_[i];
        if (glob_match(r.name_glob, code.name) && glob_match(r.file_glob, code.file)) {
            std::string m = last_part(code.name);
            r.maybe_inlined |= m != "__call__" && m != "__iter__" && m != "__next__";
            role.kind = CodeKind::Span;
            role.span_rule = static_cast<int>(i);
            return role; // emitted: not SKIP
        }
    }
    // Everything else is not emitted for its own sake: ops are emitted because their caller is a pipeline.
    role.flags |= LOTUS_ROLE_SKIP;
    const std::string method = last_part(code.name);
    if (one_of(method, fw_->scope_names)) { // a comprehension's or generator expression's code
        role.kind = CodeKind::Scope;
        role.flags |= LOTUS_ROLE_SCOPE;
        return role;
    }
    if (one_of(method, fw_->object_call_methods)) { // the code of calling an object (its self is the object)
        // BPF emits it when self's class is a pipeline class (or not classified yet); so too the calls it makes.
        role.kind = CodeKind::ObjectCall;
        role.flags |= LOTUS_ROLE_SELF_PIPELINE;
        return role;
    }
    for (const auto& row : fw_->code) {
        if (!matches(row, code))
            continue;
        role.kind = row.kind;
        role.flags |= row.flags;
        if (row.emitted)
            role.flags &= ~LOTUS_ROLE_SKIP;
        role.capture_locals.assign(row.locals.begin(), row.locals.end());
        break;
    }
    return role;
}

TypeRole Rules::classify_type(const std::string& name, const std::vector<std::string>& bases) const
{
    TypeRole t;
    t.flags = LOTUS_TYPE_DESCRIBED | LOTUS_TYPE_CLASSIFIED;
    if (name == "cell")
        t.flags |= LOTUS_TYPE_CELL;
    std::vector<std::string> classes{class_name(name)};
    for (const auto& b : bases)
        if (!b.empty())
            classes.push_back(class_name(b));
    bool pipeline = false, container = false, loader = false, iterator = false;
    for (const auto& cls : classes) {
        for (const auto& glob : pipeline_classes_)
            pipeline |= glob_match(glob, cls);
        container |= one_of(cls, fw_->container_classes);
        loader |= cls == fw_->loader_class;
        iterator |= !fw_->loader_iterator_suffix.empty() && ends_with(cls, fw_->loader_iterator_suffix);
    }
    t.kind = iterator    ? TypeKind::LoaderIterator
             : loader    ? TypeKind::Loader
             : container ? TypeKind::Container
             : pipeline  ? TypeKind::Pipeline
                         : TypeKind::Other;
    t.single_process = iterator && !fw_->single_process_mark.empty() &&
                       classes[0].find(fw_->single_process_mark) != std::string::npos;
    if (t.pipeline())
        t.flags |= LOTUS_TYPE_PIPELINE;
    if (t.loader() || t.loader_iterator())
        t.flags |= LOTUS_TYPE_LOADER;
    return t;
}

std::string Rules::op_name(const CodeInfo& code, const std::string* self_type) const
{
    // 3.10 names carry no class: dunder methods and nn.Module's wrappers are still methods.
    bool method = unqualified(code) ? (code.name.rfind("__", 0) == 0 || code.name == "_call_impl" ||
                                       code.name == "_wrapped_call_impl" || code.name == "forward")
                                    : code.name.find("<locals>") == std::string::npos;
    if (method && self_type && !self_type->empty())
        return class_name(*self_type); // tp_name of heap types is the bare class name; of static ones module.Class
    auto dot = code.name.rfind('.');
    if (dot == std::string::npos)
        return code.name;
    if (method && !unqualified(code)) { // the class that defines the method, when self's type could not be read
        auto prev = code.name.rfind('.', dot - 1);
        return code.name.substr(prev == std::string::npos ? 0 : prev + 1, dot - (prev == std::string::npos ? 0 : prev + 1));
    }
    return code.name.substr(dot + 1);
}

} // namespace lotus::model
