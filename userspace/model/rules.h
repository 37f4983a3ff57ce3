// How the engine classifies code and classes: which code objects are calls of an object (a pipeline's call when
// the object's class is a pipeline class), which classes are pipelines, where a sample's index, a worker's id and
// a rank live, how an op is named. What it knows of torch and torchvision is the table in framework.h.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lotus::model {

namespace framework {
struct Framework;
}

struct CodeInfo {
    std::string name; // qualified name (3.11+), bare name (3.10)
    std::string file;
    int firstlineno = 0;
};

// What a code object is, for the engine (the BPF side gets LOTUS_ROLE_* flags).
enum class CodeKind : uint8_t {
    Other,      // nothing by itself (an op when a pipeline calls it)
    Span,       // named by --span: every call is a span
    ObjectCall, // a call of an object (__call__, forward, nn.Module's call wrappers): a pipeline call when the
                // object's class is a pipeline class (TypeRole::pipeline), whatever the code object is
    GetItem,    // a dataset's __getitem__: its localsplus[1] is the sample index
    WorkerLoop, // torch's DataLoader worker loop: captures the worker id
    RankMain,   // torch.multiprocessing.spawn's _wrap: captures the process's rank
    LoaderIter, // DataLoader.__iter__: an epoch of that loader begins; it returns the iterator
    IterInit,   // a DataLoader iterator's __init__(self, loader)
    LoaderNext, // a DataLoader iterator's __next__: the training loop waiting for a batch
    Fetcher,    // torch's dataset fetchers (and their comprehensions): a batch being built
    Scope,      // a comprehension or generator expression: part of the function it is written in (inside a
                // pipeline, the pipeline's own frame, never an op; the calls it makes are judged by that function)
};

struct CodeRole {
    uint32_t flags = 0; // LOTUS_ROLE_* bits for the BPF side
    CodeKind kind = CodeKind::Other;
    bool internal = false; // the import machinery: never an op of an implicit sample
    int span_rule = -1;    // Span: which --span pattern (spans() index)
    // Locals to capture when a frame of this code is walked past, by name; capture resolves them to slots
    // (capture_slots, same order, LOTUS_NO_SLOT when absent) from the target's co_localsplusnames. What the
    // value means follows from the kind (WorkerLoop: the worker id; RankMain: the rank).
    std::vector<std::string> capture_locals;
    std::vector<uint8_t> capture_slots;
};

// What a class is, for the engine. One kind per class: torch's own classes first, then containers, then
// pipeline classes (a user glob that also matches a DataLoader does not make it a pipeline).
enum class TypeKind : uint8_t {
    Other,
    Pipeline,       // Compose-like (its calls are samples; inside a pipeline, an op with ops)
    Container,      // RandomApply, RandomChoice, RandomOrder: inside a pipeline, an op whose calls are ops
    Loader,         // a torch DataLoader (or a subclass)
    LoaderIterator, // a DataLoader iterator
};

struct TypeRole {
    uint32_t flags = 0; // LOTUS_TYPE_* bits for the BPF side
    TypeKind kind = TypeKind::Other;
    bool single_process = false; // a LoaderIterator of a num_workers=0 loader: next() builds the batch itself

    bool pipeline() const { return kind == TypeKind::Pipeline || kind == TypeKind::Container; }
    bool container() const { return kind == TypeKind::Container; }
    bool loader() const { return kind == TypeKind::Loader; }
    bool loader_iterator() const { return kind == TypeKind::LoaderIterator; }
};

class Rules {
public:
    // pipeline_classes: extra class-name globs whose instances play Compose's role (their calls are samples,
    // the calls they make ops). spans: "QUALNAME_GLOB" or "FILE_GLOB:QUALNAME_GLOB": functions whose every
    // call becomes a span. fw: what is known of torch and torchvision (null: framework::builtin()).
    explicit Rules(std::vector<std::string> pipeline_classes = {}, std::vector<std::string> spans = {},
                   std::shared_ptr<const framework::Framework> fw = nullptr);
    const framework::Framework& framework() const { return *fw_; }
    CodeRole classify(const CodeInfo& code) const;
    // name: tp_name; bases: the tp_names of its tp_base chain, nearest first.
    TypeRole classify_type(const std::string& name, const std::vector<std::string>& bases) const;
    // The op's display name: the class of `self` for methods (also through nn.Module's call wrappers), the
    // function's name otherwise.
    std::string op_name(const CodeInfo& code, const std::string* self_type) const;
    struct SpanRule {
        std::string text, file_glob, name_glob;
        // It matched a function other than __call__, __iter__ or __next__ (the methods every supported CPython
        // calls through a C slot): Python code may call it inline, which the default probes do not see (3.11+).
        mutable bool maybe_inlined = false;
    };
    const std::vector<SpanRule>& spans() const { return spans_; }

private:
    std::shared_ptr<const framework::Framework> fw_;
    std::vector<std::string> pipeline_classes_;
    std::vector<SpanRule> spans_;
};

// What a slot entry's `code` (LOTUS_SLOT_*, lotus_abi.h: the default probes' entries carry no code object)
// stands for: the call of an object, a DataLoader's __iter__, an iterator's __next__ or __init__, with the
// role the rules give that code. nullptr for any other value.
struct SlotCode {
    CodeInfo info;
    CodeRole role;
};
const SlotCode* slot_code(uint64_t code);

bool glob_match(const std::string& pattern, const std::string& text);
// "module.Class" (static types) or "Class" (heap types): the class name.
std::string class_name(const std::string& tp_name);

} // namespace lotus::model
