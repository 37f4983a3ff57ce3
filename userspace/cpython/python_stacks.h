// Every thread's Python stack, read from outside a process (py-spy dump's job): its runtime's thread states, then
// each one's frames, innermost first, with the line each is at. Reads only (a Memory), never stops the process:
// a running thread's frames change under the reads, and a frame that cannot be read as a frame ends its stack with
// the reason, rather than a guess.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cpython/cpython_layouts.h"
#include "cpython/remote_memory.h"
#include "lotus_abi.h"

namespace lotus::cpython {

struct PyFrameInfo {
    std::string function; // co_qualname (co_name before 3.11)
    std::string file;     // co_filename
    std::optional<int> line;
    // Its positional arguments that hold ints (a __getitem__'s index), as read: (name, value).
    std::vector<std::pair<std::string, int64_t>> int_args;
};

struct PyThreadStack {
    uint64_t thread_id = 0;          // PyThreadState.thread_id (the pthread_t)
    std::optional<uint32_t> tid;     // native_thread_id (3.11+): the thread's id in /proc/PID/task
    std::vector<PyFrameInfo> frames; // innermost first
    std::string cut;                 // "" when the walk reached the stack's bottom, else why it stopped
};

// The stacks of every thread of the main interpreter of the runtime at `runtime` (_PyRuntime's address in the
// process). nullopt, with *why, when not even the thread list can be read.
std::optional<std::vector<PyThreadStack>> read_python_stacks(const Memory& mem, uint64_t runtime,
                                                             const lotus_py_layout& layout, const StackLayout& stacks,
                                                             std::string* why);

} // namespace lotus::cpython
