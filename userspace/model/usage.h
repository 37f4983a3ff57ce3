// Resource use over time per traced process, from the stream alone: /proc readings (RecordUsage, one sweep over
// the traced processes at a time), forks (a process forked while traced starts from zero) and the kernel's exact
// figures when a process exits (LOTUS_EV_USAGE). Pure: fed records, like the engine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>

#include "model/record_dispatch.h"
#include "model/user_records.h"

namespace lotus::model {

// One process over the interval between two of its readings (or its fork and its first reading).
struct UsagePoint {
    uint32_t pid = 0;
    uint64_t ts_ns = 0;      // the interval's end (the sweep's time)
    double interval_s = 0;
    double user_pct = 0, system_pct = 0; // of one CPU; /proc counts in 10 ms clock ticks
    double rss_mb = 0;
    double pss_mb = -1;                  // -1: not read in this sweep
    double read_bps = 0, write_bps = 0;  // storage I/O, bytes/s
    double voluntary_cs_ps = 0, involuntary_cs_ps = 0;
    double sent_bps = -1, recv_bps = -1; // network (internet sockets' payload), bytes/s; -1: not counted
};

// One process over the time it was traced: from its first reading (from its fork when it was forked while
// traced) to its exit (exact, from the kernel) or its last reading.
struct ProcessUsage {
    uint64_t first_ns = 0, last_ns = 0;
    bool forked = false;     // forked while traced: its figures start from zero at its fork
    bool exact_end = false;  // its exit was seen: totals from the kernel's own counts at that moment
    uint64_t readings = 0;
    uint64_t user_ns = 0, system_ns = 0, read_bytes = 0, write_bytes = 0, nvcsw = 0, nivcsw = 0; // while traced
    uint64_t net_sent = 0, net_recv = 0; // while traced: valid when net_known()
    bool net_seen = false, net_missing = false; // some figure of it carried network bytes; some did not
    bool net_known() const { return net_seen && !net_missing; }
    double peak_cpu_pct = 0;   // over intervals of at least 1 s (a 10 ms tick is 1 % of it); a process traced for
                               // less than that: its mean over that time
    double rss_kb_s = 0, rss_s = 0; // the integral of RSS over time, and the time it covers (for the mean)
    uint64_t peak_rss_kb = 0;  // VmHWM: the kernel's own peak
    uint64_t peak_pss_kb = 0;  // 0: never read
    // Its cgroup's CPU throttling while it lived (RecordCgroup: from its first reading, or its parent's last one
    // before its fork, to its last): the kernel throttles every thread of a cgroup at once. Valid when
    // throttle_known (read at both ends).
    bool throttle_known = false;
    uint64_t periods = 0, throttled_periods = 0, throttled_ns = 0;
    // Exited processes of one role folded into one (process_fold.h): how many it stands for; then first_ns and
    // last_ns span them all, and wall_ns() sums each one's own time.
    uint32_t processes = 1;
    uint64_t summed_wall_ns = 0;
    uint64_t wall_ns() const { return processes > 1 ? summed_wall_ns : last_ns - first_ns; }
    void absorb(const ProcessUsage& o);
};

// The limits the traced job ran under, from its processes' cgroups (RecordCgroup): each the tightest over its
// processes' last readings; what no process's files said is not known (its have_ false), never assumed.
struct JobLimits {
    bool known = false;       // some process's cgroup was read
    std::string path;         // the cgroup of the first process read (cpu hierarchy)
    size_t cgroups = 0;       // distinct cgroups the processes were in
    bool v1 = false, v2 = false;
    bool have_quota = false;  // a CPU quota (or its absence) was read
    int64_t quota_us = -1;    // -1: no quota
    uint64_t period_us = 0;
    double quota_cpus() const { return quota_us > 0 && period_us ? static_cast<double>(quota_us) / static_cast<double>(period_us) : 0; }
    bool have_cpuset = false;
    unsigned cpuset_cpus = 0;
    std::string cpuset;
    bool have_memory = false;
    uint64_t memory_limit = kNoMemoryLimit;
    // The cgroups' throttling over the run (each one's last reading less its first, summed over the cgroups).
    bool have_throttle = false;
    uint64_t periods = 0, throttled_periods = 0, throttled_ns = 0;
    // The CPUs its limits allow: the quota over its period and the cpuset's size, the smaller; 0: neither known.
    double cpus() const;
};

// The traced processes together, sweep by sweep.
struct JobUsage {
    uint64_t first_ns = 0, last_ns = 0, sweeps = 0;
    double peak_cpu_pct = 0;        // over intervals of at least 1 s
    uint64_t peak_rss_sum_kb = 0;   // a sweep's RSS summed over processes (shared pages counted in each)
    uint64_t peak_pss_sum_kb = 0;   // the same with PSS (shared pages split): 0 when never read
};

class UsageTracker : private RecordHandler {
public:
    using Sink = std::function<void(const UsagePoint&)>;
    explicit UsageTracker(Sink sink = {}) : sink_(std::move(sink)) {}
    using HostSink = std::function<void(const RecordHostCpu&)>;
    void on_host(HostSink sink) { host_sink_ = std::move(sink); } // the host's CPU readings (RecordHostCpu)
    void consume(const void* data, size_t len);
    void finish(); // closes the last sweep
    // An exited process folded into its role's row (Engine::FoldSink): its figures added to into's, its own gone.
    void fold(uint32_t pid, uint32_t into);
    const std::map<uint32_t, ProcessUsage>& processes() const { return usage_; }
    const JobUsage& job() const { return job_; }
    JobLimits limits() const;

private:
    struct Last {
        RecordUsage r{};
        bool have = false;
        uint64_t peak_from_ns = 0, peak_cpu_ns = 0; // the current ≥ 1 s window for the peak
        bool peaked = false; // a window was closed
    };
    void usage(const RecordUsage& r) override { reading(r); }
    void cgroup(const RecordCgroup& r) override;
    void host_cpu(const RecordHostCpu& r) override
    {
        if (host_sink_)
            host_sink_(r);
    }
    // A process's cgroup: its first throttling reading (or its parent's before its fork) and its latest record.
    struct CgroupSeen {
        bool have_first = false, have_last = false;
        uint64_t periods = 0, throttled_periods = 0, throttled_ns = 0; // the first
        std::string first_path;
        RecordCgroup last{};
    };
    std::map<uint32_t, CgroupSeen> cgroups_;
    struct PathThrottle { // one cgroup over the run
        RecordCgroup first{}, last{};
    };
    std::map<std::string, PathThrottle> paths_;
    std::map<std::string, RecordCgroup> folded_limits_; // folded processes' last records, one per cgroup
    std::string first_path_;
    void process_event(const lotus_proc_event& p) override;
    void exit_usage(const lotus_usage& exit) override;
    void reading(const RecordUsage& r);
    void end_sweep();
    void close_job_peak();
    // A process's last peak window (at its exit or the end): counted when it is its only one or 1 s long.
    void close_peak(ProcessUsage& u, Last& l, uint64_t now);
    Sink sink_;
    HostSink host_sink_;
    std::map<uint32_t, ProcessUsage> usage_;
    std::map<uint32_t, Last> last_;
    std::map<uint32_t, uint64_t> forked_at_;
    std::set<uint32_t> ended_; // exit figures taken: a later reading (its zombie) would count from zero again
    JobUsage job_;
    uint64_t sweep_ts_ = 0, sweep_rss_kb_ = 0, sweep_pss_kb_ = 0;
    bool sweep_pss_all_ = true;
    // the job's CPU: summed over the processes' readings, per ≥ 1 s window of sweeps
    uint64_t job_window_from_ = 0, job_window_cpu_ns_ = 0;
    bool job_peaked_ = false;
};

} // namespace lotus::model
