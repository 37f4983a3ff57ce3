// Launch mode: start a command held at its exec until the tracer is attached. ptrace is used only to stop
// the child at each exec (never to write its memory) and is detached before the program runs.
#pragma once
#include <string>
#include <sys/types.h>
#include <vector>

#include "interpreter.h"

namespace lotus::target {

class Launcher {
public:
    // Forks and execs argv; returns once the child has exec'd a CPython interpreter (following wrapper
    // scripts that exec one, such as pyenv shims) and is stopped. Throws TargetError (the child is killed).
    // env: extra NAME=VALUE settings for the command's environment.
    explicit Launcher(const std::vector<std::string>& argv, const std::vector<std::string>& env = {});
    ~Launcher();
    pid_t pid() const { return pid_; }
    const Interpreter& interpreter() const { return interp_; }
    // Lets the stopped child run (detaches ptrace).
    void release();
    // Non-blocking: true once the child has exited; its exit status is then in exit_code().
    bool exited();
    int exit_code() const { return exit_code_; }
    void signal(int sig);

private:
    pid_t pid_ = -1;
    Interpreter interp_;
    bool released_ = false, exited_ = false;
    int exit_code_ = 0;
};

} // namespace lotus::target
