// The kernel links of each traced process's own probes (per-process Python probes): added when a process
// joins, closed in the background when it exits (closing a uprobe link waits for RCU grace periods,
// docs/performance.md "Stop latency": never in the loop that reads the ring buffer; one thread per exited
// process), every one closed, waited for, by clear().
#pragma once
#include <cstdint>
#include <future>
#include <unordered_map>
#include <vector>

#include "common/unique_fd.h"

namespace lotus::capture {

// Closes the descriptors (each on its own thread, so that their grace periods overlap) and waits.
void close_in_parallel(std::vector<common::UniqueFd> fds);

class ProcessLinks {
public:
    ProcessLinks() = default;
    ~ProcessLinks() { clear(); }
    ProcessLinks(const ProcessLinks&) = delete;
    ProcessLinks& operator=(const ProcessLinks&) = delete;

    bool has(uint32_t tgid) const { return links_.count(tgid) != 0; }
    size_t size() const { return links_.size(); }
    // A new process's links. One already held under its pid belongs to an earlier process whose exit is still
    // to come in the record stream: those go now, and that exit, when it comes, is not this process's.
    void add(uint32_t tgid, std::vector<common::UniqueFd> fds);
    // More links of a process that has some (a library it or a sibling opened later).
    void append(uint32_t tgid, std::vector<common::UniqueFd> fds);
    std::vector<uint32_t> tgids() const;
    // One of a process's links (its descriptor's number), handed to the caller; empty if it holds no such one.
    common::UniqueFd take(uint32_t tgid, int fd);
    // The process exited: its links go, in the background.
    void exited(uint32_t tgid);
    // Every link it holds, for the caller to close together with others (one batch: one wait for the grace
    // periods); the closings already under way go on until clear().
    std::vector<common::UniqueFd> release_all();
    void clear(); // closes every link and waits, also for the closings under way

private:
    void close_later(std::vector<common::UniqueFd> fds);

    std::unordered_map<uint32_t, std::vector<common::UniqueFd>> links_;
    std::unordered_map<uint32_t, uint32_t> stale_exits_; // exits still to come of earlier holders of a pid
    std::vector<std::future<void>> closing_;
};

} // namespace lotus::capture
