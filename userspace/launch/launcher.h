// Launch mode: start a command held at its exec until the tracer is attached. ptrace is used only to stop
// the command's processes at each exec and fork (never to write their memory) and is detached before the
// program runs.
#pragma once
#include <string>
#include <sys/types.h>
#include <vector>

#include "cpython/interpreter.h"

namespace lotus::launch {

class Launcher {
public:
    // Forks and execs argv; returns once a process of the command has exec'd a CPython interpreter (following
    // wrappers that exec one, such as pyenv shims, or fork one first, such as `unshare --fork`, `timeout`) and
    // is stopped. Throws cpython::TargetError (the command is killed). env: extra NAME=VALUE settings for the command's
    // environment.
    explicit Launcher(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
    ~Launcher();
    Launcher(const Launcher&) = delete; // it kills its child when destroyed
    Launcher& operator=(const Launcher&) = delete;
    // The process running CPython (the command itself, or a process it forked).
    pid_t pid() const { return target_; }
    pid_t command_pid() const { return pid_; } // the command as started (a wrapper, or the interpreter itself)
    const cpython::Interpreter& interpreter() const { return interp_; }
    // Lets the stopped interpreter run (detaches ptrace).
    void release();
    // Non-blocking: true once the command has exited; its exit status is then in exit_code().
    bool exited();
    int exit_code() const { return exit_code_; }
    void signal(int sig);

private:
    void let_go(pid_t p); // detaches a traced wrapper process, wherever it is
    pid_t pid_ = -1;    // the command
    pid_t target_ = -1; // the CPython process
    cpython::Interpreter interp_;
    bool released_ = false, exited_ = false;
    int exit_code_ = 0;
};

} // namespace lotus::launch
