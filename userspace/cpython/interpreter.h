// Finding the CPython interpreter of a process (or of an executable about to run) and its version.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "cpython/cpython_layouts.h"

namespace lotus::cpython {

// A one-line reason why a target cannot be traced.
struct TargetError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// The default probes: CPython's type-slot functions (target/slot_functions.h) and where the running thread's
// state is kept (the layout's runtime_tstate in _PyRuntime), all as addresses in the interpreter's file; file
// offsets for the uprobes.
struct SlotProbes {
    std::array<uint64_t, LOTUS_SLOTS_PROBED> vaddr{}, offset{}; // their probes (target/probe_point.h), by LOTUS_SLOT_*
    uint64_t tstate_vaddr = 0;
};

struct Interpreter {
    std::string object_path;  // the ELF that holds the evaluator (executable or libpython), openable by us
    std::string target_path;  // the same file as the target names it (differs inside containers)
    bool shared = false;      // true when it is a libpython shared object
    PyVersion version;
    VersionCaps caps;         // what that version does (cpython_layouts.h)
    uint64_t eval_offset = 0; // file offset of _PyEval_EvalFrameDefault's uprobe (target/probe_point.h)
    lotus_py_layout layout{};
    std::string layout_source = "table"; // or "_Py_DebugOffsets" (3.13+, read from the interpreter's file)
    std::optional<SlotProbes> slots;     // nullopt: only the evaluator can be probed, for slots_missing
    std::string slots_missing;
    std::optional<uint64_t> os_read_offset; // file offset of os.read's uprobe (target/builtin_functions.h)
    std::string os_read_missing;
    uint64_t runtime_vaddr = 0;          // _PyRuntime's address in object_path (0: no such symbol)
};

// From /proc/PID/maps. Throws TargetError.
Interpreter find_interpreter(int pid);
// From an executable file and the library search path it would run with. Throws TargetError.
Interpreter find_interpreter_in_executable(const std::string& exe_path, const std::string& ld_library_path);
// What process pid runs as against `probed`, the interpreter whose file lotus-bpf probes: "" when it maps that
// file, runs no CPython or is gone; else the path (as it names it) of the other CPython interpreter it runs, whose
// calls no probe sees; nullopt while its executable needs a libpython that its dynamic loader has not mapped yet.
std::optional<std::string> other_interpreter(int pid, const Interpreter& probed);
// The CPython interpreter process pid runs (its executable, or a libpython it mapped; the path as it names it):
// "" when it runs none or is gone, nullopt while its executable needs a libpython not mapped yet.
std::optional<std::string> cpython_of(int pid);

} // namespace lotus::cpython
