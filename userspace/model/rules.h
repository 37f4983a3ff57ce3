// What the engine knows about pipelines: which code objects are Compose-like, where a sample's index and a
// worker's id live, how an op is named. Built-in rules cover torchvision and torch's DataLoader.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lotus::model {

struct CodeInfo {
    std::string name; // qualified name
    std::string file;
    int firstlineno = 0;
};

struct CodeRole {
    uint32_t flags = 0; // LOTUS_ROLE_* bits for the BPF side
    bool pipeline = false;
    bool pipeline_if_self = false; // only when self is of a pipeline class (versions without qualified names)
    bool span = false;             // named by --span: every call is a span
    bool getitem = false;     // its localsplus[1] is a dataset index
    bool worker_loop = false; // torch's _worker_loop: its locals worker_id and idx are captured
    bool queue_put = false;   // multiprocessing's Queue.put: its callees mark a worker handing a batch over
    bool loader_next = false; // a DataLoader iterator's __next__: the training loop waiting for a batch
    bool iter_init = false;   // a DataLoader iterator's __init__(self, loader): a new epoch of that loader
    bool internal = false;    // the import machinery: never an op of an implicit sample
    bool fetcher = false;     // torch's dataset fetchers (and their list comprehensions): a batch being built
    // Locals to capture when a frame of this code is walked past, by name; the role sink resolves them to
    // slots (capture_slots, same order, LOTUS_NO_SLOT when absent) from the target's co_localsplusnames.
    std::vector<std::string> capture_locals;
    std::vector<uint8_t> capture_slots;
};

class Rules {
public:
    // pipeline_classes: extra class-name globs whose __call__ plays Compose's role.
    // spans: "QUALNAME_GLOB" or "FILE_GLOB:QUALNAME_GLOB": functions whose every call becomes a span.
    explicit Rules(std::vector<std::string> pipeline_classes = {}, std::vector<std::string> spans = {});
    CodeRole classify(const CodeInfo& code) const;
    // The op's display name: the class of `self` for methods (also through nn.Module's call wrappers), the
    // function's name otherwise.
    std::string op_name(const CodeInfo& code, const std::string* self_type) const;
    // Whether a class (tp_name) plays Compose's role.
    bool pipeline_class(const std::string& type_name) const;
    // --span patterns that matched no code object described so far (never seen entering the interpreter).
    std::vector<std::string> unmatched_spans() const;

private:
    struct SpanRule {
        std::string text, file_glob, name_glob;
        mutable bool matched = false;
    };
    std::vector<std::string> pipeline_classes_;
    std::vector<SpanRule> spans_;
};

bool glob_match(const std::string& pattern, const std::string& text);

} // namespace lotus::model
