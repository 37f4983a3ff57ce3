// Where the guardian lives. A cgroup can be killed whole (cgroup.kill, systemd's stop of a unit with
// KillMode=control-group, an OOM kill with memory.oom.group=1, a container runtime's cleanup): every process in
// it dies at once. A guardian in the tracer's cgroup would die with the tracer, and a child held at that moment
// would stay stopped for ever. So the guardian leaves the tracer's cgroup for the traced job's own (that of its
// root process), in every mounted hierarchy, before any probe is attached: it then dies only with the job, whose
// held children die with it. Where the job's cgroup cannot take it (cgroup v2's rule against processes in a
// cgroup with controllers enabled below, a threaded cgroup, a cgroup namespace, permissions), it goes to the
// nearest of the job's ancestors that can, up to the hierarchy's root; where none can, it stays and says so.
// Where the job's cgroup is the tracer's or below it, the guardian stays: killing the tracer's kills the job too.
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace lotus::capture {

// One hierarchy's line of /proc/PID/cgroup: "0::/a/b" (cgroup2) or "4:memory:/a" (a v1 hierarchy).
struct CgroupLine {
    std::string controllers; // "" for cgroup2; "memory", "cpu,cpuacct", "name=systemd" for v1
    std::string path;        // as the reader's cgroup namespace sees it: "/a/b", or "/../x" outside it
};
std::vector<CgroupLine> parse_proc_cgroup(const std::string& text);

// A mounted cgroup hierarchy, from /proc/self/mountinfo.
struct CgroupMount {
    std::string controllers; // as in CgroupLine: "" for cgroup2
    std::string root;        // the hierarchy's directory mounted there ("/" unless a part of it is)
    std::string dir;         // where: /sys/fs/cgroup/unified
};
std::vector<CgroupMount> parse_cgroup_mounts(const std::string& mountinfo);

// The cgroups to try for the guardian in one hierarchy, best first: the job's, then each of its ancestors up to
// the hierarchy's root, those the mount at `mount_root` shows; none when the job's is the tracer's or below it.
std::vector<std::string> guardian_candidates(const std::string& tracer, const std::string& job,
                                             const std::string& mount_root);

// Where the guardian went in one hierarchy.
struct GuardianCgroup {
    std::string hierarchy;           // "cgroup2", or the v1 controllers
    std::string tracer, job, guardian; // the three's cgroups in it (guardian == tracer: it stayed)
    std::string why;                 // empty where it joined the job's; else why it is where it is
    bool stuck = false; // it stayed in the tracer's cgroup, which the job is not in: a kill of that cgroup whole
                        // kills the guardian with the tracer, and a child held then stays stopped
};

// Moves the guardian (by pid) out of this process's cgroups for the job's (its root process's), per hierarchy
// mounted here; what it did, one entry per hierarchy. Never throws.
std::vector<GuardianCgroup> place_guardian(pid_t guardian, pid_t job);

// One line for stderr and the summary where the guardian is stuck in some hierarchy; nullopt where it is not.
std::optional<std::string> stuck_note(const std::vector<GuardianCgroup>& placed);

} // namespace lotus::capture
