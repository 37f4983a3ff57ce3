// Simulated device limits for a launched job (--cpus, --memory, --cpuset), without containers: a cgroup made by
// lotus-bpf under its own, the limits written, the job's processes placed in it before they run (what they fork
// stays in it), its throttling and memory figures read at the end, and the cgroup removed on every exit path
// (processes still in it moved back to the parent first). cgroup v2 where the controllers are on the unified
// hierarchy; else v1 (/sys/fs/cgroup/{cpu,memory,cpuset,blkio}).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lotus::launch {

// A block device's bandwidth limit (--device-read-bps, --device-write-bps).
struct DeviceRate {
    std::string device; // as given: /dev/vda
    unsigned major = 0, minor = 0;
    uint64_t bytes_per_s = 0;
};

struct Limits {
    double cpus = 0;           // CPU bandwidth in CPUs (2.5: 250 ms per 100 ms period); 0: none
    uint64_t memory_bytes = 0; // 0: none
    std::string cpuset;        // "0-1,3"; empty: none
    std::vector<DeviceRate> read_bps, write_bps;
    bool any() const
    {
        return cpus > 0 || memory_bytes > 0 || !cpuset.empty() || !read_bps.empty() || !write_bps.empty();
    }
};

// "/dev/sda:10M": a whole disk (the kernel throttles disks, not partitions) and bytes per second; throws
// std::invalid_argument with a readable message.
DeviceRate parse_device_rate(const std::string& text);

// "4G", "512M", "300k", "1048576" (bytes; binary units); throws std::invalid_argument with a readable message.
uint64_t parse_bytes(const std::string& text);

struct CgroupStats {
    uint64_t periods = 0, throttled_periods = 0, throttled_ns = 0; // CPU bandwidth enforcement
    uint64_t memory_peak_bytes = 0; // the cgroup's peak charge (v1 max_usage_in_bytes; v2 memory.peak)
    uint64_t memory_limit_hits = 0; // times the charge hit the limit (v1 failcnt; v2 memory.events max)
    uint64_t oom_kills = 0;         // processes the OOM killer killed in it
    uint64_t io_read_bytes = 0, io_write_bytes = 0; // what it read and wrote on the limited devices
    bool have_cpu = false, have_memory = false, have_io = false;
};

class JobCgroup {
public:
    // Throws std::runtime_error with one line when the controllers are missing, not mounted or not writable;
    // whatever it created by then is removed.
    explicit JobCgroup(const Limits& limits);
    ~JobCgroup(); // moves what is still in it to the parent, removes it
    JobCgroup(const JobCgroup&) = delete;
    JobCgroup& operator=(const JobCgroup&) = delete;

    void add(pid_t pid); // the process joins (its later children with it)
    CgroupStats stats() const;
    const std::string& version() const { return version_; } // "v1" or "v2"
    std::vector<std::string> paths() const { return dirs_; }
    // Processes still in it (a job that outlived tracing), moved out by the destructor.
    std::vector<pid_t> members() const;

private:
    void make(const std::string& dir);
    std::vector<std::string> dirs_; // one per v1 hierarchy, or the v2 one
    std::string version_;
    std::vector<std::string> io_devices_; // "major:minor" of the limited devices
};

// A traced process's own cgroup (--pid or launched, lotus-bpf's or not), read from outside: /proc/PID/cgroup, then
// each resource in the hierarchy that holds its controller (a v1 hierarchy mounted with it, else the v2 one, as
// /proc/self/mountinfo lists them). Limits are the tightest of its cgroup's and every ancestor's (each applies);
// throttling is its cgroup's cpu.stat. Where a file cannot be read the figure is left out (its `have_` false).
struct ProcessCgroup {
    std::string path;              // its cgroup in the cpu hierarchy (or the first one read)
    bool v1 = false, v2 = false;   // which hierarchies the figures came from
    bool have_quota = false, have_cpuset = false, have_memory = false, have_throttle = false;
    int64_t quota_us = -1;         // -1: no quota
    uint64_t period_us = 0;
    std::string cpuset;            // effective CPUs, as the kernel lists them
    unsigned cpuset_cpus = 0;
    uint64_t memory_limit = UINT64_MAX; // UINT64_MAX: no limit
    uint64_t periods = 0, throttled_periods = 0, throttled_ns = 0;
    // the directories the figures come from (kept to read the throttling again after the process is gone)
    std::string cpu_dir;
    bool cpu_v2 = false;
};

// The cgroup of pid; nullopt when /proc/PID/cgroup cannot be read (the process is gone).
std::optional<ProcessCgroup> read_process_cgroup(int pid);
// The throttling of a cgroup read before (its cpu_dir), again: false when it cannot be read (removed).
bool read_throttling(ProcessCgroup& cg);
// "0-3,8" -> 5; 0 where it does not parse.
unsigned count_cpu_list(const std::string& list);

} // namespace lotus::launch
