// Session: the traced processes' resource use and cgroups, read from /proc and the cgroup files into the stream.
#include "live_session.h"

#include <cstring>

#include "common/clock.h"
#include "proc/host_cpu.h"

namespace lotus::cli {

using common::clock_ns;
using common::monotonic_ns;

namespace {

// This thread's CPU time: what the PSS walks cost the tracer.
uint64_t thread_cpu_ns()
{
    return clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

} // namespace

// Resource use: every traced process's /proc, read in one sweep (one timestamp) every interval; PSS (a walk of its
// page tables) as --pss-interval says.
void Session::sweep(uint64_t now)
{
    bool pss = pss_schedule_->due(now);
    uint64_t cpu0 = pss ? thread_cpu_ns() : 0;
    last_sweep_ = now;
    std::vector<uint32_t> live = live_pids();
    proc_reader_.keep_only(live);
    pss_schedule_->seen(live, now);
    for (uint32_t pid : live) {
        bool young = !pss && pss_schedule_->young_due(pid, now);
        uint64_t young0 = young ? thread_cpu_ns() : 0;
        auto u = proc_reader_.read(static_cast<int>(pid), pss || young);
        if (young)
            pss_schedule_->young_done(pid, now, thread_cpu_ns() - young0);
        if (!u)
            continue;
        auto net = probe_->net_bytes(pid);
        model::RecordUsage r{model::kRecordUsage, pid, pid, 0, now, u->user_ns, u->system_ns, u->rss_kb,
                             u->hwm_kb, u->pss_kb.value_or(model::kNoPss), u->read_bytes, u->write_bytes,
                             u->nvcsw, u->nivcsw, u->threads, probe_->counts_network() ? model::kUsageNet : 0,
                             net.sent, net.recv, u->private_kb.value_or(model::kNoPss),
                             u->shared_dirty_kb.value_or(model::kNoPss), u->anon_kb.value_or(model::kNoPss)};
        feed(&r, sizeof(r));
    }
    if (root_ > 0)
        if (auto h = proc::read_host_cpu(root_)) { // the host's CPU on the job's CPUs: what others took (the estimate)
            model::RecordHostCpu r{model::kRecordHostCpu, static_cast<uint32_t>(root_), 0, 0, now, h->busy_ns,
                                   h->total_ns, h->nice_ns, h->cpus, 0};
            feed(&r, sizeof(r));
        }
    cgroup_sweep(now, live);
    if (pss)
        pss_schedule_->done(now, thread_cpu_ns() - cpu0);
}

// Each process's cgroup: its limits read once (at its first sweep), its cgroup's throttling at every sweep (once
// per cgroup), into the stream as RecordCgroup.
void Session::cgroup_sweep(uint64_t now, const std::vector<uint32_t>& pids)
{
    std::map<std::string, launch::ProcessCgroup> read; // by cpu directory: this sweep's throttling
    for (uint32_t pid : pids) {
        auto it = cgroups_.find(pid);
        if (it == cgroups_.end()) {
            auto cg = launch::read_process_cgroup(static_cast<int>(pid));
            if (!cg)
                continue;
            it = cgroups_.emplace(pid, std::move(*cg)).first;
        } else if (!it->second.cpu_dir.empty()) {
            auto r = read.find(it->second.cpu_dir);
            if (r == read.end()) {
                launch::ProcessCgroup again = it->second;
                again.have_throttle = launch::read_throttling(again);
                r = read.emplace(it->second.cpu_dir, std::move(again)).first;
            }
            it->second.have_throttle = r->second.have_throttle;
            it->second.periods = r->second.periods;
            it->second.throttled_periods = r->second.throttled_periods;
            it->second.throttled_ns = r->second.throttled_ns;
        }
        cgroup_record(pid, it->second, now);
    }
}

// A traced process ended: its cgroup's throttling now, as at the end of its life (the cgroup outlives it).
void Session::cgroup_exit(uint32_t pid)
{
    auto it = cgroups_.find(pid);
    if (it == cgroups_.end())
        return;
    launch::ProcessCgroup cg = std::move(it->second);
    cgroups_.erase(it);
    cg.have_throttle = launch::read_throttling(cg);
    cgroup_record(pid, cg, monotonic_ns());
}

void Session::cgroup_record(uint32_t pid, const launch::ProcessCgroup& cg, uint64_t now)
{
    model::RecordCgroup r{};
    r.type = model::kRecordCgroup;
    r.tgid = r.tid = pid;
    r.ts_ns = now;
    r.flags = (cg.have_quota ? model::kCgroupQuota : 0) | (cg.have_cpuset ? model::kCgroupCpuset : 0) |
              (cg.have_memory ? model::kCgroupMemory : 0) | (cg.have_throttle ? model::kCgroupThrottle : 0) |
              (cg.v1 ? model::kCgroupV1 : 0) | (cg.v2 ? model::kCgroupV2 : 0);
    if (!(r.flags & (model::kCgroupQuota | model::kCgroupCpuset | model::kCgroupMemory | model::kCgroupThrottle)))
        return; // nothing readable: nothing said
    r.cpuset_cpus = cg.cpuset_cpus;
    r.quota_us = cg.quota_us;
    r.period_us = cg.period_us;
    r.memory_limit = cg.memory_limit;
    r.periods = cg.periods;
    r.throttled_periods = cg.throttled_periods;
    r.throttled_ns = cg.throttled_ns;
    memcpy(r.path, cg.path.data(), std::min(cg.path.size(), sizeof(r.path) - 1));
    memcpy(r.cpuset, cg.cpuset.data(), std::min(cg.cpuset.size(), sizeof(r.cpuset) - 1));
    feed(&r, sizeof(r));
}

} // namespace lotus::cli
