#include "guardian.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <string>
#include <vector>

#include "common/read_file.h"
#include "capture_error.h"

namespace lotus::capture {

GuardianAction guardian_action(const lotus_hold& hold, const GuardianView& view)
{
    if (view.child_gone) // the tracer, while there is one, counts it (a child continued early and gone since)
        return view.tracer_gone ? GuardianAction::Forget : GuardianAction::Keep;
    // Not held, or continued already: the tracer attaches its probes, then deletes the entry.
    if (!(hold.flags & LOTUS_HOLD_STOPPED) || (hold.flags & LOTUS_HOLD_RELEASED))
        return view.tracer_gone ? GuardianAction::Forget : GuardianAction::Keep;
    bool due = view.tracer_gone || (hold.flags & LOTUS_HOLD_ATTACHED) ||
               view.now_ns - hold.since_ns >= view.deadline_ns;
    if (!due || view.parent_stopped) // a job its user stopped: their SIGCONT continues the child with the rest
        return GuardianAction::Keep;
    return GuardianAction::Continue;
}

bool process_stopped(pid_t pid)
{
    auto stat = common::read_file("/proc/" + std::to_string(pid) + "/stat");
    if (!stat)
        return false;
    auto paren = stat->rfind(')'); // comm may hold spaces and parentheses
    return paren != std::string::npos && paren + 2 < stat->size() && (*stat)[paren + 1] == ' ' &&
           ((*stat)[paren + 2] == 'T' || (*stat)[paren + 2] == 't');
}

bool stop_under_way(const char* status)
{
    constexpr unsigned long long kStops = 1ull << (SIGSTOP - 1);
    for (const char* line = status; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : nullptr) {
        if (!strncmp(line, "State:", 6)) {
            const char* st = line + 6;
            while (*st == ' ' || *st == '\t')
                st++;
            if (*st == 'T' || *st == 't')
                return true;
        } else if (!strncmp(line, "SigPnd:", 7) || !strncmp(line, "ShdPnd:", 7)) {
            if (strtoull(line + 7, nullptr, 16) & kStops)
                return true;
        }
    }
    return false;
}

bool stop_under_way(pid_t pid)
{
    auto status = common::read_file("/proc/" + std::to_string(pid) + "/status");
    return status && stop_under_way(status->c_str());
}

bool continue_held(int held_fd, uint32_t tgid, lotus_hold hold)
{
    ::kill(static_cast<pid_t>(tgid), SIGCONT);
    if (!stop_under_way(static_cast<pid_t>(hold.parent_tgid)))
        return false;
    ::kill(static_cast<pid_t>(tgid), SIGSTOP);
    hold.flags = (hold.flags | LOTUS_HOLD_STOPPED | LOTUS_HOLD_ATTACHED) & ~LOTUS_HOLD_RELEASED;
    if (bpf_map_update_elem(held_fd, &tgid, &hold, BPF_NOEXIST) == 0)
        return true;
    ::kill(static_cast<pid_t>(tgid), SIGCONT); // nobody would continue it: let it run
    return false;
}

static uint64_t monotonic_now()
{
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

Guardian::Guardian(int held_map_fd, uint32_t hold_prog_id, uint64_t deadline_ns)
{
    // Everything the child needs is made before the fork: between fork and exec only async-signal-safe calls.
    std::vector<std::string> args = {"lotus-bpf", "__guardian", std::to_string(getpid()),
                                     std::to_string(hold_prog_id), std::to_string(deadline_ns)};
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0)
        throw CaptureError(fmt::format("cannot start the guardian process: {}", strerror(errno)));
    if (pid_ == 0) {
        // fd 3 without CLOEXEC (dup2 clears it, but leaves an fd already 3 as it is)
        if ((held_map_fd == 3 ? fcntl(3, F_SETFD, 0) : dup2(held_map_fd, 3)) < 0)
            _exit(127);
        execv("/proc/self/exe", argv.data());
        _exit(127);
    }
}

Guardian::~Guardian()
{
    if (pid_ <= 0)
        return;
    ::kill(pid_, SIGTERM);
    // It exits once nothing is left for it to continue (at once after a normal stop: the hold program was
    // detached before); if a job its user stopped still has a held child, it stays for that child, reparented.
    for (int i = 0; i < 20; i++) {
        if (waitpid(pid_, nullptr, WNOHANG) != 0)
            return;
        usleep(10'000);
    }
}

namespace {

// Global because a signal handler can reach nothing else.
volatile sig_atomic_t g_finish = 0;

void on_term(int) { g_finish = 1; }

constexpr int kHeldFd = 3;
constexpr int kTickMs = 10;
// After the tracer is gone: as long as the hold program may still run (it is unloaded some time after the
// tracer's exit: docs/performance.md, "What costs what"), at most this long.
constexpr uint64_t kLingerMaxNs = 10'000'000'000ull;

bool program_loaded(uint32_t id)
{
    if (!id)
        return false;
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0)
        return errno != ENOENT;
    ::close(fd);
    return true;
}

// One pass over lotus_held. Returns how many entries are left.
size_t sweep(uint64_t deadline_ns, bool tracer_gone)
{
    std::vector<uint32_t> keys;
    uint32_t key = 0, next = 0;
    bool first = true;
    while (bpf_map_get_next_key(kHeldFd, first ? nullptr : &key, &next) == 0) {
        keys.push_back(next);
        key = next;
        first = false;
    }
    size_t left = 0;
    for (uint32_t tgid : keys) {
        lotus_hold hold{};
        if (bpf_map_lookup_elem(kHeldFd, &tgid, &hold))
            continue;
        GuardianView view;
        view.now_ns = monotonic_now();
        view.deadline_ns = deadline_ns;
        view.tracer_gone = tracer_gone;
        view.child_gone = ::kill(static_cast<pid_t>(tgid), 0) != 0 && errno == ESRCH;
        view.parent_stopped = stop_under_way(static_cast<pid_t>(hold.parent_tgid));
        switch (guardian_action(hold, view)) {
        case GuardianAction::Keep:
            left++;
            break;
        case GuardianAction::Forget:
            bpf_map_delete_elem(kHeldFd, &tgid);
            break;
        case GuardianAction::Continue: {
            // Claim it first, so that one of the tracer and the guardian continues it: the entry goes where its
            // probes are in or nobody will attach them; else it stays, marked, for the tracer to attach them.
            bool claimed;
            if (tracer_gone || (hold.flags & LOTUS_HOLD_ATTACHED)) {
                claimed = bpf_map_delete_elem(kHeldFd, &tgid) == 0;
            } else {
                hold.flags |= LOTUS_HOLD_RELEASED;
                claimed = bpf_map_update_elem(kHeldFd, &tgid, &hold, BPF_EXIST) == 0;
                left += claimed;
            }
            if (claimed && (tracer_gone || (hold.flags & LOTUS_HOLD_ATTACHED)))
                left += continue_held(kHeldFd, tgid, hold); // stopped again: still ours to continue
            else if (claimed) // (the tracer attaches its probes, then deletes the entry: a stop just begun is not
                ::kill(static_cast<pid_t>(tgid), SIGCONT); // undone here, docs/limits.md)
            break;
        }
        }
    }
    return left;
}

} // namespace

int guardian_main(int argc, char** argv)
{
    if (argc != 4) {
        fprintf(stderr, "lotus-bpf: __guardian is started by lotus-bpf itself\n");
        return 2;
    }
    const pid_t tracer = static_cast<pid_t>(strtol(argv[1], nullptr, 10));
    const uint32_t prog_id = static_cast<uint32_t>(strtoul(argv[2], nullptr, 10));
    const uint64_t deadline_ns = strtoull(argv[3], nullptr, 10);
    setsid(); // out of the tracer's process group and terminal: a Ctrl-Z or kill of the group leaves it running
    prctl(PR_SET_NAME, "lotus-guardian");
    syscall(SYS_close_range, kHeldFd + 1, ~0u, 0);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction sa{};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, nullptr);
    int pidfd = static_cast<int>(syscall(SYS_pidfd_open, tracer, 0));
    // A tracer already gone, its pid maybe someone else's: our parent is then no longer it.
    bool gone = pidfd < 0 || getppid() != tracer;
    uint64_t gone_since = gone ? monotonic_now() : 0;
    while (true) {
        pollfd p{pidfd, POLLIN, 0};
        if (!gone)
            ::poll(&p, 1, kTickMs);
        else
            usleep(kTickMs * 1000);
        if (!gone && (g_finish || (p.revents & (POLLIN | POLLHUP)))) {
            gone = true;
            gone_since = monotonic_now();
        }
        size_t left = sweep(deadline_ns, gone);
        // Asked to finish by a tracer that detached the hold program itself: no hold can come any more.
        if (gone && left == 0 &&
            (g_finish || !program_loaded(prog_id) || monotonic_now() - gone_since > kLingerMaxNs))
            return 0;
    }
}

} // namespace lotus::capture
