#include "export/worker_model.h"

#include <algorithm>
#include <cmath>

namespace lotus::exporter {

namespace {

double seconds(uint64_t ns) { return static_cast<double>(ns) / 1e9; }

} // namespace

const char* bound_name(Bound b)
{
    return b == Bound::Workers ? "workers" : b == Bound::Cpus ? "cpus" : "loop";
}

const ModelPoint* WorkerModel::at(unsigned workers) const
{
    for (const auto& p : curve)
        if (p.workers == workers)
            return &p;
    return nullptr;
}

WorkerModel worker_model(const ModelInputs& in, unsigned max_workers)
{
    WorkerModel m;
    m.in = in;
    m.measured_per_s = in.seconds > 0 ? static_cast<double>(in.samples) / in.seconds : 0;
    const double cpus = in.usable_cpus();
    if (!(in.worker_s > 0) || !(cpus > 0) || in.samples == 0 || in.passes == 0)
        return m;
    // The workers' start in a pass runs as many at once as there are workers, on the CPUs they share.
    auto crowd = [&](unsigned n) { return std::max(1.0, static_cast<double>(n) / cpus); };
    for (unsigned n = 1; n <= max_workers; n++) {
        // (meanwhile each of the n workers prepares its first batch: n of them end about together)
        double steady_samples = static_cast<double>(in.samples - std::min<uint64_t>(in.samples, in.first_samples * n));
        ModelPoint p{n, 0, static_cast<double>(n) / in.worker_s, Bound::Workers};
        if (in.cpu_s() > 0 && cpus / in.cpu_s() < p.steady_per_s)
            p = {n, 0, cpus / in.cpu_s(), Bound::Cpus};
        if (in.loop_s > 0 && 1 / in.loop_s < p.steady_per_s)
            p = {n, 0, 1 / in.loop_s, Bound::Loop};
        double t = in.first_batch_s * crowd(n) / crowd(in.workers) + steady_samples / p.steady_per_s + in.gaps_s;
        p.samples_per_s = static_cast<double>(in.samples) / t;
        m.curve.push_back(p);
    }
    double best = 0;
    for (const auto& p : m.curve)
        best = std::max(best, p.samples_per_s);
    for (const auto& p : m.curve)
        if (p.samples_per_s >= 0.95 * best) {
            m.suggested = p.workers;
            break;
        }
    return m;
}

void ModelFigures::add(const model::Span& s)
{
    if (!s.owner)
        return;
    if (s.kind == model::SpanKind::Wait) {
        auto& l = loops_[s.owner];
        if (s.start_ns < l.wait_start) {
            l.wait_start = s.start_ns;
            if (!l.marked) {
                l.start = mark(s.owner, s.start_ns);
                l.marked = true;
            }
        }
        l.wait_end = std::max(l.wait_end, s.end_ns);
        l.wait_s += seconds(s.end_ns - s.start_ns);
        l.end = mark(s.owner, s.end_ns);
        return;
    }
    if (s.pid == s.owner) // (num_workers=0: the training process prepares its batches itself; not modelled)
        return;
    if (s.kind == model::SpanKind::Batch) {
        auto& l = loops_[s.owner];
        int64_t n = model::int_arg(s, "samples", 0);
        l.samples += static_cast<uint64_t>(std::max<int64_t>(n, 0));
        l.batches++;
        l.batch_s += seconds(s.end_ns - s.start_ns);
        l.worker_ids[static_cast<int>(model::int_arg(s, "worker", -1))] = true;
        auto& p = l.passes[{s.loader, model::int_arg(s, "epoch", -1)}];
        p.start = std::min(p.start, s.start_ns);
        if (s.end_ns < p.first_end) {
            p.first_end = s.end_ns;
            p.first_samples = static_cast<uint64_t>(std::max<int64_t>(n, 0));
        }
        p.end = std::max(p.end, s.end_ns);
    } else if ((s.kind == model::SpanKind::Sample || s.kind == model::SpanKind::Loader) && s.has_counters) {
        auto& l = loops_[s.owner];
        double wall = seconds(s.end_ns - s.start_ns), cpu = seconds(s.counters.cpu_ns);
        (s.counters.voluntary_cs ? l.blocked_wall_s : l.free_wall_s) += wall;
        (s.counters.voluntary_cs ? l.blocked_cpu_s : l.free_cpu_s) += cpu;
        l.timed_samples++;
    }
}

namespace {

// A running sum with its latest step kept, to read it as it was before a moment that the latest step passed.
void step(double& total, double& ts, double& prev_total, double& prev_ts, double add, double at)
{
    prev_total = total;
    prev_ts = ts;
    total += add;
    ts = at;
}

} // namespace

void ModelFigures::usage(const model::UsagePoint& p)
{
    double cpu = (p.user_pct + p.system_pct) / 100 * p.interval_s, at = seconds(p.ts_ns);
    auto& c = cpu_[p.pid];
    step(c.total, c.ts, c.prev_total, c.prev_ts, cpu, at);
    step(job_.total, job_.ts, job_.prev_total, job_.prev_ts, cpu, at);
}

void ModelFigures::host(const model::RecordHostCpu& h)
{
    // Lower-priority processes' time (nice > 0) is not counted: they yield the CPUs to the job.
    double busy = seconds(h.busy_ns - std::min(h.nice_ns, h.busy_ns)), at = seconds(h.ts_ns);
    step(host_busy_.total, host_busy_.ts, host_busy_.prev_total, host_busy_.prev_ts, busy - host_busy_.total, at);
    have_host_ = true;
}

void ModelFigures::fold(uint32_t pid, uint32_t into)
{
    auto f = cpu_.find(pid);
    if (f == cpu_.end() || pid == into)
        return;
    cpu_[into].total += f->second.total; // (its readings ended: only the sum matters now)
    cpu_.erase(f);
}

// The sums as they were at the last reading at or before `before_ns` (the latest, or the one before it).
ModelFigures::Loop::Mark ModelFigures::mark(uint32_t owner, uint64_t before_ns) const
{
    double t = seconds(before_ns);
    auto pick = [t](const Cpu& c, double& ts) {
        bool prev = c.ts > t && c.prev_ts > 0;
        ts = prev ? c.prev_ts : c.ts;
        return prev ? c.prev_total : c.total;
    };
    Loop::Mark m;
    if (auto c = cpu_.find(owner); c != cpu_.end())
        m.main = pick(c->second, m.ts);
    double job_ts = 0;
    m.job = pick(job_, job_ts);
    if (have_host_)
        m.host_busy = pick(host_busy_, m.host_ts);
    return m;
}

std::optional<ModelInputs> ModelFigures::inputs(uint32_t owner, double cpus,
                                                const std::map<uint32_t, model::ProcessInfo>& processes,
                                                const std::map<uint32_t, model::ProcessUsage>* usage) const
{
    auto it = loops_.find(owner);
    if (it == loops_.end())
        return std::nullopt;
    const Loop& l = it->second;
    if (!l.samples || !l.batches || !l.timed_samples || !(l.free_wall_s > 0) || !(l.free_cpu_s > 0))
        return std::nullopt;
    ModelInputs in;
    in.cpus = cpus;
    for (const auto& [id, seen] : l.worker_ids)
        in.workers += id >= 0;
    in.workers = std::max(in.workers, 1u);
    in.samples = l.samples;
    uint64_t first = UINT64_MAX, last = 0, prev_end = 0;
    for (const auto& [key, p] : l.passes) { // (in order of epochs within a DataLoader)
        in.passes++;
        in.first_batch_s += seconds(p.first_end - p.start);
        in.first_samples += p.first_samples;
        if (prev_end && p.start > prev_end)
            in.gaps_s += seconds(p.start - prev_end);
        prev_end = p.end;
        first = std::min(first, p.start);
        last = std::max(last, p.end);
    }
    in.seconds = last > first ? seconds(last - first) : 0;
    // On-CPU share while runnable: the samples that never blocked waited off a CPU only for one.
    in.on_cpu_share = std::min(1.0, l.free_cpu_s / l.free_wall_s);
    // Those that blocked: their time off a CPU beyond that share was blocking (I/O, locks): kept in full.
    double blocked = std::max(0.0, l.blocked_wall_s - l.blocked_cpu_s / in.on_cpu_share);
    double n = static_cast<double>(l.samples);
    double runnable = std::max(0.0, l.batch_s - blocked);
    in.worker_cpu_s = runnable * in.on_cpu_share / n;
    in.worker_s = in.worker_cpu_s + blocked / n;
    // The workers' CPU: their processes' own (from fork or first reading to exit or last reading: their start
    // and their hand-over of batches included), where every one of them was read.
    if (usage) {
        double total = 0;
        bool all = true;
        for (const auto& [pid, p] : processes) {
            if (p.owner != owner || !p.batches || pid == owner)
                continue;
            auto u = usage->find(pid);
            all = all && u != usage->end() && u->second.readings + u->second.exact_end > 0;
            if (u != usage->end())
                total += seconds(u->second.user_ns + u->second.system_ns);
        }
        if (all && total / n > in.worker_cpu_s) {
            in.worker_s += total / n - in.worker_cpu_s;
            in.worker_cpu_s = total / n;
            in.worker_cpu_read = true;
        }
    }
    double loop_seconds = l.wait_end > l.wait_start ? seconds(l.wait_end - l.wait_start) : 0;
    double loop_wall = loop_seconds > 0 ? std::max(0.0, loop_seconds - l.wait_s) / n : 0;
    double span = l.end.ts - l.start.ts;
    if (l.marked && span > 0.5 && loop_seconds > 0) {
        in.main_cpu_s = (l.end.main - l.start.main) / span * loop_seconds / n; // (CPUs used on average) x time
        in.main_cpu_read = true;
    } else {
        in.main_cpu_s = loop_wall;
    }
    // Others: the host's busy time on the job's CPUs less the job's own, over the same readings; the job's own
    // counts the ends of the processes that exited meanwhile, which the readings missed (the kernel's exact
    // figures at each exit).
    double host_span = l.end.host_ts - l.start.host_ts;
    if (l.marked && have_host_ && host_span > 0.5 && usage) {
        double job = l.end.job - l.start.job;
        for (const auto& [pid, u] : *usage)
            if (u.exact_end && seconds(u.last_ns) > l.start.host_ts && seconds(u.last_ns) <= l.end.host_ts)
                if (auto c = cpu_.find(pid); true)
                    job += std::max(0.0, seconds(u.user_ns + u.system_ns) - (c != cpu_.end() ? c->second.total : 0));
        in.others_cpus = std::max(0.0, (l.end.host_busy - l.start.host_busy - job) / host_span);
    }
    // The loop's own time with a CPU to itself: its time on a CPU (at most the process's CPU, which also counts
    // what it did inside next()) waited for a CPU as the workers did; that waiting is taken out, the rest (a GPU,
    // I/O) kept.
    double on_cpu = std::min(in.main_cpu_s, loop_wall * in.on_cpu_share);
    in.loop_s = std::max(0.0, loop_wall - on_cpu * (1 / in.on_cpu_share - 1));
    return in;
}

} // namespace lotus::exporter
