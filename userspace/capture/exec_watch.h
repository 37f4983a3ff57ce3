// The agent's exec watch: the pids of processes as they exec, from a tracepoint program of its own
// (bpf/exec_watch.bpf.c), so that a job is looked at when it starts rather than at the next scan of /proc.
#pragma once
#include <memory>
#include <string>
#include <vector>

struct exec_watch_bpf;
struct ring_buffer;

namespace lotus::capture {

class ExecWatch {
public:
    // Loads and attaches the program; empty with why (in `why`) where it cannot (the caller scans /proc alone).
    static std::unique_ptr<ExecWatch> open(std::string& why);
    ~ExecWatch();
    ExecWatch(const ExecWatch&) = delete;
    ExecWatch& operator=(const ExecWatch&) = delete;

    // Waits up to timeout_ms for execs; returns the pids of those that came (oldest first, possibly none).
    std::vector<int> poll(int timeout_ms);

private:
    ExecWatch() = default;
    struct SkeletonFree {
        void operator()(exec_watch_bpf* s) const;
    };
    struct RingFree {
        void operator()(ring_buffer* r) const;
    };
    std::unique_ptr<exec_watch_bpf, SkeletonFree> skel_;
    std::unique_ptr<ring_buffer, RingFree> rb_;
    std::vector<int> pending_;
};

} // namespace lotus::capture
