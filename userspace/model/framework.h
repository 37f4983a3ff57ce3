// What lotus-bpf knows of torch's and torchvision's code, as data: the one place that names framework code. The
// rules (rules.cpp), the DataLoader queue's pickles (messages.cpp) and the default native set read it.
#pragma once
#include <cstdint>
#include <string_view>
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
    std::string_view file; // a part of its file's path ("": any file)
    std::string_view cls;  // NameMatch::Method: the class-name suffix ("": any class)
    std::string_view name;
    NameMatch match;
    CodeKind kind;
    uint32_t flags;                       // LOTUS_ROLE_* bits it adds
    bool emitted;                         // its calls are emitted for their own sake (no LOTUS_ROLE_SKIP)
    std::vector<std::string_view> locals; // LOTUS_ROLE_CAPTURE: the locals it reports, by name
};
extern const std::vector<CodeRow> kCode;

// The methods through which an object is called: __call__, nn.Module's forward and its call wrappers (torch 1.x
// enters _call_impl, 2.x _wrapped_call_impl then _call_impl). Their self is the object called.
extern const std::vector<std::string_view> kObjectCallMethods;
// The code of a comprehension or generator expression (part of the function it is written in).
extern const std::vector<std::string_view> kScopeNames;
// torchvision's container transforms (v1 and v2): called by a pipeline, they call transforms of their own.
extern const std::vector<std::string_view> kContainerClasses;
constexpr std::string_view kPipelineClass = "Compose";              // always a pipeline class, beside --pipeline
constexpr std::string_view kLoaderClass = "DataLoader";
constexpr std::string_view kLoaderIteratorSuffix = "DataLoaderIter"; // _SingleProcess..., _MultiProcessing...
constexpr std::string_view kSingleProcessMark = "SingleProcess";    // an iterator without workers

// The DataLoader's queues: pickles whose globals come from torch's worker module.
constexpr std::string_view kWorkerModule = "torch.utils.data._utils.worker";
constexpr std::string_view kResumeGlobal = "_ResumeIteration";                // a persistent worker's new epoch
constexpr std::string_view kIterableStopGlobal = "_IterableDatasetStopIteration"; // an iterable dataset ran out

// The native functions --native-map probes by default: a library glob and a symbol glob each.
struct NativeRow {
    std::string_view library, symbol;
};
extern const std::vector<NativeRow> kNativeSet;

} // namespace lotus::model::framework
