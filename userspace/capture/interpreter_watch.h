// Traced processes that run a CPython interpreter other than the probed file (a child that execs another
// python, the python child of a launcher that maps a libpython itself): none of their Python calls reaches a
// probe. Each one is said once in the stream (model::RecordOtherInterpreter), so that the summary, the trace and
// replays name it rather than showing a process without samples.
#pragma once
#include <cstdint>
#include <functional>
#include <map>

#include "target/interpreter.h"

namespace lotus::capture {

class InterpreterWatch {
public:
    using Emit = std::function<void(const void* data, size_t len)>; // a user record into the stream
    InterpreterWatch(const target::Interpreter& probed, Emit emit) : probed_(probed), emit_(std::move(emit)) {}

    // A process that exec'd, or one alive at attach: looked at by the next check().
    void look_at(uint32_t pid, uint64_t now_ns) { pending_.emplace(pid, now_ns); }
    // Tells what the pending processes run; one whose dynamic loader has yet to map its libpython stays pending
    // (for at most 10 s).
    void check(uint64_t now_ns);

private:
    target::Interpreter probed_;
    Emit emit_;
    std::map<uint32_t, uint64_t> pending_; // pid -> since (monotonic ns)
};

} // namespace lotus::capture
