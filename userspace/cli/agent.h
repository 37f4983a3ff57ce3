// lotus-bpf agent: a node's tracer as a service (systemd, a Kubernetes DaemonSet). It keeps one --metrics endpoint
// up, attaches to each PyTorch training process of the node as it starts (with its children) and detaches when it
// ends; each job's series carry its own labels. Only the processes it traces get probes.
#pragma once
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

} // namespace lotus::cli
