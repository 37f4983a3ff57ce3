#include "launch/launcher.h"

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>
#include <set>

namespace lotus::launch {

namespace {

// SIGPIPE as lotus-bpf found it when it started. The --metrics endpoint's HTTP library ignores it process-wide
// (a scraper that hangs up must not kill the tracer), and the launched job starts as it would without lotus-bpf.
const struct sigaction g_inherited_sigpipe = [] {
    struct sigaction sa = {};
    sigaction(SIGPIPE, nullptr, &sa);
    return sa;
}();

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
        throw cpython::TargetError("no command to launch");
    if (!runnable(argv[0]))
        throw cpython::TargetError(fmt::format("cannot run {}: command not found or not executable", argv[0]));
    pid_ = fork();
    if (pid_ < 0)
        throw cpython::TargetError(fmt::format("cannot fork: {}", strerror(errno)));
    if (pid_ == 0) {
        std::vector<char*> args;
        for (const auto& a : argv)
            args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        for (const auto& kv : env)
            putenv(const_cast<char*>(kv.c_str()));
        sigaction(SIGPIPE, &g_inherited_sigpipe, nullptr);
        ptrace(PTRACE_TRACEME, 0, nullptr, nullptr);
        execvp(args[0], args.data());
        _exit(127); // the parent checked the command exists and reports

    }
    const char* ldpath = getenv("LD_LIBRARY_PATH");
    bool options_set = false;
    std::string last_error = fmt::format("{} did not start a CPython interpreter", argv[0]);
    std::set<pid_t> traced{pid_}, started; // started: children whose first stop (a SIGSTOP) was seen
    auto kill_all = [&] {
        for (pid_t p : traced)
            kill(p, SIGKILL);
        for (pid_t p : traced)
            waitpid(p, nullptr, __WALL);
        exited_ = true;
    };
    for (int events = 0; events < 4096; events++) {
        int status = 0;
        pid_t w = waitpid(-1, &status, __WALL);
        if (w < 0)
            throw cpython::TargetError(fmt::format("waitpid: {}", strerror(errno)));
        if (WIFEXITED(status) || WIFSIGNALED(status)) {
            traced.erase(w);
            if (w != pid_)
                continue;
            exited_ = true;
            exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
            for (pid_t p : traced)
                let_go(p);
            throw cpython::TargetError(exit_code_ == 127 ? fmt::format("cannot run {}", argv[0]) : last_error);
        }
        if (!WIFSTOPPED(status))
            continue;
        int sig = WSTOPSIG(status), event = status >> 16;
        bool exec_stop = event == PTRACE_EVENT_EXEC;
        if (!options_set && w == pid_) { // its exec of the command (PTRACE_TRACEME)
            ptrace(PTRACE_SETOPTIONS, pid_, nullptr,
                   PTRACE_O_TRACEEXEC | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_EXITKILL);
            options_set = true;
            exec_stop = sig == SIGTRAP;
        }
        if (event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK) {
            unsigned long child = 0;
            ptrace(PTRACE_GETEVENTMSG, w, nullptr, &child);
            traced.insert(static_cast<pid_t>(child)); // traced from its birth, with these options
            ptrace(PTRACE_CONT, w, nullptr, nullptr);
            continue;
        }
        if (exec_stop) {
            std::string exe = exe_of(w);
            try {
                interp_ = cpython::find_interpreter_in_executable(exe, ldpath ? ldpath : "");
                target_ = w; // stopped right after exec: nothing of the program has run yet
                for (pid_t p : traced)
                    if (p != w)
                        let_go(p);
                return;
            } catch (const cpython::TargetError& e) {
                // A wrapper (shell script, shim) or an unsupported interpreter: keep following its execs,
                // but remember why this one was refused.
                if (std::string(e.what()).find("not a CPython") == std::string::npos) {
                    kill_all();
                    throw;
                }
            }
            ptrace(PTRACE_CONT, w, nullptr, nullptr);
            continue;
        }
        if (!started.count(w) && w != pid_) { // a new child's first stop: the SIGSTOP it starts with
            traced.insert(w);
            started.insert(w);
            if (sig == SIGSTOP) {
                ptrace(PTRACE_CONT, w, nullptr, nullptr);
                continue;
            }
        }
        ptrace(PTRACE_CONT, w, nullptr, reinterpret_cast<void*>(static_cast<long>(sig == SIGTRAP ? 0 : sig)));
    }
    kill_all();
    throw cpython::TargetError(last_error);
}

// A process we trace is usually running (a wrapper waiting for its child): stop it, then detach.
void Launcher::let_go(pid_t p)
{
    if (ptrace(PTRACE_DETACH, p, nullptr, nullptr) == 0)
        return;
    kill(p, SIGSTOP);
    for (int i = 0; i < 64; i++) {
        int status = 0;
        if (waitpid(p, &status, __WALL) != p || !WIFSTOPPED(status))
            return; // gone
        int sig = WSTOPSIG(status);
        if (sig == SIGSTOP && (status >> 16) == 0) {
            ptrace(PTRACE_DETACH, p, nullptr, nullptr); // the SIGSTOP is not delivered: it runs on
            return;
        }
        ptrace(PTRACE_CONT, p, nullptr, reinterpret_cast<void*>(static_cast<long>(sig == SIGTRAP ? 0 : sig)));
    }
}

Launcher::~Launcher()
{
    if (pid_ > 0 && !released_ && !exited_) {
        if (target_ > 0 && target_ != pid_)
            kill(target_, SIGKILL);
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }
}

void Launcher::release()
{
    if (released_)
        return;
    ptrace(PTRACE_DETACH, target_, nullptr, nullptr);
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
    if (exited_)
        return;
    if (target_ > 0 && target_ != pid_) // a wrapper need not pass signals on (unshare does not)
        kill(target_, sig);
    kill(pid_, sig);
}

} // namespace lotus::launch
