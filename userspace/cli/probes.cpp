#include "probes.h"

#include <fmt/format.h>

#include <exception>

#include "cpython/interpreter.h"
#include "cpython/opcode_handlers.h"

namespace lotus::cli {

int run_probes(std::optional<int> pid, const std::string& python)
{
    cpython::Interpreter interp;
    try {
        interp = pid ? cpython::find_interpreter(*pid) : cpython::find_interpreter_in_executable(python, "");
    } catch (const std::exception& e) {
        fmt::print(stderr, "lotus-bpf: {}\n", e.what());
        return 1;
    }
    fmt::print("interpreter {}\npython {}\nlayout {}\n", interp.object_path, interp.version.str(), interp.layout_source);
    fmt::print("evaluator _PyEval_EvalFrameDefault {:#x}\n", interp.eval_offset);
    try { // --all-calls where calls are inlined (3.11): its opcode handlers, RESUME's then RETURN_VALUE's
        auto handlers = cpython::inline_call_handlers(interp);
        for (size_t i = 0; i < handlers.size(); i++)
            fmt::print("opcode {} {:#x}\n", i + 1 < handlers.size() ? "RESUME" : "RETURN_VALUE", handlers[i]);
    } catch (const std::exception& e) {
        fmt::print("opcode handlers: not found ({})\n", e.what());
    }
    if (!interp.slots) {
        fmt::print("type slots: not found ({}); Python calls are probed at the evaluator\n", interp.slots_missing);
        return 0;
    }
    const char* names[LOTUS_SLOTS_PROBED] = {"", "__call__", "__iter__", "__next__"};
    for (int k = 1; k < LOTUS_SLOTS_PROBED; k++)
        fmt::print("slot {} {:#x}\n", names[k], interp.slots->offset[static_cast<size_t>(k)]);
    // Pickles read from pipes are seen there (in the slots' session) rather than at libc's read().
    if (interp.os_read_offset)
        fmt::print("builtin os.read {:#x}\n", *interp.os_read_offset);
    else
        fmt::print("builtin os.read: not found ({}); pipe reads are seen at libc's read()\n", interp.os_read_missing);
    return 0;
}

} // namespace lotus::cli
