// Per-process mode: new children of traced processes held (holds.bpf.h) until their probes are attached, then
// continued; the guardian process that bounds every hold (guardian.h), and what the holds were. Owns the guardian
// and the uprobe of a child holding itself.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/unique_fd.h"
#include "guardian_cgroup.h"
#include "lotus_abi.h"

struct lotus_bpf;

namespace lotus::capture {

class Guardian;

// New children of traced processes stopped until their probes were attached (per-process probes).
struct HoldStats {
    uint64_t children = 0;
    uint64_t total_ns = 0;  // from the fork to the SIGCONT, summed
    uint64_t max_ns = 0;
    uint64_t attach_ns = 0; // of that, attaching their probes (the rest: waiting for the tracer), summed
    // Children whose probes were not in place before they ran: not held (unheld_by, LOTUS_UNHELD_*), or
    // continued by the guardian at the hold's deadline. unseen: from the fork to their probes' attach, an upper
    // bound of how long their calls went untraced.
    uint64_t unheld_by[LOTUS_UNHELD_REASONS] = {};
    uint64_t deadline_released = 0;
    uint64_t unseen_children = 0; // of those, the ones whose probes were then attached (vfork children aside)
    uint64_t unseen_total_ns = 0, unseen_max_ns = 0;
    uint64_t spawned_python = 0; // vfork-like children held at their exec of the traced interpreter
};

class Holds {
public:
    // Attaches a held child's probes (forked_from: the traced process it was just forked from, else 0).
    using Attach = std::function<void(uint32_t tgid, uint32_t forked_from)>;
    // Delivers pending records (Probe::poll).
    using Poll = std::function<int(int timeout_ms)>;

    // skel: the loaded programs (not owned). hold_self: a new child holds itself (ProbePlan::hold_self). A hold
    // lasts at most deadline_ns. job: the traced job's root process (the guardian joins its cgroups), or 0.
    Holds(lotus_bpf* skel, bool hold_self, uint64_t deadline_ns, pid_t job, Attach attach);
    ~Holds();
    Holds(const Holds&) = delete;
    Holds& operator=(const Holds&) = delete;

    // Probe::hold_exec_of.
    void hold_exec_of(const std::string& path);
    // The guardian process on lotus_held, and BPF told who the tracer and the guardian are.
    void start_guardian(const std::string& interp_path);
    // hold_self: the programs that hold a new child from its own context (holds.bpf.h), attached; the uprobe at
    // PyOS_AfterFork_Child made by child_start (empty, errno set, if refused) after the tracepoints.
    void attach_self_holds(const std::function<common::UniqueFd()>& child_start, const std::string& interp_path);
    // From now on, held children get their probes (attach_python was called).
    void attach_children() { attach_children_ = true; }
    // Every child held in BPF (lotus_held): its probes attached (when `attach`), then continued. Nothing to do
    // (no syscall) unless a child was held since the last walk, or `all`. Never throws: a refusal is kept by
    // the Attach callback for poll() to report.
    void release_held(bool attach = true, bool all = false);
    // Probe::let_children_start.
    size_t let_children_start(int wait_ms, const Poll& poll);
    // A record read: a child's getppid or exit ends its start.
    void seen(uint32_t type, uint32_t tgid);
    // A traced process exited: a vfork-like child that never exec'd (its entry waited for it) is forgotten.
    void exited(uint32_t tgid);
    // No new holds, then nothing left stopped: the self-hold uprobe closed, every held child continued, BPF's
    // counts of children not held read (the caller has destroyed the hold programs' tracepoint links).
    void stop();
    // Ends the guardian: it continues what the job's user stopped once they continue it, and exits.
    void end_guardian();

    const HoldStats& stats() const { return holds_; }
    const std::vector<GuardianCgroup>& guardian_cgroups() const { return guardian_cgroups_; }
    unsigned deadline_ms() const { return static_cast<unsigned>(hold_deadline_ns_ / 1'000'000); }

private:
    lotus_bpf* skel_;
    bool hold_self_;
    uint64_t hold_deadline_ns_;
    pid_t job_;
    Attach attach_;
    bool attach_children_ = false; // attach_python was called: held children get their probes
    std::vector<GuardianCgroup> guardian_cgroups_;
    uint64_t held_walked_ = 0; // BPF's held_total when release_held last walked lotus_held
    std::unordered_map<uint32_t, uint64_t> starting_; // continued children (monotonic ns) yet to call getppid
    HoldStats holds_;
    common::UniqueFd child_start_link_;  // hold_self_: the uprobe at PyOS_AfterFork_Child (every process of the interpreter)
    std::unique_ptr<Guardian> guardian_; // bounds the holds; end_guardian() ends it
};

} // namespace lotus::capture
