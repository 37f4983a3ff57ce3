#include "model/framework.h"

#include "lotus_abi.h"

namespace lotus::model::framework {

constexpr std::string_view kDataLoaderFile = "torch/utils/data/dataloader.py";

const std::vector<CodeRow> kCode = {
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

const std::vector<std::string_view> kObjectCallMethods = {"__call__", "forward", "_call_impl", "_wrapped_call_impl"};

// (3.12+ inlines list, dict and set comprehensions.)
const std::vector<std::string_view> kScopeNames = {"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>"};

const std::vector<std::string_view> kContainerClasses = {"RandomApply", "RandomChoice", "RandomOrder"};

// A probed call costs its thread an entry and a return trap, so the built-in set is where sampling alone cannot
// name the code that runs: libjpeg's decoder internals are static and libtorch's kernels hidden, and their
// samples are named after the innermost probed call open (docs/native-map.md). Pillow's own functions and
// libjpeg's API have symbols: sampling names them; --native probes them as spans.
const std::vector<NativeRow> kNativeSet = {
    // JPEG decode: Pillow's decoder call, once per image (per read chunk of a large file).
    {"_imaging*.so", "ImagingJpegDecode"},
    // torch ops behind ToTensor (copy, div), Normalize (sub_, div_) and default_collate (stack). Not _to_copy: it
    // copies through copy_, which is probed.
    {"libtorch_cpu.so*", "at::_ops::copy_::call"},
    {"libtorch_cpu.so*", "at::_ops::div_Scalar::call"},
    {"libtorch_cpu.so*", "at::_ops::div_Tensor::call"},
    {"libtorch_cpu.so*", "at::_ops::div__Tensor::call"},
    {"libtorch_cpu.so*", "at::_ops::div__Scalar::call"},
    {"libtorch_cpu.so*", "at::_ops::sub_Tensor::call"},
    {"libtorch_cpu.so*", "at::_ops::sub__Tensor::call"},
    {"libtorch_cpu.so*", "at::_ops::stack::call"},
    {"libtorch_cpu.so*", "at::_ops::stack_out::call"},
};

} // namespace lotus::model::framework
