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

} // namespace lotus::launch
