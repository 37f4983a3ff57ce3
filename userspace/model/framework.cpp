#include "model/framework.h"

#include "lotus_abi.h"

namespace lotus::model::framework {

namespace {

constexpr const char* kDataLoaderFile = "torch/utils/data/dataloader.py";

Framework make_builtin()
{
    Framework f;
    f.code = {
    // A DataLoader worker's main loop: which worker it is.
    {"torch/utils/data/_utils/worker.py", "", "_worker_loop", NameMatch::Exact, CodeKind::WorkerLoop,
     LOTUS_ROLE_CAPTURE, false, {"worker_id"}},
    // torch.multiprocessing.spawn runs fn(i, *args) in process i: its rank.
    {"torch/multiprocessing/spawn.py", "", "_wrap", NameMatch::Exact, CodeKind::RankMain, LOTUS_ROLE_CAPTURE, false,
     {"i"}},
    // `for batch in loader` (GET_ITER through the type's tp_iter slot: a call from C in every version): up to a
    // rank's _wrap; the iterator it made.
    {kDataLoaderFile, "DataLoader", "__iter__", NameMatch::Method, CodeKind::LoaderIter,
     LOTUS_ROLE_WALK | LOTUS_ROLE_RETURNED, true, {}},
    // (through tp_iternext: a call from C in every version)
    {kDataLoaderFile, "DataLoaderIter", "__next__", NameMatch::Method, CodeKind::LoaderNext, LOTUS_ROLE_WALK, true,
     {}},
    // _MultiProcessingDataLoaderIter.__init__ forks the workers; the base class's __init__ is inlined into it, so
    // both names are kept and the engine treats nested ones as one. (3.13+ may run it inlined once its call site
    // is specialised: DataLoader.__iter__ is the signal that always comes.) Its argument: the DataLoader.
    {kDataLoaderFile, "DataLoaderIter", "__init__", NameMatch::Method, CodeKind::IterInit, LOTUS_ROLE_OBJ1, true, {}},
    // The dataset fetchers (and their comprehensions): a batch being built.
    {"torch/utils/data/_utils/fetch.py", "", "fetch", NameMatch::Contains, CodeKind::Fetcher, 0, false, {}},
    // Any dataset's __getitem__: its direct calls into Python make up a sample when no pipeline call does; its
    // index.
    {"", "", "__getitem__", NameMatch::Method, CodeKind::GetItem, LOTUS_ROLE_EMIT_CALLEES | LOTUS_ROLE_ARG1, false,
     {}},
    };
    f.object_call_methods = {"__call__", "forward", "_call_impl", "_wrapped_call_impl"};
    // (3.12+ inlines list, dict and set comprehensions.)
    f.scope_names = {"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>"};
    f.container_classes = {"RandomApply", "RandomChoice", "RandomOrder"};
    f.pipeline_class = "Compose";
    f.loader_class = "DataLoader";
    f.loader_iterator_suffix = "DataLoaderIter";
    f.single_process_mark = "SingleProcess";
    f.worker_module = "torch.utils.data._utils.worker";
    f.resume_global = "_ResumeIteration";
    f.iterable_stop_global = "_IterableDatasetStopIteration";

// A probed call costs its thread an entry and a return trap, so the built-in set is where sampling alone cannot
// name the code that runs: libjpeg's decoder internals are static and libtorch's kernels hidden, and their
// samples are named after the innermost probed call open (docs/native-map.md). Pillow's own functions and
// libjpeg's API have symbols: sampling names them; --native probes them as spans.
    f.native_set = {
    // JPEG decode: Pillow's decoder call, once per image (per read chunk of a large file).
    {"_imaging*.so", "ImagingJpegDecode"},
    // torch ops behind ToTensor (div), Normalize (sub_, div_) and default_collate (stack). Not copy_ (ToTensor's
    // and clone's copies): its median call, 17 us with its probes, is under three traps, and 6 calls an image were
    // 60 % of the probed calls; sampling names its kernels after it through the stack (sample_anchors below).
    {"libtorch_cpu.so*", "at::_ops::div_Scalar::call"},
    {"libtorch_cpu.so*", "at::_ops::div_Tensor::call"},
    {"libtorch_cpu.so*", "at::_ops::div__Tensor::call"},
    {"libtorch_cpu.so*", "at::_ops::div__Scalar::call"},
    {"libtorch_cpu.so*", "at::_ops::sub_Tensor::call"},
    {"libtorch_cpu.so*", "at::_ops::sub__Tensor::call"},
    {"libtorch_cpu.so*", "at::_ops::stack::call"},
    {"libtorch_cpu.so*", "at::_ops::stack_out::call"},
    };
    // A sample in a torch kernel (hidden: no symbol) is named after the innermost op entry among its callers,
    // which --sample-unwind cfi finds without probes: at::_ops::copy_::call for the copy kernels.
    f.sample_anchors = {"at::_ops::*::call"};
    // multiprocessing's helpers, started with `python -c 'from multiprocessing.X import main; main(...)'`: the
    // forkserver that forks DataLoader workers (the default start method from CPython 3.14), the resource tracker.
    f.helpers = {
        {"from multiprocessing.forkserver import main", "forkserver"},
        {"from multiprocessing.resource_tracker import main", "resource tracker"},
    };
    return f;
}

} // namespace

const Framework& builtin()
{
    static const Framework f = make_builtin();
    return f;
}

const char* kind_name(CodeKind k)
{
    switch (k) {
    case CodeKind::Other: return "other";
    case CodeKind::Span: return "span";
    case CodeKind::ObjectCall: return "object_call";
    case CodeKind::GetItem: return "get_item";
    case CodeKind::WorkerLoop: return "worker_loop";
    case CodeKind::RankMain: return "rank_main";
    case CodeKind::LoaderIter: return "loader_iter";
    case CodeKind::IterInit: return "iter_init";
    case CodeKind::LoaderNext: return "loader_next";
    case CodeKind::Fetcher: return "fetcher";
    case CodeKind::Scope: return "scope";
    }
    return "?";
}

const char* match_name(NameMatch m)
{
    switch (m) {
    case NameMatch::Exact: return "exact";
    case NameMatch::Method: return "method";
    case NameMatch::Contains: return "contains";
    }
    return "?";
}

const std::vector<std::pair<const char*, uint32_t>>& role_flag_names()
{
    static const std::vector<std::pair<const char*, uint32_t>> names = {
        {"capture", LOTUS_ROLE_CAPTURE}, {"emit_callees", LOTUS_ROLE_EMIT_CALLEES}, {"arg1", LOTUS_ROLE_ARG1},
        {"obj1", LOTUS_ROLE_OBJ1},       {"walk", LOTUS_ROLE_WALK},                 {"returned", LOTUS_ROLE_RETURNED},
    };
    return names;
}

bool kind_of(const std::string& name, CodeKind& out)
{
    for (auto k : {CodeKind::Other, CodeKind::Span, CodeKind::ObjectCall, CodeKind::GetItem, CodeKind::WorkerLoop,
                   CodeKind::RankMain, CodeKind::LoaderIter, CodeKind::IterInit, CodeKind::LoaderNext,
                   CodeKind::Fetcher, CodeKind::Scope})
        if (name == kind_name(k))
            return out = k, true;
    return false;
}

bool match_of(const std::string& name, NameMatch& out)
{
    for (auto m : {NameMatch::Exact, NameMatch::Method, NameMatch::Contains})
        if (name == match_name(m))
            return out = m, true;
    return false;
}

} // namespace lotus::model::framework
