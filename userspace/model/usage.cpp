#include "usage.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "lotus_abi.h"

namespace lotus::model {

namespace {

constexpr uint64_t kPeakWindowNs = 1'000'000'000;

uint64_t since(uint64_t now, uint64_t before) { return now > before ? now - before : 0; }

// The exact runtime's user part, split as the kernel's ticks split it: runtime * utime / (utime + stime), never
// more than runtime (the sum may not fit 64 bits in a damaged record file; no ticks at all: all of it).
uint64_t user_part(uint64_t runtime, uint64_t utime, uint64_t stime)
{
    double ticks = static_cast<double>(utime) + static_cast<double>(stime);
    if (ticks <= 0)
        return runtime;
    double v = static_cast<double>(runtime) * static_cast<double>(utime) / ticks;
    return v >= static_cast<double>(runtime) ? runtime : static_cast<uint64_t>(v);
}

} // namespace

void UsageTracker::consume(const void* data, size_t len) { dispatch(data, len, *this); }

void UsageTracker::process_event(const lotus_proc_event& p)
{
    if (p.h.type != LOTUS_EV_FORK)
        return;
    forked_at_[p.h.tgid] = p.h.ts_ns;
    last_.erase(p.h.tgid); // a reused pid whose exit record was lost: not its base
    ended_.erase(p.h.tgid);
    // A child starts in its parent's cgroup: its throttling counts from the parent's last reading (its first own
    // reading replaces it if it is in another cgroup by then).
    cgroups_.erase(p.h.tgid);
    if (auto parent = cgroups_.find(p.parent_tgid);
        parent != cgroups_.end() && parent->second.have_last && (parent->second.last.flags & kCgroupThrottle)) {
        auto& c = cgroups_[p.h.tgid];
        const auto& l = cgroups_.at(p.parent_tgid).last;
        c.have_first = true;
        c.periods = l.periods, c.throttled_periods = l.throttled_periods, c.throttled_ns = l.throttled_ns;
        c.first_path.assign(l.path, strnlen(l.path, sizeof(l.path)));
    }
}

void UsageTracker::cgroup(const RecordCgroup& r)
{
    auto& c = cgroups_[r.tgid];
    std::string path(r.path, strnlen(r.path, sizeof(r.path)));
    if (first_path_.empty())
        first_path_ = path;
    if (r.flags & kCgroupThrottle) {
        if (!c.have_first || (!c.have_last && c.first_path != path)) {
            c.have_first = true;
            c.periods = r.periods, c.throttled_periods = r.throttled_periods, c.throttled_ns = r.throttled_ns;
            c.first_path = path;
        }
        auto [pt, fresh] = paths_.try_emplace(path);
        if (fresh)
            pt->second.first = r;
        pt->second.last = r;
        // its cgroup's throttling since its first reading, into its row (a process with readings only: a folded
        // one's row has its figures already)
        if (auto it = usage_.find(r.tgid); it != usage_.end()) {
            auto d = [](uint64_t now, uint64_t then) { return now > then ? now - then : 0; };
            auto& u = it->second;
            u.throttle_known = true;
            u.periods = d(r.periods, c.periods);
            u.throttled_periods = d(r.throttled_periods, c.throttled_periods);
            u.throttled_ns = d(r.throttled_ns, c.throttled_ns);
        }
    }
    c.have_last = true;
    c.last = r;
}

double JobLimits::cpus() const
{
    double q = have_quota ? quota_cpus() : 0;
    double s = have_cpuset ? cpuset_cpus : 0;
    return q > 0 && s > 0 ? std::min(q, s) : q > 0 ? q : s;
}

JobLimits UsageTracker::limits() const
{
    JobLimits j;
    std::set<std::string> paths;
    std::vector<const RecordCgroup*> lasts;
    for (const auto& [pid, c] : cgroups_)
        if (c.have_last)
            lasts.push_back(&c.last);
    for (const auto& [path, r] : folded_limits_)
        lasts.push_back(&r);
    for (const RecordCgroup* rp : lasts) {
        const auto& r = *rp;
        j.known = true;
        paths.insert(std::string(r.path, strnlen(r.path, sizeof(r.path))));
        j.v1 |= (r.flags & kCgroupV1) != 0;
        j.v2 |= (r.flags & kCgroupV2) != 0;
        if (r.flags & kCgroupQuota) {
            double cpus = r.quota_us > 0 && r.period_us ? static_cast<double>(r.quota_us) / static_cast<double>(r.period_us) : 0;
            if (!j.have_quota || (cpus > 0 && (j.quota_cpus() == 0 || cpus < j.quota_cpus()))) {
                if (cpus > 0 || !j.have_quota)
                    j.quota_us = cpus > 0 ? r.quota_us : -1, j.period_us = r.period_us;
            }
            j.have_quota = true;
        }
        if ((r.flags & kCgroupCpuset) && r.cpuset_cpus && (!j.have_cpuset || r.cpuset_cpus < j.cpuset_cpus)) {
            j.have_cpuset = true;
            j.cpuset_cpus = r.cpuset_cpus;
            j.cpuset.assign(r.cpuset, strnlen(r.cpuset, sizeof(r.cpuset)));
        }
        if (r.flags & kCgroupMemory) {
            j.have_memory = true;
            j.memory_limit = std::min(j.memory_limit, r.memory_limit);
        }
    }
    j.path = first_path_;
    j.cgroups = paths.size();
    auto d = [](uint64_t now, uint64_t then) { return now > then ? now - then : 0; };
    for (const auto& [path, t] : paths_) {
        j.have_throttle = true;
        j.periods += d(t.last.periods, t.first.periods);
        j.throttled_periods += d(t.last.throttled_periods, t.first.throttled_periods);
        j.throttled_ns += d(t.last.throttled_ns, t.first.throttled_ns);
    }
    return j;
}

// Its exit: the kernel's totals over its life, against its last reading (or its fork).
void UsageTracker::exit_usage(const lotus_usage& exit)
{
    const lotus_usage* x = &exit;
    auto l = last_.find(x->h.tgid);
    auto fork = forked_at_.find(x->h.tgid);
    if (!ended_.insert(x->h.tgid).second || ((l == last_.end() || !l->second.have) && fork == forked_at_.end()))
        return; // never read and not forked while traced: nothing to measure from
    auto& u = usage_[x->h.tgid];
    RecordUsage prev{};
    prev.ts_ns = fork != forked_at_.end() ? fork->second : 0;
    if (l != last_.end() && l->second.have)
        prev = l->second.r;
    else
        u.forked = true, u.first_ns = prev.ts_ns;
    // the exact CPU time, split user/system as the kernel's ticks split it
    uint64_t user = user_part(x->runtime_ns, x->utime_ns, x->stime_ns);
    uint64_t system = x->runtime_ns - user; // user_part never exceeds the runtime
    uint64_t d_cpu = since(user, prev.user_ns) + since(system, prev.system_ns);
    u.user_ns += since(user, prev.user_ns);
    u.system_ns += since(system, prev.system_ns);
    u.read_bytes += since(x->read_bytes, prev.read_bytes);
    u.write_bytes += since(x->write_bytes, prev.write_bytes);
    u.nvcsw += since(x->nvcsw, prev.nvcsw);
    u.nivcsw += since(x->nivcsw, prev.nivcsw);
    // network: from its fork (prev all zeros) or its last reading
    if (x->net_counted) {
        u.net_seen = true;
        u.net_sent += since(x->net_sent, prev.net_sent);
        u.net_recv += since(x->net_recv, prev.net_recv);
    } else {
        u.net_missing = true;
    }
    u.last_ns = std::max<uint64_t>(u.last_ns, x->h.ts_ns);
    u.exact_end = true;
    job_window_cpu_ns_ += d_cpu;
    if (l != last_.end()) {
        l->second.peak_cpu_ns += d_cpu;
        close_peak(u, l->second, x->h.ts_ns);
        last_.erase(l);
    } else if (x->h.ts_ns > prev.ts_ns) { // forked and gone before its first reading
        u.peak_cpu_pct = 100.0 * static_cast<double>(d_cpu) / static_cast<double>(x->h.ts_ns - prev.ts_ns);
    }
}

void UsageTracker::reading(const RecordUsage& r)
{
    if (ended_.count(r.tgid))
        return; // read between its exit figures and its exit (the sweep had not seen it go)
    if (r.ts_ns != sweep_ts_) {
        if (sweep_ts_)
            end_sweep();
        sweep_ts_ = r.ts_ns;
        sweep_rss_kb_ = sweep_pss_kb_ = 0;
        sweep_pss_all_ = true;
        if (!job_window_from_)
            job_window_from_ = r.ts_ns;
    }
    sweep_rss_kb_ += r.rss_kb;
    if (r.pss_kb == kNoPss)
        sweep_pss_all_ = false;
    else
        sweep_pss_kb_ += r.pss_kb;

    auto& u = usage_[r.tgid];
    auto& l = last_[r.tgid];
    u.peak_rss_kb = std::max(u.peak_rss_kb, r.hwm_kb);
    if (r.pss_kb != kNoPss)
        u.peak_pss_kb = std::max(u.peak_pss_kb, r.pss_kb);
    RecordUsage prev{};
    if (l.have) {
        prev = l.r;
    } else if (auto f = forked_at_.find(r.tgid); f != forked_at_.end()) {
        prev.ts_ns = f->second; // a new process: everything from zero at its fork
        u.forked = true;
        u.first_ns = l.peak_from_ns = f->second;
    } else { // alive when tracing began: its figures count from this first reading
        (r.flags & kUsageNet ? u.net_seen : u.net_missing) = true;
        l.r = r;
        l.have = true;
        u.first_ns = u.last_ns = l.peak_from_ns = r.ts_ns;
        u.readings = 1;
        return;
    }
    uint64_t dt = since(r.ts_ns, prev.ts_ns);
    l.r = r;
    l.have = true;
    // The base for the next interval never goes back: the sweep may read a process after its exit took its
    // network entry (read as 0) and before its exit record comes, which then counts from this base.
    for (auto f : {&RecordUsage::user_ns, &RecordUsage::system_ns, &RecordUsage::read_bytes, &RecordUsage::write_bytes,
                   &RecordUsage::nvcsw, &RecordUsage::nivcsw, &RecordUsage::net_sent, &RecordUsage::net_recv})
        l.r.*f = std::max(r.*f, prev.*f);
    u.last_ns = r.ts_ns;
    u.readings++;
    if (!dt)
        return;
    uint64_t du = since(r.user_ns, prev.user_ns), ds = since(r.system_ns, prev.system_ns);
    uint64_t dr = since(r.read_bytes, prev.read_bytes), dw = since(r.write_bytes, prev.write_bytes);
    uint64_t dv = since(r.nvcsw, prev.nvcsw), di = since(r.nivcsw, prev.nivcsw);
    u.user_ns += du;
    u.system_ns += ds;
    u.read_bytes += dr;
    u.write_bytes += dw;
    u.nvcsw += dv;
    u.nivcsw += di;
    bool net = r.flags & kUsageNet;
    uint64_t dsent = net ? since(r.net_sent, prev.net_sent) : 0, drecv = net ? since(r.net_recv, prev.net_recv) : 0;
    (net ? u.net_seen : u.net_missing) = true;
    u.net_sent += dsent;
    u.net_recv += drecv;
    double secs = static_cast<double>(dt) / 1e9;
    u.rss_kb_s += static_cast<double>(r.rss_kb) * secs;
    u.rss_s += secs;
    l.peak_cpu_ns += du + ds;
    if (r.ts_ns - l.peak_from_ns >= kPeakWindowNs)
        close_peak(u, l, r.ts_ns);
    job_window_cpu_ns_ += du + ds;
    if (sink_)
        sink_(UsagePoint{r.tgid, r.ts_ns, secs, 100 * static_cast<double>(du) / 1e9 / secs,
                         100 * static_cast<double>(ds) / 1e9 / secs, static_cast<double>(r.rss_kb) / 1024,
                         r.pss_kb == kNoPss ? -1 : static_cast<double>(r.pss_kb) / 1024, static_cast<double>(dr) / secs,
                         static_cast<double>(dw) / secs, static_cast<double>(dv) / secs, static_cast<double>(di) / secs,
                         net ? static_cast<double>(dsent) / secs : -1, net ? static_cast<double>(drecv) / secs : -1});
}

void UsageTracker::close_peak(ProcessUsage& u, Last& l, uint64_t now)
{
    uint64_t window = since(now, l.peak_from_ns);
    if (window && (window >= kPeakWindowNs || !l.peaked)) {
        u.peak_cpu_pct = std::max(u.peak_cpu_pct, 100.0 * static_cast<double>(l.peak_cpu_ns) / static_cast<double>(window));
        l.peaked = window >= kPeakWindowNs;
    }
    l.peak_from_ns = now;
    l.peak_cpu_ns = 0;
}

void UsageTracker::end_sweep()
{
    if (!job_.sweeps)
        job_.first_ns = sweep_ts_;
    job_.sweeps++;
    job_.last_ns = sweep_ts_;
    job_.peak_rss_sum_kb = std::max(job_.peak_rss_sum_kb, sweep_rss_kb_);
    if (sweep_pss_all_)
        job_.peak_pss_sum_kb = std::max(job_.peak_pss_sum_kb, sweep_pss_kb_);
    if (sweep_ts_ - job_window_from_ >= kPeakWindowNs)
        close_job_peak();
}

void UsageTracker::close_job_peak()
{
    uint64_t window = since(sweep_ts_, job_window_from_);
    if (window && (window >= kPeakWindowNs || !job_peaked_)) {
        job_.peak_cpu_pct = std::max(job_.peak_cpu_pct, 100.0 * static_cast<double>(job_window_cpu_ns_) /
                                                            static_cast<double>(window));
        job_peaked_ = window >= kPeakWindowNs;
    }
    job_window_from_ = sweep_ts_;
    job_window_cpu_ns_ = 0;
}

void UsageTracker::finish()
{
    if (sweep_ts_) {
        end_sweep();
        if (!job_peaked_)
            close_job_peak(); // a run shorter than 1 s: its mean
    }
    for (auto& [pid, l] : last_) // still running: their last window, if it is their only one
        if (!l.peaked)
            close_peak(usage_[pid], l, l.r.ts_ns);
    sweep_ts_ = 0;
}

void ProcessUsage::absorb(const ProcessUsage& o)
{
    summed_wall_ns = wall_ns() + o.wall_ns();
    processes += o.processes;
    first_ns = std::min(first_ns, o.first_ns);
    last_ns = std::max(last_ns, o.last_ns);
    forked &= o.forked;
    exact_end &= o.exact_end;
    readings += o.readings;
    user_ns += o.user_ns, system_ns += o.system_ns;
    read_bytes += o.read_bytes, write_bytes += o.write_bytes;
    nvcsw += o.nvcsw, nivcsw += o.nivcsw;
    net_sent += o.net_sent, net_recv += o.net_recv;
    net_seen |= o.net_seen, net_missing |= o.net_missing;
    peak_cpu_pct = std::max(peak_cpu_pct, o.peak_cpu_pct);
    rss_kb_s += o.rss_kb_s, rss_s += o.rss_s;
    peak_rss_kb = std::max(peak_rss_kb, o.peak_rss_kb);
    peak_pss_kb = std::max(peak_pss_kb, o.peak_pss_kb);
    throttle_known &= o.throttle_known;
    periods += o.periods, throttled_periods += o.throttled_periods, throttled_ns += o.throttled_ns;
}

void UsageTracker::fold(uint32_t pid, uint32_t into)
{
    if (auto u = usage_.find(pid); u != usage_.end()) {
        if (auto r = usage_.find(into); r != usage_.end())
            r->second.absorb(u->second);
        else
            usage_.emplace(into, u->second);
        usage_.erase(u);
    }
    last_.erase(pid);
    forked_at_.erase(pid);
    ended_.erase(pid);
    if (auto c = cgroups_.find(pid); c != cgroups_.end()) { // its limits still count for the job's: one per cgroup
        if (c->second.have_last)
            folded_limits_[std::string(c->second.last.path, strnlen(c->second.last.path, sizeof(c->second.last.path)))] =
                c->second.last;
        cgroups_.erase(c);
    }
}

} // namespace lotus::model
