// Python processes no probe sees, said in the stream so that the summary, the trace and replays name them
// rather than show them without samples (or not at all):
// - traced processes that run a CPython interpreter other than the probed file (a child that execs another
//   python, the python child of a launcher that maps a libpython itself): model::RecordOtherInterpreter;
// - launch mode: processes of the command outside the traced tree (a wrapper script's second python, or a
//   rank started beside the first): model::RecordUntracedPython.
// Each once.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "cpython/interpreter.h"

namespace lotus::capture {

class InterpreterWatch {
public:
    using Emit = std::function<void(const void* data, size_t len)>; // a user record into the stream
    InterpreterWatch(const cpython::Interpreter& probed, Emit emit) : probed_(probed), emit_(std::move(emit)) {}

    // A process that exec'd, or one alive at attach: looked at by the next check().
    void look_at(uint32_t pid, uint64_t now_ns) { pending_.emplace(pid, now_ns); }
    // Processes still to look at: check() should run again soon.
    bool pending() const { return !pending_.empty(); }
    // Tells what the pending processes run; one whose dynamic loader has yet to map its libpython stays pending
    // (for at most 10 s).
    void check(uint64_t now_ns);
    // Launch mode with a wrapper (`command` is not the traced `root`): the command's processes outside root's
    // tree that run CPython, looked for every second (`force`: now). One that lives less than that may be missed.
    void scan_command(uint32_t command, uint32_t root, uint64_t now_ns, bool force = false);

private:
    cpython::Interpreter probed_;
    Emit emit_;
    std::map<uint32_t, uint64_t> pending_; // pid -> since (monotonic ns)
    std::map<uint32_t, std::string> examined_; // the command's processes told by scan_command: their executable
    uint64_t last_scan_ns_ = 0;
};

} // namespace lotus::capture
