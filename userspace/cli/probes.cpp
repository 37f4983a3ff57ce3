#include "probes.h"

#include <fmt/format.h>

#include <exception>

#include "capture/probe.h"
#include "common/printable.h"
#include "capture/probe_plan.h"
#include "cpython/interpreter.h"
#include "elf/libc_wrappers.h"
#include "cpython/opcode_handlers.h"

namespace lotus::cli {

namespace {

// What a run needs besides CAP_BPF and CAP_PERFMON on this kernel, and whether this process would be refused
// (the same words as the refusal a run gives: capture::capability_refusal).
void print_capabilities(const capture::KernelFeatures& k)
{
    auto without_admin = capture::capability_refusal(k, false, capture::libbpf_skips_unlisted_modules());
    if (without_admin.empty()) {
        fmt::print("capabilities: CAP_BPF and CAP_PERFMON suffice (CAP_SYS_ADMIN not needed)\n");
        return;
    }
    fmt::print("capabilities: {}; this process {}\n", without_admin,
               capture::has_sys_admin() ? "has CAP_SYS_ADMIN" : "lacks CAP_SYS_ADMIN: a run is refused so");
}

// The kernel's features, and what a default run's plan (type slots where found) chooses from them and lacks.
void print_kernel(const cpython::Interpreter* interp)
{
    const auto& k = capture::this_kernel();
    for (const auto& line : capture::describe_kernel(k))
        fmt::print("kernel {}\n", line);
    if (!k.missing.empty())
        return;
    print_capabilities(k);
    capture::PlanInputs in;
    in.interp_slots = interp && interp->slots.has_value();
    in.interp_os_read = interp && interp->os_read_offset.has_value();
    in.interp_after_fork = interp && capture::after_fork_offset(interp->object_path).has_value();
    in.links_libc = interp && elf::links_libc(interp->object_path);
    in.libc_dlopen = true;
    auto p = capture::plan_probes(k, in);
    fmt::print("plan Python probes: {}, at the {}, {}\n", p.hold ? "per traced process (new children held)" : "system-wide",
               p.slots ? "type slots" : "evaluator", p.session ? "one uprobe session" : "uprobe + uretprobe");
    fmt::print("plan syscalls: {}\n", p.libc ? "the traced processes' libc wrappers" : "syscall tracepoints");
    for (const auto& lack : capture::kernel_lacks(k, p, in))
        fmt::print("lacks {}\n", lack);
}

} // namespace

int run_probes(std::optional<int> pid, const std::string& python)
{
    if (!pid && python.empty()) {
        print_kernel(nullptr);
        return 0;
    }
    cpython::Interpreter interp;
    try {
        interp = pid ? cpython::find_interpreter(*pid) : cpython::find_interpreter_in_executable(python, "");
    } catch (const std::exception& e) {
        fmt::print(stderr, "lotus-bpf: {}\n", common::printable(e.what()));
        return 1;
    }
    print_kernel(&interp);
    fmt::print("interpreter {}\npython {}\nlayout {}\n", common::printable(interp.object_path), interp.version.str(),
               interp.layout_source);
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
