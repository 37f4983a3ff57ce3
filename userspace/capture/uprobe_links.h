// How a uprobe link is made: a uprobe_multi link, else (kernels where a process's links must be perf events)
// perf-event uprobes, on a file the tracer holds open (pinned) while it runs. Shared by Probe's link units.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/unique_fd.h"

struct bpf_program;

namespace lotus::capture {

class UprobeLinks {
public:
    // multi_type: the kernel's BPF_TRACE_UPROBE_MULTI, -1 without uprobe_multi links. perf_links: a process's
    // own links are perf-event uprobes (ProbePlan::perf_links).
    UprobeLinks(int multi_type, bool perf_links) : multi_type_(multi_type), perf_links_(perf_links) {}
    UprobeLinks(const UprobeLinks&) = delete;
    UprobeLinks& operator=(const UprobeLinks&) = delete;

    int multi_type() const { return multi_type_; }
    bool perf_links() const { return perf_links_; }
    // A uprobe_multi link (pid 0: every process mapping the file) of `prog` on offsets of `path`; empty, with
    // errno set, if the kernel refused.
    static common::UniqueFd multi_link(bpf_program* prog, int attach_type, const std::string& path,
                                       const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies = {},
                                       bool ret = false, uint32_t pid = 0);
    // A process's links of `prog` on offsets of `path`, entries or (ret) returns, pid as for multi_link: one
    // uprobe_multi link, else (perf_links) one perf-event uprobe per offset; empty, errno set, if refused.
    std::vector<common::UniqueFd> probe_links(bpf_program* prog, const std::string& path,
                                              const std::vector<uint64_t>& offsets,
                                              const std::vector<uint64_t>& cookies, bool ret, uint32_t pid) const;
    // A link for the returns, then one for the entries, of `offsets` (probe_links); empty, errno set, if the
    // kernel refused either.
    std::vector<common::UniqueFd> multi_pair(bpf_program* entry, bpf_program* ret, const std::string& path,
                                             const std::vector<uint64_t>& offsets,
                                             const std::vector<uint64_t>& cookies, uint32_t pid = 0) const;
    // A name for the file at `path` that holds while the tracer runs (/proc/self/fd/N): a child attached later
    // names it so, though the path may be under /proc/PID/root of a process that has exited since (a parent
    // killed while its new worker was held). The path itself if it cannot be opened (the attach then says why).
    std::string pin(const std::string& path);

private:
    int multi_type_;
    bool perf_links_;
    std::map<std::string, common::UniqueFd> pinned_; // by path: the files probed per process, open since first probed
};

} // namespace lotus::capture
