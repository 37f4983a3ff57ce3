#include "rules.h"

#include <fnmatch.h>

#include "lotus_abi.h"

namespace lotus::model {

namespace {

bool ends_with(const std::string& s, const std::string& suffix)
{
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool in_file(const CodeInfo& code, const char* path_part) { return code.file.find(path_part) != std::string::npos; }

// Code objects carry a qualified name from 3.11 on ("Class.method"); 3.10's carry the bare name.
bool unqualified(const CodeInfo& code) { return code.name.find('.') == std::string::npos; }

// "Class.method" (class as a suffix or glob), or the bare method name where the version has no qualnames.
bool method_is(const CodeInfo& code, const std::string& cls_suffix, const std::string& method)
{
    return ends_with(code.name, cls_suffix + "." + method) || code.name == method;
}

} // namespace

bool glob_match(const std::string& pattern, const std::string& text)
{
    return fnmatch(pattern.c_str(), text.c_str(), 0) == 0;
}

Rules::Rules(std::vector<std::string> pipeline_classes, std::vector<std::string> spans)
    : pipeline_classes_(std::move(pipeline_classes))
{
    pipeline_classes_.insert(pipeline_classes_.begin(), "Compose");
    for (auto& s : spans) {
        auto colon = s.find(':');
        spans_.push_back(colon == std::string::npos ? SpanRule{s, "*", s}
                                                    : SpanRule{s, s.substr(0, colon), s.substr(colon + 1)});
    }
}

std::vector<std::string> Rules::unmatched_spans() const
{
    std::vector<std::string> out;
    for (const auto& r : spans_)
        if (!r.matched)
            out.push_back(r.text);
    return out;
}

CodeRole Rules::classify(const CodeInfo& code) const
{
    CodeRole role;
    role.flags = LOTUS_ROLE_CLASSIFIED;
    for (const auto& r : spans_) {
        if (glob_match(r.name_glob, code.name) && glob_match(r.file_glob, code.file)) {
            r.matched = true;
            role.span = true;
            return role; // emitted: not SKIP
        }
    }
    for (const auto& cls : pipeline_classes_) {
        if (glob_match(cls + ".__call__", code.name)) {
            role.pipeline = true;
            role.flags |= LOTUS_ROLE_PIPELINE;
            return role;
        }
    }
    if (code.name == "__call__") {
        // Without a qualified name (3.10) any __call__ may be a pipeline: BPF treats it as one, and the
        // engine keeps the calls whose self is of a pipeline class.
        role.pipeline = true;
        role.pipeline_if_self = true;
        role.flags |= LOTUS_ROLE_PIPELINE;
        return role;
    }
    // Everything else is not emitted for its own sake; ops are emitted because their caller is a pipeline.
    role.flags |= LOTUS_ROLE_SKIP;
    if (code.name == "_worker_loop" && in_file(code, "torch/utils/data/_utils/worker.py")) {
        // A DataLoader worker's main loop: which worker it is, and the index of the batch it is preparing.
        role.worker_loop = true;
        // Its own calls into Python are few; one of them marks an IterableDataset worker's end of data.
        role.flags |= LOTUS_ROLE_CAPTURE | LOTUS_ROLE_EMIT_CALLEES;
        role.capture_locals = {"worker_id", "idx"};
    } else if (method_is(code, "Queue", "put") && in_file(code, "multiprocessing/queues.py")) {
        // A worker's data_queue.put((idx, data)): its `with self._notempty` enters Python from C.
        role.queue_put = true;
        role.flags |= LOTUS_ROLE_EMIT_CALLEES;
    } else if (method_is(code, "DataLoaderIter", "__next__") && in_file(code, "torch/utils/data/dataloader.py")) {
        // (the engine also checks that self is a *DataLoaderIter)
        role.loader_next = true;
        role.flags &= ~LOTUS_ROLE_SKIP;
    } else if (method_is(code, "DataLoaderIter", "__init__") && in_file(code, "torch/utils/data/dataloader.py")) {
        // _MultiProcessingDataLoaderIter.__init__ forks the workers; the base class's __init__ is inlined
        // into it, so both names are kept and the engine treats nested ones as one.
        role.iter_init = true;
        role.flags &= ~LOTUS_ROLE_SKIP;
        role.flags |= LOTUS_ROLE_OBJ1; // the DataLoader it iterates
    }
    role.internal = code.file.rfind("<frozen ", 0) == 0;
    role.fetcher = in_file(code, "torch/utils/data/_utils/fetch.py") && code.name.find("fetch") != std::string::npos;
    role.getitem = method_is(code, "", "__getitem__");
    if (role.getitem) // its direct calls into Python make up a sample when no pipeline call does; its index
        role.flags |= LOTUS_ROLE_EMIT_CALLEES | LOTUS_ROLE_ARG1;
    return role;
}

bool Rules::pipeline_class(const std::string& type_name) const
{
    auto dot = type_name.rfind('.');
    std::string cls = dot == std::string::npos ? type_name : type_name.substr(dot + 1);
    for (const auto& glob : pipeline_classes_)
        if (glob_match(glob, cls))
            return true;
    return false;
}

std::string Rules::op_name(const CodeInfo& code, const std::string* self_type) const
{
    // 3.10 names carry no class: dunder methods and nn.Module's wrappers are still methods.
    bool method = unqualified(code) ? (code.name.rfind("__", 0) == 0 || code.name == "_call_impl" ||
                                       code.name == "_wrapped_call_impl" || code.name == "forward")
                                    : code.name.find("<locals>") == std::string::npos;
    if (method && self_type && !self_type->empty()) {
        // tp_name of heap types is the bare class name; of static types "module.Class".
        auto dot = self_type->rfind('.');
        return dot == std::string::npos ? *self_type : self_type->substr(dot + 1);
    }
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
