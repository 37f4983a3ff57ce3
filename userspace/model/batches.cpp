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

void BatchTracker::new_epoch(Iterator& it)
{
    it.epoch = loader_epochs_[it.loader]++;
    it.consumed = 0;
    it.next_idx = 0;
    it.ended = false;
}

void BatchTracker::iterator_created(uint32_t, uint64_t iterator, uint64_t loader)
{
    if (constructing_ == iterator)
        return; // a subclass __init__ calling its base's
    auto [id, fresh] = loader_ids_.try_emplace(loader, static_cast<int>(loader_ids_.size()));
    Iterator& it = iterators_[iterator];
    it.loader = id->second;
    new_epoch(it);
    constructing_ = iterator;
}

void BatchTracker::iterator_constructed(uint32_t, uint64_t iterator)
{
    if (constructing_ == iterator)
        constructing_ = 0;
}

void BatchTracker::forked(uint32_t child)
{
    // Workers are forked (directly, or by a forkserver on the main process's request) while their iterator's
    // __init__ runs; persistent workers then serve that loader's later epochs too.
    auto it = iterators_.find(constructing_);
    if (constructing_ && it != iterators_.end()) {
        processes_[child].loader = it->second.loader;
        processes_[child].epoch_base = it->second.epoch;
    }
}

int BatchTracker::worker_loader(uint32_t pid) const
{
    auto it = processes_.find(pid);
    return it == processes_.end() ? -1 : it->second.loader;
}

int BatchTracker::worker_epoch(uint32_t pid, const Thread& t) const
{
    auto it = processes_.find(pid);
    return (it == processes_.end() ? 0 : it->second.epoch_base) + t.resets;
}

void BatchTracker::start_batch(uint32_t, Thread& t, uint64_t start, int64_t idx)
{
    t.in_batch = true;
    t.partial = false;
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
        t.partial = !(start && start <= ts); // began before tracing did: its start is unknown
    }
    if (t.in_batch && t.idx < 0 && batch_idx >= 0)
        adopt_index(t, batch_idx);
    if (!t.in_batch)
        return;
    t.samples++;
    if (t.partial && t.samples == 1)
        return; // its loading began before tracing did
    Span l = Span::make(SpanKind::Loader, "loader", pid, tid, t.boundary, ts);
    l.sample = sample;
    l.sample_id = sample_id;
    // The sample's own file: the first one opened while it was loading (lazy imports may open more).
    for (const auto& [when, path] : t.opens) {
        if (when >= l.start_ns && when <= ts && !path.empty()) {
            l.args.emplace_back("path", exporter::json_string(path));
            break;
        }
    }
    t.loaders.push_back(std::move(l));
    // Bounded memory: this many samples without a batch hand-over is not a DataLoader batch being prepared
    // (e.g. a multiprocessing child running a pipeline in a loop): its loaders go out now.
    if (t.loaders.size() >= kMaxPendingLoaders)
        flush_loaders(t);
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
    t.opens.emplace_back(ts, std::move(path));
    if (t.opens.size() > 1024) // lazy imports during a first sample open hundreds of files
        t.opens.pop_front();
}

void BatchTracker::wait_done(uint32_t pid, uint32_t tid, uint64_t ts) { thread(pid, tid).last_wait_done = ts; }

void BatchTracker::flush_loaders(Thread& t)
{
    for (const auto& l : t.loaders)
        sink_(l);
    t.loaders.clear();
    t.opens.clear(); // later samples open their files after the hand-over
}

void BatchTracker::finish_batch(uint32_t pid, uint32_t tid, Thread& t, uint64_t end, int epoch)
{
    t.in_batch = false;
    t.last_put = end;
    t.last_put_idx = t.idx;
    if (t.partial) {
        // Begun before tracing: its samples are reported, the batch itself (start unknown) is not invented.
        t.partial = false;
        flush_loaders(t);
        return;
    }
    int loader = t.single ? t.loader : worker_loader(pid);
    auto& proc = processes_[pid];
    proc.batches++;
    proc.busy_ns += end - t.start;
    flush_loaders(t);
    if (t.last_sample_end) {
        Span c = Span::make(SpanKind::Collate, "collate", pid, tid, t.last_sample_end, end);
        c.args = {{"batch", std::to_string(t.idx)}, {"epoch", std::to_string(epoch)}, {"loader", std::to_string(loader)}};
        sink_(c);
    }
    Span b = Span::make(SpanKind::Batch, fmt::format("batch {}", t.idx), pid, tid, t.start, end);
    b.args = {{"batch", std::to_string(t.idx)},
              {"epoch", std::to_string(epoch)},
              {"loader", std::to_string(loader)},
              {"worker", std::to_string(proc.root ? -1 : proc.worker_id)},
              {"samples", std::to_string(t.samples)}};
    if (!t.single) {
        b.flow_out = next_flow_++;
        ready_[{loader, epoch}][t.idx] = Ready{end, b.flow_out};
    }
    stats_.prepare_ns.push_back(end - t.start);
    sink_(b);
}

void BatchTracker::batch_put(uint32_t pid, uint32_t tid, uint64_t ts, int64_t idx)
{
    Thread& t = thread(pid, tid);
    // A put whose index was not captured (the walk did not reach _worker_loop) hands over the batch in progress.
    if (idx < 0 && t.in_batch && !t.stop_pending)
        idx = t.idx;
    if (t.single || idx < 0)
        return;
    if (!t.in_batch && idx == t.last_put_idx)
        return; // another call into Python within the same put()
    if (t.stop_pending) {
        t.stop_pending = false;
        t.in_batch = false;
        t.loaders.clear();
        t.last_put = ts;
        t.last_put_idx = idx;
        ready_[{worker_loader(pid), worker_epoch(pid, t)}][idx] = Ready{ts, 0, true};
        return;
    }
    if (!t.in_batch) {
        // No pipeline call marked this batch's samples (an IterableDataset, a dataset without Compose): the
        // batch is still the worker's time from getting the indices to handing the data over.
        uint64_t start = std::max(t.last_wait_done, t.last_put);
        start_batch(pid, t, start && start <= ts ? start : ts, -1);
        t.partial = !(start && start <= ts); // began before tracing did: its start is unknown
    }
    if (t.idx < 0)
        adopt_index(t, idx);
    if (t.idx == idx)
        finish_batch(pid, tid, t, ts, worker_epoch(pid, t));
}

void BatchTracker::stop_marker(uint32_t pid, uint32_t tid) { thread(pid, tid).stop_pending = true; }

void BatchTracker::next_started(uint32_t pid, uint32_t tid, uint64_t ts, uint64_t iterator, bool single_process)
{
    auto [found, fresh] = iterators_.try_emplace(iterator);
    Iterator& it = found->second;
    if (it.ended) // an iterator made before tracing began (loader unknown), or a persistent one's next pass
        new_epoch(it);
    if (!stats_.loop_first_ns)
        stats_.loop_first_ns = ts;
    if (single_process) {
        Thread& t = thread(pid, tid);
        t.single = true;
        t.loader = it.loader;
        start_batch(pid, t, ts, it.next_idx);
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
    it.consumed++;
    // The batch next() returns: the next task index, past the end-of-data markers of exhausted
    // IterableDataset workers (the main process skips those indices).
    auto e = ready_.find({it.loader, it.epoch});
    int64_t n = it.next_idx;
    while (e != ready_.end() && e->second.count(n) && e->second[n].stop)
        e->second.erase(n++);
    it.next_idx = n + 1;
    Span w = Span::make(SpanKind::Wait, fmt::format("wait batch {}", n), pid, tid, start, end);
    w.args = {{"batch", std::to_string(n)}, {"epoch", std::to_string(it.epoch)}, {"loader", std::to_string(it.loader)}};
    bool out_of_order = false;
    if (single_process) {
        if (t.in_batch)
            finish_batch(pid, tid, t, end, it.epoch);
        t.single = false;
        w.args.emplace_back("delay_ms", "0");
        stats_.delay_ns.push_back(0);
    } else if (e != ready_.end()) {
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
    Span c = Span::make(SpanKind::Consumed, fmt::format("consumed batch {}", n), pid, tid, end, end);
    c.args = w.args;
    sink_(c);
}

} // namespace lotus::model
