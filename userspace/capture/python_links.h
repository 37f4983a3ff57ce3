// Probe's Python probes: on the type-slot functions or the evaluator, system-wide (one uprobe session, or entry
// and return probes) or per traced process (their links kept with the process's others in ProcessLinks); the
// object calls' own link of each process (--trainer-calls); the opcode handlers' probes of inlined calls
// (--all-calls on 3.11). Owns the links that are not a process's own, and closes them as Probe::close says.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/unique_fd.h"
#include "probe_internal.h"
#include "process_links.h"
#include "uprobe_links.h"

struct lotus_bpf;

namespace lotus::capture {

struct PythonProbes {
    std::string interp_path;                // the interpreter's file
    std::vector<uint64_t> offsets, cookies; // where the probes go (file offsets), and their cookies
    bool slots = false;        // the type-slot functions are probed, not the evaluator
    bool per_process = false;  // each traced process gets its own links (ProbePlan::hold)
    bool calls_apart = false;  // ...the object calls' probe in a link of its own (Probe::object_calls_apart)
    int session_type = -1;     // the kernel's BPF_TRACE_UPROBE_SESSION, -1 without sessions
};

class PythonLinks {
public:
    // skel: the loaded programs; uprobes and processes: Probe's (none of the three owned).
    PythonLinks(lotus_bpf* skel, PythonProbes probes, UprobeLinks& uprobes, ProcessLinks& processes)
        : skel_(skel), p_(std::move(probes)), uprobes_(uprobes), processes_(processes)
    {
    }
    PythonLinks(const PythonLinks&) = delete;
    PythonLinks& operator=(const PythonLinks&) = delete;

    // System-wide mode: one uprobe session where the kernel has them, else entry and return probes (a pair per
    // function without uprobe_multi links). Throws CaptureError.
    void attach_everywhere();
    // Per-process mode: a process's Python links (its object-calls link last, its descriptor in call_link,
    // where calls_apart); empty or ending in an empty one, errno set, if refused.
    std::vector<common::UniqueFd> process_links(uint32_t tgid, int& call_link);
    // Whether each traced process gets opcode-handler links (attach_inline_calls in per-process mode)...
    bool inline_per_process() const { return !inline_resume_.empty(); }
    // ...and a process's; empty, errno set, if refused.
    std::vector<common::UniqueFd> inline_links(uint32_t tgid);
    // A process's links went into ProcessLinks: call_link (>= 0) is its object-calls link.
    void added(uint32_t tgid, int call_link)
    {
        if (call_link >= 0)
            call_links_[tgid] = call_link;
    }
    // Probe::attach_inline_calls.
    void attach_inline_calls(const std::vector<uint64_t>& resume_offsets, uint64_t return_offset);
    // Probe::detach_object_calls, attach_object_calls, has_object_calls.
    common::UniqueFd detach_object_calls(uint32_t tgid);
    bool attach_object_calls(uint32_t tgid);
    bool has_object_calls(uint32_t tgid) const { return call_links_.count(tgid) != 0; }
    // A traced process exited (ProcessLinks told first): its object-calls link is gone once its links are.
    void exited(uint32_t tgid)
    {
        if (!processes_.has(tgid))
            call_links_.erase(tgid);
    }
    // The close (Probe::close): the uprobe_multi and session links into the caller's batch, then, later, the
    // perf-event links.
    void release(std::vector<common::UniqueFd>& batch);
    void close_perf_links() { links_.clear(); }

private:
    // The object calls' link of one process (calls_apart).
    common::UniqueFd object_call_link(uint32_t tgid);
    // Entry and return probes on `offsets` (multi_pair, kept until close; without uprobe_multi links, one
    // offset as two perf-event probes). False, errno set, if the kernel refused.
    bool attach_pair(bpf_program* entry, bpf_program* ret, const std::vector<uint64_t>& offsets,
                     const std::vector<uint64_t>& cookies);

    lotus_bpf* skel_;
    PythonProbes p_;
    UprobeLinks& uprobes_;
    ProcessLinks& processes_;
    std::unordered_map<uint32_t, int> call_links_; // per process: its object-calls link (a descriptor in processes_)
    std::vector<uint64_t> inline_resume_;          // per-process mode, --all-calls on 3.11: the opcode handlers
    uint64_t inline_return_ = 0;                   // each traced process gets (none while inline_resume_ is empty)
    common::UniqueFd session_link_;                // system-wide: the uprobe session link, when there is one
    std::vector<common::UniqueFd> multi_links_;    // system-wide: uprobe_multi pairs, opcode handlers
    std::vector<Link> links_;                      // system-wide without uprobe_multi: perf-event probes
};

} // namespace lotus::capture
