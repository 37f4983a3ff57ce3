// What lotus-bpf knows of torch's and torchvision's code, as data: the one place that names framework code. The
// rules (rules.cpp), the DataLoader queue's pickles (messages.cpp) and the default native set read it. The
// built-in table can be written out as a --rules file and read back from one (cli/rules_file.h): a new torch
// that renames a function is a changed row, not a new build.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/rules.h"

namespace lotus::model::framework {

// How a row's name is matched against a code object's qualified name.
enum class NameMatch : uint8_t {
    Exact,    // the qualname is `name`
    Method,   // "...<cls>.<name>" (cls a suffix of the class's name), or the bare `name` (3.10 has no qualnames)
    Contains, // `name` is part of the qualname
};

// A framework function with a meaning. Rows are tried in order; the first that matches gives the code its role.
struct CodeRow {
    std::string file; // a part of its file's path ("": any file)
    std::string cls;  // NameMatch::Method: the class-name suffix ("": any class)
    std::string name;
    NameMatch match = NameMatch::Exact;
    CodeKind kind = CodeKind::Other;
    uint32_t flags = 0;              // LOTUS_ROLE_* bits it adds
    bool emitted = false;            // its calls are emitted for their own sake (no LOTUS_ROLE_SKIP)
    std::vector<std::string> locals; // LOTUS_ROLE_CAPTURE: the locals it reports, by name
    bool operator==(const CodeRow&) const = default;
};

// The native functions --native-map probes by default: a library glob and a symbol glob each.
struct NativeRow {
    std::string library, symbol;
    bool operator==(const NativeRow&) const = default;
};

// A helper process that a library starts, known by a part of its command line, and the role it is shown as.
struct HelperRow {
    std::string command; // a part of its command line
    std::string role;    // "forkserver"
    bool operator==(const HelperRow&) const = default;
};

struct Framework {
    std::vector<CodeRow> code;
    // The methods through which an object is called: __call__, nn.Module's forward and its call wrappers (torch
    // 1.x enters _call_impl, 2.x _wrapped_call_impl then _call_impl). Their self is the object called.
    std::vector<std::string> object_call_methods;
    // The code of a comprehension or generator expression (part of the function it is written in).
    std::vector<std::string> scope_names;
    // torchvision's container transforms (v1 and v2): called by a pipeline, they call transforms of their own.
    std::vector<std::string> container_classes;
    std::string pipeline_class;         // always a pipeline class, beside --pipeline (Compose)
    std::string loader_class;           // DataLoader
    std::string loader_iterator_suffix; // DataLoaderIter: _SingleProcess..., _MultiProcessing...
    std::string single_process_mark;    // SingleProcess: an iterator without workers
    // The DataLoader's queues: pickles whose globals come from torch's worker module.
    std::string worker_module;
    std::string resume_global;        // _ResumeIteration: a persistent worker's new epoch
    std::string iterable_stop_global; // _IterableDatasetStopIteration: an iterable dataset ran out
    std::vector<NativeRow> native_set;
    // Functions (globs of demangled names) whose frame in a sample's callers names the hidden code it ran: the
    // dispatcher's entry of each torch op, whose kernels have no symbols. Optional in a rules file (none before).
    std::vector<std::string> sample_anchors;
    std::vector<HelperRow> helpers; // multiprocessing's forkserver and resource tracker (DataLoader workers use them)
    bool operator==(const Framework&) const = default;
};

// The built-in knowledge (torch 1.13 to 2.x, torchvision 0.14 on).
const Framework& builtin();

// Names of the kinds, matches and LOTUS_ROLE_* flags, as the rules file writes them.
const char* kind_name(CodeKind k);
const char* match_name(NameMatch m);
// {name, bit} of every LOTUS_ROLE_* flag a row may carry.
const std::vector<std::pair<const char*, uint32_t>>& role_flag_names();
bool kind_of(const std::string& name, CodeKind& out);
bool match_of(const std::string& name, NameMatch& out);

} // namespace lotus::model::framework
