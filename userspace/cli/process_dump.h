// What each thread of a process is doing, read from outside without stopping it (`lotus-bpf dump`, and the
// stuck-process watch of a traced run): its Python stack (cpython/python_stacks.h) and, for a thread blocked in a
// system call, its native stack (from the sp and pc /proc/PID/task/TID/syscall gives, a copy of its stack
// unwound with the libraries' .eh_frame). A running thread's native stack is not read: that needs it stopped.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cpython/interpreter.h"
#include "cpython/python_stacks.h"

namespace lotus::cli {

struct ThreadDump {
    uint32_t tid = 0;
    std::string name;    // its comm
    char state = '?';    // /proc's: R running, S sleeping, D disk, T stopped, ...
    std::string syscall; // the system call it is blocked in ("" when running or not in one)
    std::optional<cpython::PyThreadStack> python;
    std::vector<std::string> native; // innermost first: "function (library)"
    std::string native_missing;      // why there is no native stack ("" when there is one, or it was not asked)
};

struct ProcessDump {
    int pid = 0, parent = 0;
    std::string comm, command_line, python; // python: "3.11.2 (/usr/bin/python3.11)"
    std::string error;                      // why nothing could be read ("" otherwise)
    std::vector<ThreadDump> threads;        // Python threads first, in the runtime's order
    std::vector<cpython::PyThreadStack> unmatched; // Python threads whose id is not known (3.10): no /proc entry
    std::vector<std::string> others;        // threads without a Python thread state: their names
};

// Every thread of pid; native stacks of blocked Python threads where `native`.
ProcessDump dump_process(int pid, bool native);
// As `lotus-bpf dump` prints it (lines end in '\n').
std::string format_dump(const ProcessDump& d);
// One thread's Python stack, innermost first, as "function (file:line)" lines indented by `indent`.
std::string format_python_stack(const cpython::PyThreadStack& st, const std::string& indent);

} // namespace lotus::cli
