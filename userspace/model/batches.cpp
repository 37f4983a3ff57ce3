#include "batches.h"

#include <algorithm>
#include <fmt/format.h>

#include "common/json.h"

namespace lotus::model {

BatchTracker::BatchTracker(SpanSink& sink, std::map<uint32_t, ProcessInfo>& processes)
    : sink_(sink), processes_(processes)
{
}

BatchTracker::Thread& BatchTracker::thread(uint32_t pid, uint32_t tid)
{
    return threads_[static_cast<uint64_t>(pid) << 32 | tid];
}

void BatchTracker::forked(uint32_t child)
{
    // Non-persistent workers are forked by iter(loader), just before that epoch's first next().
    processes_[child].epoch_base = epochs_started_;
}

int BatchTracker::worker_epoch(uint32_t pid, const Thread& t) const
{
    auto it = processes_.find(pid);
    return (it == processes_.end() ? 0 : it->second.epoch_base) + t.resets;
}

void BatchTracker::start_batch(uint32_t, Thread& t, uint64_t start, int64_t idx)
{
    t.in_batch = true;
    t.idx = idx;
    t.start = start;
    t.boundary = start;
    t.samples = 0;
    t.last_sample_end = 0;
    t.loaders.clear();
    seen_ = true;
}

void BatchTracker::sample_started(uint32_t pid, uint32_t tid, uint64_t ts, int64_t batch_idx, uint64_t sample_id,
                                  int64_t sample)
{
    Thread& t = thread(pid, tid);
    // In a worker process, a sample outside a batch starts one. Its index comes from _worker_loop's `idx`,
    // or, for the first batches of a worker whose _worker_loop was not classified in time, from the put.
    bool worker = !processes_[pid].root;
    bool new_batch = batch_idx >= 0 ? (!t.in_batch || (t.idx >= 0 && t.idx != batch_idx)) : (!t.in_batch && worker);
    if (!t.single && new_batch) {
        // A worker's batch starts where it stopped waiting for the batch's indices.
        uint64_t start = std::max(t.last_wait_done, t.last_put);
        start_batch(pid, t, start && start <= ts ? start : ts, -1);
    }
    if (t.in_batch && t.idx < 0 && batch_idx >= 0)
        adopt_index(t, batch_idx);
    if (!t.in_batch)
        return;
    Span l;
    l.kind = SpanKind::Loader;
    l.name = "loader";
    l.pid = pid;
    l.tid = tid;
    l.start_ns = t.boundary;
    l.end_ns = ts;
    l.sample = sample;
    l.sample_id = sample_id;
    if (t.path_ts >= t.boundary && !t.path.empty())
        l.args.emplace_back("path", exporter::json_string(t.path));
    t.loaders.push_back(std::move(l));
    t.samples++;
}

void BatchTracker::adopt_index(Thread& t, int64_t idx)
{
    t.idx = idx;
    if (idx < t.prev_idx)
        t.resets++; // persistent workers: the batch index restarts at every epoch
    t.prev_idx = idx;
}

void BatchTracker::sample_finished(uint32_t pid, uint32_t tid, uint64_t ts)
{
    Thread& t = thread(pid, tid);
    t.boundary = ts;
    t.last_sample_end = ts;
}

void BatchTracker::opened(uint32_t pid, uint32_t tid, uint64_t ts, std::string path)
{
    Thread& t = thread(pid, tid);
    // The sample's own file is the first opened after its loading began (lazy imports may follow).
    uint64_t since = std::max({t.boundary, t.last_put, t.last_wait_done});
    if (t.path_ts >= since && !t.path.empty())
        return;
    t.path = std::move(path);
    t.path_ts = ts;
}

void BatchTracker::wait_done(uint32_t pid, uint32_t tid, uint64_t ts) { thread(pid, tid).last_wait_done = ts; }

void BatchTracker::finish_batch(uint32_t pid, uint32_t tid, Thread& t, uint64_t end, int epoch)
{
    t.in_batch = false;
    t.last_put = end;
    auto& proc = processes_[pid];
    proc.batches++;
    proc.busy_ns += end - t.start;
    for (const auto& l : t.loaders)
        sink_(l);
    t.loaders.clear();
    if (t.last_sample_end) {
        Span c;
        c.kind = SpanKind::Collate;
        c.name = "collate";
        c.pid = pid;
        c.tid = tid;
        c.start_ns = t.last_sample_end;
        c.end_ns = end;
        c.args = {{"batch", std::to_string(t.idx)}, {"epoch", std::to_string(epoch)}};
        sink_(c);
    }
    Span b;
    b.kind = SpanKind::Batch;
    b.name = fmt::format("batch {}", t.idx);
    b.pid = pid;
    b.tid = tid;
    b.start_ns = t.start;
    b.end_ns = end;
    b.args = {{"batch", std::to_string(t.idx)},
              {"epoch", std::to_string(epoch)},
              {"worker", std::to_string(proc.root ? -1 : proc.worker_id)},
              {"samples", std::to_string(t.samples)}};
    if (!t.single) {
        b.flow_out = next_flow_++;
        ready_[epoch][t.idx] = Ready{end, b.flow_out};
    }
    stats_.prepare_ns.push_back(end - t.start);
    sink_(b);
}

void BatchTracker::batch_put(uint32_t pid, uint32_t tid, uint64_t ts, int64_t idx)
{
    Thread& t = thread(pid, tid);
    if (!t.in_batch || t.single || idx < 0)
        return;
    if (t.idx < 0)
        adopt_index(t, idx);
    if (t.idx == idx)
        finish_batch(pid, tid, t, ts, worker_epoch(pid, t));
}

void BatchTracker::next_started(uint32_t pid, uint32_t tid, uint64_t ts, uint64_t iterator, bool single_process)
{
    auto& it = iterators_[iterator];
    if (it.ended) {
        it = Iterator{epochs_started_++, 0, false};
    }
    if (!stats_.loop_first_ns)
        stats_.loop_first_ns = ts;
    if (single_process) {
        Thread& t = thread(pid, tid);
        t.single = true;
        start_batch(pid, t, ts, it.consumed);
    }
}

void BatchTracker::next_finished(uint32_t pid, uint32_t tid, uint64_t start, uint64_t end, uint64_t iterator,
                                 bool single_process, bool raised)
{
    auto found = iterators_.find(iterator);
    if (found == iterators_.end())
        return;
    Iterator& it = found->second;
    stats_.loop_last_ns = end;
    Thread& t = thread(pid, tid);
    if (raised) { // StopIteration: the epoch is over (a persistent iterator starts a new one on next use)
        it.ended = true;
        t.in_batch = false;
        t.single = false;
        return;
    }
    int64_t n = it.consumed++;
    Span w;
    w.kind = SpanKind::Wait;
    w.name = fmt::format("wait batch {}", n);
    w.pid = pid;
    w.tid = tid;
    w.start_ns = start;
    w.end_ns = end;
    w.args = {{"batch", std::to_string(n)}, {"epoch", std::to_string(it.epoch)}};
    bool out_of_order = false;
    if (single_process) {
        if (t.in_batch)
            finish_batch(pid, tid, t, end, it.epoch);
        t.single = false;
        w.args.emplace_back("delay_ms", "0");
        stats_.delay_ns.push_back(0);
    } else if (auto e = ready_.find(it.epoch); e != ready_.end()) {
        if (auto r = e->second.find(n); r != e->second.end()) {
            uint64_t delay = end > r->second.ts ? end - r->second.ts : 0;
            for (const auto& [m, other] : e->second)
                out_of_order |= m > n && other.ts < r->second.ts;
            w.flow_in = r->second.flow;
            w.args.emplace_back("delay_ms", fmt::format("{:.3f}", static_cast<double>(delay) / 1e6));
            stats_.delay_ns.push_back(delay);
            e->second.erase(r);
        }
    }
    w.args.emplace_back("out_of_order", out_of_order ? "true" : "false");
    stats_.wait_ns.push_back(end - start);
    stats_.out_of_order.push_back(out_of_order);
    sink_(w);
    Span c;
    c.kind = SpanKind::Consumed;
    c.name = fmt::format("consumed batch {}", n);
    c.pid = pid;
    c.tid = tid;
    c.start_ns = c.end_ns = end;
    c.args = w.args;
    sink_(c);
}

} // namespace lotus::model
