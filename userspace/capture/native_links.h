// Probe's native map: the sampling events (on each traced thread, else per CPU) and the probes on native
// functions (per traced process, their links kept with the process's others in ProcessLinks, else one link per
// library or perf-event probes for every process). Owns the links that are not a process's own, and closes
// them as Probe::close says.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "perf_events.h"
#include "probe_internal.h"
#include "process_links.h"
#include "uprobe_links.h"

struct lotus_bpf;

namespace lotus::capture {

class ThreadSampling;

// A native function's probe points in its file: the entry and its own return instructions (file offsets), and
// the number its events carry.
struct NativePoints {
    uint64_t entry = 0;
    std::vector<uint64_t> returns;
    uint32_t id = 0;
};

class NativeLinks {
public:
    // skel: the loaded programs; uprobes and processes: Probe's (none of the three owned). thread_sampling:
    // ProbePlan::thread_sampling. per_process: each traced process gets its own links on a library (per-process
    // probes that are not perf events: a perf event per point and process would hold each new worker too long).
    NativeLinks(lotus_bpf* skel, bool thread_sampling, bool per_process, UprobeLinks& uprobes,
                ProcessLinks& processes);
    ~NativeLinks();
    NativeLinks(const NativeLinks&) = delete;
    NativeLinks& operator=(const NativeLinks&) = delete;

    // Probe::attach_sampling, sampling_scope, threads_unsampled.
    void attach_sampling(const CounterSpec& event, uint64_t freq);
    const char* sampling_scope() const { return sampling_scope_; }
    size_t threads_unsampled() const;
    // Probe::attach_native, native_links.
    std::vector<bool> attach(const std::string& path, const std::vector<NativePoints>& fns);
    size_t links() const { return native_links_; }
    // Per-process mode: the libraries each traced process gets, and one process's links on one; empty, errno
    // set, if refused.
    struct Library {
        std::string path;
        std::vector<uint64_t> offsets, cookies;
    };
    const std::vector<Library>& per_process() const { return per_process_; }
    std::vector<common::UniqueFd> process_links(const Library& lib, uint32_t tgid);
    // The close (Probe::close): the uprobe_multi links into the caller's batch; later the sampling events, then
    // the perf-event links (the per-CPU sampling events' and the functions' probes).
    void release(std::vector<common::UniqueFd>& batch);
    void close_sampling();
    void close_perf_links() { links_.clear(); }

private:
    std::vector<common::UniqueFd> links_on(const std::string& path, const std::vector<uint64_t>& offsets,
                                           const std::vector<uint64_t>& cookies, uint32_t pid);

    lotus_bpf* skel_;
    bool thread_sampling_;
    bool per_process_mode_;
    UprobeLinks& uprobes_;
    ProcessLinks& processes_;
    std::vector<Library> per_process_;
    size_t native_links_ = 0;
    std::unique_ptr<ThreadSampling> sampling_; // the sampling events on the traced threads
    const char* sampling_scope_ = "none";
    std::vector<common::UniqueFd> multi_links_; // a library's uprobe_multi link, for every process
    std::vector<Link> links_;                   // per-CPU sampling, and functions' probes without uprobe_multi
};

} // namespace lotus::capture
