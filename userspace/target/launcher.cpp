#include "launcher.h"

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

namespace lotus::target {

namespace {

std::string exe_of(pid_t pid)
{
    char buf[4096];
    ssize_t n = readlink(fmt::format("/proc/{}/exe", pid).c_str(), buf, sizeof(buf) - 1);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// What execvp would find.
bool runnable(const std::string& cmd)
{
    if (cmd.find('/') != std::string::npos)
        return access(cmd.c_str(), X_OK) == 0;
    const char* path = getenv("PATH");
    std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    size_t start = 0;
    while (start <= dirs.size()) {
        size_t end = dirs.find(':', start);
        std::string d = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (access(((d.empty() ? "." : d) + "/" + cmd).c_str(), X_OK) == 0)
            return true;
        if (end == std::string::npos)
            break;
        start = end + 1;
    }
    return false;
}

} // namespace

Launcher::Launcher(const std::vector<std::string>& argv, const std::vector<std::string>& env)
{
    if (argv.empty())
        throw TargetError("no command to launch");
    if (!runnable(argv[0]))
        throw TargetError(fmt::format("cannot run {}: command not found or not executable", argv[0]));
    pid_ = fork();
    if (pid_ < 0)
        throw TargetError(fmt::format("cannot fork: {}", strerror(errno)));
    if (pid_ == 0) {
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        for (const auto& kv : env)
            putenv(const_cast<char*>(kv.c_str()));
        ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
        execvp(args[0], args.data());
        _exit(127); // the parent checked the command exists and reports

    }
    const char* ldpath = getenv("LD_LIBRARY_PATH");
    bool options_set = false;
    std::string last_error = fmt::format("{} did not start a CPython interpreter", argv[0]);
    for (int execs = 0; execs < 16;) {
        int status = 0;
        if (waitpid(pid_, &status, 0) < 0)
            throw TargetError(fmt::format("waitpid: {}", strerror(errno)));
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            exited_ = true;
            exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            throw TargetError(exit_code_ == 127 ? fmt::format("cannot run {}", argv[0]) : last_error);
        }
        if (!WIFSTOPPED(status))
            continue;
        int sig = WSTOPSIG(status);
        bool exec_stop = (!options_set && sig == SIGTRAP) || (status >> 8) == (SIGTRAP | (PTRACE_EVENT_EXEC << 8));
        if (!options_set) {
            ptrace(PTRACE_SETOPTIONS, pid_, nullptr, PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL);
            options_set = true;
        }
        if (exec_stop) {
            execs++;
            std::string exe = exe_of(pid_);
            try {
                interp_ = find_interpreter_in_executable(exe, ldpath ? ldpath : "");
                return; // stopped right after exec: nothing of the program has run yet
            } catch (const TargetError& e) {
                // A wrapper (shell script, shim) or an unsupported interpreter: keep following its execs,
                // but remember why this one was refused.
                if (std::string(e.what()).find("not a CPython") == std::string::npos) {
                    kill(pid_, SIGKILL);
                    waitpid(pid_, nullptr, 0);
                    exited_ = true;
                    throw;
                }
            }
            ptrace(PTRACE_CONT, pid_, nullptr, nullptr);
        } else {
            ptrace(PTRACE_CONT, pid_, nullptr, reinterpret_cast<void*>(static_cast<long>(sig == SIGTRAP ? 0 : sig)));
        }
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    exited_ = true;
    throw TargetError(last_error);
}

Launcher::~Launcher()
{
    if (pid_ > 0 && !released_ && !exited_) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }
}

void Launcher::release()
{
    if (released_)
        return;
    ptrace(PTRACE_DETACH, pid_, nullptr, nullptr);
    released_ = true;
}

bool Launcher::exited()
{
    if (exited_)
        return true;
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ && (WIFEXITED(status) || WIFSIGNALED(status))) {
        exited_ = true;
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return exited_;
}

void Launcher::signal(int sig)
{
    if (!exited_)
        kill(pid_, sig);
}

} // namespace lotus::target
