// lotus-bpf agent: a node's tracer as a service (systemd, a Kubernetes DaemonSet). It keeps one --metrics endpoint
// up, attaches to each PyTorch training process of the node as it starts (with its children) and detaches when it
// ends; each job's series carry its own labels. Only the processes it traces get probes.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "session.h"

namespace lotus::cli {

struct AgentOptions {
    std::string metrics = "127.0.0.1:9464";
    std::vector<std::string> match; // command-line globs; empty: every CPython process that loaded torch
    std::string record_dir;         // one record file per job here; empty: none
    double scan_interval_s = 1;     // how often /proc is looked through for new jobs
    double keep_finished_s = 300;   // a finished job's series stay this long (the last scrapes), then go
    std::vector<uint32_t> users;    // --users: only jobs of these (real) uids; empty: every user's
    std::vector<std::string> cgroups; // --cgroup: only jobs at or under one of these cgroup paths; empty: any
    unsigned max_jobs = 8;          // --max-jobs: jobs traced at once; a job found beyond them is skipped
    double record_max_mb = 0;       // --record-max-mb: the agent's records in record_dir within this (MiB); 0: none
    Options session;                // each job's run: rules, resource readings, --node, the disk reserve
};

// Until SIGTERM/SIGINT/SIGHUP: then every job is detached and the exit status is 0. Errors: one line, 1.
int run_agent(const AgentOptions& opts);

// What the agent reads of a process to decide it is a job: its command line (NULs as spaces), whether it runs
// CPython and whether it mapped torch's library.
struct Candidate {
    std::string cmdline;
    bool python = false, torch = false;
};
// Whether a process is a training job the agent attaches to: CPython with torch loaded, and, where globs are
// given, a command line one of them matches (fnmatch, '*' crossing '/').
bool is_job(const Candidate& c, const std::vector<std::string>& match);

// The labels of a job's series: lotus_job (its script's or program's name), lotus_job_id (SLURM_JOB_ID, a
// torchrun run id other than the default, else its start time in UTC) and pid (the job's).
std::map<std::string, std::string> job_labels(int pid);

// A part of a record file's name from a label the job chose (its argv, its environment): its base name, only
// [A-Za-z0-9._-] (any other byte '_'), no leading dot and no "..", at most 64 bytes; "job" when nothing is left.
std::string file_name_part(const std::string& label);
// DIR/NAME.lbt created empty (0600, O_EXCL, never through a link), else DIR/NAME-2.lbt, -3...: the path of a job's
// record, which never replaces another's. "" with errno where none can be made.
std::string reserve_record(const std::string& dir, const std::string& name);

// --users' names (the passwd database) and uids as the uids they are; std::invalid_argument naming the first that
// is neither (an unknown name, an empty entry).
std::vector<uint32_t> parse_users(const std::vector<std::string>& names);
// --cgroup's path as /proc/PID/cgroup shows it ("/slurm/uid_1000/job_42", "/kubepods.slice"): absolute, no "." or
// ".." component, its trailing '/' dropped; std::invalid_argument otherwise (a mount path under /sys/fs/cgroup too).
std::string cgroup_prefix(const std::string& path);
// Whether a process whose /proc/PID/cgroup reads `proc_cgroup` is at or under one of `prefixes` (component by
// component) in any of its hierarchies: v2's "0::/path" or a v1 controller's "N:cpu,cpuacct:/path".
bool in_cgroups(const std::string& proc_cgroup, const std::vector<std::string>& prefixes);
// The real uid in /proc/PID/status's text ("Uid:\treal\teffective..."); nullopt where there is none.
std::optional<uint32_t> real_uid(const std::string& status);
// Whether a failed run's reason is file descriptors running out (EMFILE, ENFILE).
bool out_of_fds(const std::string& reason);

// The agent's own record files in --record-dir kept within a size (--record-max-mb). Each record is noted once
// its job ended (its name, inode, size and modification time) in DIR/.lotus-agent-records (0600, owned by the
// agent; a later run of the agent takes the notes up); the oldest noted are deleted first. A file the agent did
// not note, or no longer the file it noted (replaced, rewritten, a link), is never deleted: only forgotten.
class RecordBudget {
public:
    static constexpr const char* kNotes = ".lotus-agent-records";
    // Reads the notes of earlier runs (kept only where the file is still the one noted); throws
    // std::runtime_error where they cannot be read or written.
    RecordBudget(std::string dir, uint64_t max_bytes);
    struct Removed {
        std::string name;
        uint64_t bytes = 0;
    };
    // A record the agent completed, by its name in the directory: noted, if it is a regular file there.
    void add(const std::string& name);
    // The oldest noted records deleted until the rest are within the size; "" or why the notes could not be saved.
    std::vector<Removed> enforce(std::string* error = nullptr);
    uint64_t bytes() const; // the noted records' total
    size_t files() const { return notes_.size(); }

private:
    struct Note {
        std::string name;
        uint64_t ino = 0, size = 0;
        int64_t mtime_ns = 0;
    };
    std::optional<Note> look(const std::string& name) const; // the file there now (lstat), if a regular file
    std::string save() const;
    std::string dir_;
    uint64_t max_;
    std::deque<Note> notes_; // oldest first
    bool dirty_ = false;     // a note added since the last save
};

} // namespace lotus::cli
