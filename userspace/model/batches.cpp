#include "batches.h"

#include <algorithm>

#include "messages.h"

namespace lotus::model {

void BatchStats::add_wait(uint64_t ns)
{
    wait_ns.add(ns);
    (ns <= 1'000'000 ? wait_le_1ms : ns <= 500'000'000 ? wait_1_500ms : wait_gt_500ms)++;
}

void BatchStats::add_delay(uint64_t ns, bool late)
{
    delay_ns.add(ns);
    (ns <= 1'000'000 ? delay_le_1ms : ns <= 500'000'000 ? delay_1_500ms : delay_gt_500ms)++;
    out_of_order += late;
}

void BatchStats::merge(const BatchStats& b)
{
    prepare_ns.merge(b.prepare_ns);
    wait_ns.merge(b.wait_ns);
    delay_ns.merge(b.delay_ns);
    out_of_order += b.out_of_order;
    wait_le_1ms += b.wait_le_1ms;
    wait_1_500ms += b.wait_1_500ms;
    wait_gt_500ms += b.wait_gt_500ms;
    delay_le_1ms += b.delay_le_1ms;
    delay_1_500ms += b.delay_1_500ms;
    delay_gt_500ms += b.delay_gt_500ms;
    unnamed += b.unnamed;
    unmatched += b.unmatched;
    arrival_order |= b.arrival_order;
    misnamed += b.misnamed;
    passes_before += b.passes_before;
    joined_partial |= b.joined_partial;
    partial_batches += b.partial_batches;
}

BatchTracker::BatchTracker(SpanSink& sink, std::map<uint32_t, ProcessInfo>& processes, const framework::Framework& fw)
    : sink_(sink), processes_(processes), fw_(fw)
{
}

BatchTracker::Thread& BatchTracker::thread(uint32_t pid, uint32_t tid)
{
    return threads_[static_cast<uint64_t>(pid) << 32 | tid];
}

int BatchTracker::new_epoch(uint32_t owner, Consumer& c, uint64_t loader)
{
    auto [id, fresh] = c.loader_ids.try_emplace(loader, static_cast<int>(c.loader_ids.size()));
    Epoch e;
    e.owner = owner;
    e.loader = id->second;
    e.number = c.epochs_begun[e.loader]++;
    e.counted = true; // begun while tracing: its first batch is 0
    epochs_.push_back(e);
    return static_cast<int>(epochs_.size() - 1);
}

uint32_t BatchTracker::owner_of(uint32_t pid) const
{
    auto self = processes_.find(pid);
    if (self != processes_.end() && self->second.owner)
        return self->second.owner;
    // Its parent (fork, spawn), or its parent's parent (a forkserver's child), ...
    for (int hops = 0; hops < 16; hops++) {
        auto p = processes_.find(pid);
        if (p == processes_.end() || !p->second.parent)
            return 0;
        pid = p->second.parent;
        if (consumers_.count(pid))
            return pid;
    }
    return 0;
}

void BatchTracker::forked(uint32_t child, uint32_t parent)
{
    // Workers are forked (directly, by a spawn's fork and exec, or by a forkserver at the training process's
    // request) while the training process runs DataLoader.__iter__ (or the iterator's __init__): they are that
    // epoch's; persistent ones serve its loader's later epochs too, each begun by a _ResumeIteration.
    uint32_t pid = parent;
    for (int hops = 0; hops < 16 && pid; hops++) {
        if (auto c = consumers_.find(pid); c != consumers_.end()) {
            processes_[child].owner = pid;
            if (!c->second.open.empty()) {
                int e = c->second.open.back().epoch;
                worker_epoch_[child] = e;
                processes_[child].loader = epochs_[e].loader;
            }
            return;
        }
        auto p = processes_.find(pid);
        pid = p == processes_.end() ? 0 : p->second.parent;
    }
}

void BatchTracker::exited(uint32_t pid)
{
    for (auto it = threads_.begin(); it != threads_.end();) {
        if (it->first >> 32 == pid) {
            // A batch never handed over is not invented; its samples' loading was real.
            for (auto& [idx, b] : it->second.ended)
                it->second.loaders.insert(it->second.loaders.end(), b.loaders.begin(), b.loaders.end());
            flush_loaders(it->second);
            it = threads_.erase(it);
        } else {
            ++it;
        }
    }
    release_held(pid, true);
}

void BatchTracker::forget(uint32_t pid)
{
    worker_epoch_.erase(pid);
    for (auto it = task_reader_.begin(); it != task_reader_.end();) {
        if (it->second == pid) { // its index queue: no other process reads it
            task_writer_.erase(it->first);
            task_steps_.erase(it->first);
            it = task_reader_.erase(it);
        } else {
            ++it;
        }
    }
}

bool BatchTracker::iter_begin(uint32_t pid, uint32_t tid, uint64_t loader)
{
    processes_[pid].consumer = true;
    Consumer& c = consumers_[pid];
    Bracket b{tid, new_epoch(pid, c, loader), false, 0};
    b.loader = loader;
    c.open.push_back(b);
    c.loader_reading.erase(loader);
    return true;
}

void BatchTracker::iter_end(uint32_t pid, uint32_t tid, uint64_t iterator, uint64_t ts)
{
    Consumer& c = consumers_[pid];
    for (auto b = c.open.rbegin(); b != c.open.rend(); ++b) {
        if (b->tid == tid && !b->from_init) {
            if (auto h = c.loader_reading.find(b->loader); h != c.loader_reading.end() && h->second.read_ns <= ts) {
                h->second.trusted = true; // read while its __iter__ ran
                c.loader_holds[b->loader] = h->second;
            }
            if (iterator) // a persistent iterator is returned again: its next epoch is this one
                c.iterators[iterator] = b->epoch;
            c.open.erase(std::next(b).base());
            return;
        }
    }
}

void BatchTracker::init_begin(uint32_t pid, uint32_t tid, uint64_t iterator, uint64_t loader)
{
    processes_[pid].consumer = true;
    Consumer& c = consumers_[pid];
    for (auto& b : c.open) {
        if (b.tid != tid)
            continue;
        if (!b.from_init) { // inside DataLoader.__iter__: that epoch's iterator
            b.iterator = iterator;
            return;
        }
        if (b.iterator == iterator) {
            b.nested++; // a subclass's __init__ calling its base's (separate calls on 3.10)
            return;
        }
    }
    // No __iter__ seen (a subclass overrode it, or the iterator was made directly): the iterator begins an epoch.
    c.open.push_back(Bracket{tid, new_epoch(pid, c, loader), true, iterator});
}

void BatchTracker::init_end(uint32_t pid, uint32_t tid, uint64_t iterator)
{
    Consumer& c = consumers_[pid];
    for (auto b = c.open.rbegin(); b != c.open.rend(); ++b) {
        if (b->tid != tid || b->iterator != iterator)
            continue;
        c.iterators[iterator] = b->epoch;
        // The outermost __init__ of the iterator returned only when its workers have been started, so a nested
        // base-class __init__ (3.10) must not close the bracket: the workers are forked after it returns.
        if (b->from_init && b->returns++ >= b->nested)
            c.open.erase(std::next(b).base());
        return;
    }
}

bool BatchTracker::next_started(uint32_t pid, uint32_t tid, uint64_t ts, uint64_t iterator, bool single_process)
{
    processes_[pid].consumer = true;
    Consumer& c = consumers_[pid];
    auto it = c.iterators.find(iterator);
    int e;
    bool unknown = it == c.iterators.end();
    if (!unknown) {
        e = it->second;
    } else {
        c.in_flight = true;
        // An iterator made before tracing began: which loader and epoch it is, and which batch next() returns,
        // are unknown until a batch message names one.
        Epoch unknown;
        unknown.owner = pid;
        epochs_.push_back(unknown);
        e = static_cast<int>(epochs_.size() - 1);
        c.iterators[iterator] = e;
    }
    c.next[tid] = NextCall{e, -1};
    bool ask = c.in_flight && !epochs_[e].asked;
    if (ask)
        epochs_[e].asked = true, epochs_[e].asked_ns = ts;
    LoopSpan& loop = loops_[pid];
    if (!loop.first_ns)
        loop.first_ns = ts;
    if (single_process) {
        Thread& t = thread(pid, tid);
        t.single = true;
        start_batch(t, ts, epochs_[e].counted ? epochs_[e].next_idx : -1, e);
    }
    return ask;
}

void BatchTracker::next_finished(uint32_t pid, uint32_t tid, uint64_t start, uint64_t end, bool raised)
{
    auto c = consumers_.find(pid);
    if (c == consumers_.end())
        return;
    auto nc = c->second.next.find(tid);
    if (nc == c->second.next.end())
        return;
    NextCall call = nc->second;
    c->second.next.erase(nc);
    Epoch& ep = epochs_[call.epoch];
    if (ep.holds.read && ep.holds.read_ns <= end)
        ep.holds.trusted = true; // read while one of its next() calls ran
    loops_[pid].last_ns = end;
    Thread& t = thread(pid, tid);
    bool single = t.single;
    if (raised) { // StopIteration: the epoch is over (a persistent iterator's next one begins in __iter__)
        ep.handed.clear();
        ep.relayed.clear();
        ep.relayed_set.clear();
        ep.pending.clear();
        ep.named.clear();
        ep.iterable = false;
        t.in_batch = false;
        t.single = false;
        t.loaders.clear();
        return;
    }
    // The batch next() returns: the last one it read from the result queue (it keeps reading until it gets the
    // one it wants), else the next index past IterableDataset end-of-data markers, when the epoch's start is known.
    // With a pin-memory thread relaying the batches (a pass whose start was seen, so its relay is all known),
    // next() returns them in index order: the lowest relayed and not returned yet (it waits for each index,
    // skipping those of workers whose data ran out, which may never come); or as they arrive where the loader
    // has in_order=False.
    int64_t n = -1;
    bool relay = !single && call.last_read < 0 && !ep.relayed.empty() && ep.number >= 0;
    bool arrival = relay && c->second.arrival_order.count(ep.loader);
    size_t returned = ep.named.size();
    if (single) {
        n = t.idx;
    } else if (call.last_read >= 0) {
        n = call.last_read;
    } else if (arrival) {
        n = returned < ep.relayed.size() ? ep.relayed[returned] : -1;
    } else if (ep.counted) {
        n = ep.next_idx;
        while (ep.stops.erase(n))
            n++;
        if (relay && !ep.iterable && !ep.relayed_set.count(n)) {
            // Returned before batch n had reached it: in index order next() waits for each batch, so this loader
            // returns them as they arrive (in_order=False), and this one is the next relayed. (Not where workers'
            // data ran out: the indices next() then skips never come.)
            seen_arrival_order(ep);
            n = returned < ep.relayed.size() ? ep.relayed[returned] : -1;
        } else if (relay) {
            n = ep.pending.empty() ? -1 : *ep.pending.begin();
        }
    }
    if (relay)
        ep.pending.erase(n);
    ep.named.push_back(n);
    if (n >= 0) {
        ep.counted = true;
        ep.next_idx = n + 1;
    }
    Span w = Span::make(SpanKind::Wait, "wait", pid, tid, start, end); // (the batch in args)
    tag(w, call.epoch);
    if (n >= 0)
        w.args.emplace_back("batch", int64_t{n});
    if (ep.number >= 0)
        w.args.emplace_back("epoch", int64_t{ep.number});
    if (ep.loader >= 0)
        w.args.emplace_back("loader", int64_t{ep.loader});
    BatchStats& st = stats_[{pid, ep.loader}];
    if (single) {
        if (t.in_batch) { // (the engine completed what the thread held before next() returned)
            t.in_batch = false;
            Ended b{t.epoch, t.start, end, t.last_sample_end, t.samples, std::move(t.loaders)};
            t.loaders.clear();
            t.opens.clear();
            emit_batch(pid, tid, t.idx, b, true);
        }
        t.single = false;
        w.args.emplace_back("delay_ms", DurationNs{0});
        w.args.emplace_back("out_of_order", false);
        st.add_delay(0, false);
    } else if (n < 0) {
        st.unnamed++;
    } else if (auto r = ep.ready.find(n); r != ep.ready.end()) {
        uint64_t delay = end > r->second.ts ? end - r->second.ts : 0;
        bool out_of_order = false;
        for (auto m = ep.handed.upper_bound(n); m != ep.handed.end() && !out_of_order; ++m)
            out_of_order = m->second < r->second.ts;
        w.flow_in = r->second.flow;
        w.args.emplace_back("delay_ms", DurationNs{delay});
        w.args.emplace_back("out_of_order", out_of_order);
        st.add_delay(delay, out_of_order);
        ep.ready.erase(r);
    } else {
        st.unmatched++; // prepared before tracing began, or by a worker whose epoch is unknown
    }
    // (No out_of_order where the batch's hand-over was not seen: unknown, not "in order".)
    st.add_wait(end - start);
    loops_[pid].wait_ns += end - start;
    sink_(w);
    Span consumed = Span::make(SpanKind::Consumed, "consumed", pid, tid, end, end);
    consumed.owner = w.owner;
    consumed.loader = w.loader;
    consumed.args = w.args;
    sink_(consumed);
}


bool BatchTracker::getppid_ends_batch(uint32_t pid, uint32_t tid) const
{
    auto it = threads_.find(static_cast<uint64_t>(pid) << 32 | tid);
    return it != threads_.end() && it->second.in_batch && !it->second.single;
}

void BatchTracker::getppid(uint32_t pid, uint32_t tid, uint64_t ts)
{
    if (getppid_ends_batch(pid, tid))
        end_batch(threads_.at(static_cast<uint64_t>(pid) << 32 | tid), ts);
}

void BatchTracker::start_batch(Thread& t, uint64_t start, int64_t idx, int epoch)
{
    t.in_batch = true;
    t.partial = false;
    t.idx = idx;
    t.epoch = epoch;
    t.start = start;
    t.boundary = start;
    t.boundary_counters.reset(); // (a task's read carries none)
    t.samples = 0;
    t.last_sample_end = 0;
    t.loaders.clear();
    seen_ = true;
}

void BatchTracker::tag(Span& s, int epoch) const
{
    if (epoch < 0)
        return;
    s.owner = epochs_[epoch].owner;
    s.loader = epochs_[epoch].loader;
}

std::pair<uint32_t, int> BatchTracker::data_for(uint32_t pid, uint32_t tid) const
{
    auto t = threads_.find(static_cast<uint64_t>(pid) << 32 | tid);
    int e = t != threads_.end() && t->second.in_batch ? t->second.epoch : -1;
    if (e < 0)
        if (auto we = worker_epoch_.find(pid); we != worker_epoch_.end())
            e = we->second;
    if (e >= 0)
        return {epochs_[e].owner, epochs_[e].loader};
    auto p = processes_.find(pid);
    return {p == processes_.end() ? 0 : p->second.owner, -1};
}

void BatchTracker::sample_started(uint32_t pid, uint32_t tid, uint64_t ts, uint64_t sample_id, int64_t sample,
                                  const lotus_counters* at)
{
    Thread& t = thread(pid, tid);
    if (!t.in_batch) {
        auto p = processes_.find(pid);
        if (p != processes_.end() && p->second.consumer)
            return; // a pipeline the training loop runs itself, outside next()
        // A worker's batch whose task was read before tracing began (or a process running a pipeline without
        // a DataLoader): its samples are reported, the batch (start unknown) is not invented.
        auto we = worker_epoch_.find(pid);
        start_batch(t, ts, -1, we == worker_epoch_.end() ? -1 : we->second);
        t.partial = true;
    }
    t.samples++;
    if (t.partial && t.samples == 1)
        return; // its loading began before tracing did
    Span l = Span::make(SpanKind::Loader, "loader", pid, tid, t.boundary, ts);
    l.sample = sample;
    l.sample_id = sample_id;
    if (at && t.boundary_counters) { // the thread's counters over it, where both ends had them
        const lotus_counters& from = *t.boundary_counters;
        auto delta = [](uint64_t a, uint64_t b) { return b > a ? b - a : 0; };
        l.has_counters = true;
        l.counters = Counters{delta(from.cpu_ns, at->cpu_ns), delta(from.min_flt, at->min_flt),
                              delta(from.maj_flt, at->maj_flt), delta(from.nvcsw, at->nvcsw),
                              delta(from.nivcsw, at->nivcsw), {}};
        for (unsigned k = 0; k < kMaxPerfCounters; k++)
            l.counters.perf[k] = delta(from.perf[k], at->perf[k]);
    }
    tag(l, t.epoch);
    // The sample's own file: the first one opened while it was loading (lazy imports may open more).
    for (const auto& o : t.opens) {
        if (o.ts >= l.start_ns && o.ts <= ts && !o.path.empty()) {
            l.args.emplace_back("path", o.path);
            if (o.bytes >= 0) // (unknown in record files before ABI 12, and for what is not a regular file)
                l.args.emplace_back("bytes", o.bytes);
            break;
        }
    }
    t.loaders.push_back(std::move(l));
    // Bounded memory: this many samples without a batch hand-over is not a DataLoader batch being prepared
    // (e.g. a multiprocessing child running a pipeline in a loop): its loaders go out now.
    if (t.loaders.size() >= kMaxPendingLoaders)
        flush_loaders(t);
}

void BatchTracker::sample_finished(uint32_t pid, uint32_t tid, uint64_t ts, const lotus_counters* at)
{
    Thread& t = thread(pid, tid);
    t.boundary = ts;
    t.boundary_counters.reset();
    if (at)
        t.boundary_counters = *at;
    t.last_sample_end = ts;
}

void BatchTracker::opened(uint32_t pid, uint32_t tid, uint64_t ts, std::string path)
{
    Thread& t = thread(pid, tid);
    t.opens.push_back({ts, std::move(path)});
    if (t.opens.size() > 1024) // lazy imports during a first sample open hundreds of files
        t.opens.pop_front();
}

void BatchTracker::open_size(uint32_t pid, uint32_t tid, int64_t bytes)
{
    // The thread's open in flight was its last OPEN record: nothing else of that thread runs in between.
    auto t = threads_.find(static_cast<uint64_t>(pid) << 32 | tid);
    if (t != threads_.end() && !t->second.opens.empty())
        t->second.opens.back().bytes = bytes;
}

void BatchTracker::flush_loaders(Thread& t)
{
    for (auto& l : t.loaders) {
        auto& proc = processes_[l.pid];
        if (!l.owner && proc.preexisting && !proc.owner) { // its training process is not known yet: wait for it
            held_loaders_[l.pid].push_back(std::move(l));
            continue;
        }
        if (!l.owner)
            l.owner = proc.owner;
        sink_(l);
    }
    t.loaders.clear();
    t.opens.clear(); // later samples open their files after the hand-over
}

void BatchTracker::end_batch(Thread& t, uint64_t end)
{
    t.in_batch = false;
    if (t.partial || t.idx < 0) {
        // Begun before tracing: its samples are reported, the batch itself (start unknown) is not invented.
        t.partial = false;
        flush_loaders(t);
        return;
    }
    // Batches a worker never hands over (tasks read after its IterableDataset ran out) are forgotten in time.
    if (t.ended.size() >= 64)
        t.ended.erase(t.ended.begin());
    t.ended[t.idx] = Ended{t.epoch, t.start, end, t.last_sample_end, t.samples, std::move(t.loaders)};
    t.loaders.clear();
    t.opens.clear(); // later samples open their files after the hand-over
}

void BatchTracker::release_held(uint32_t pid, bool force)
{
    if (!force && !processes_[pid].owner)
        return;
    if (auto l = held_loaders_.find(pid); l != held_loaders_.end()) {
        std::vector<Span> loaders = std::move(l->second);
        held_loaders_.erase(l);
        for (auto& s : loaders) {
            s.owner = processes_[pid].owner;
            sink_(s);
        }
    }
    auto it = held_.find(pid);
    if (it == held_.end())
        return;
    std::vector<Held> held = std::move(it->second);
    held_.erase(it);
    for (auto& h : held)
        emit_batch(pid, h.tid, h.idx, h.batch, false, true);
}

void BatchTracker::finish()
{
    std::vector<uint32_t> pids;
    for (const auto& [pid, held] : held_)
        pids.push_back(pid);
    for (const auto& [pid, held] : held_loaders_)
        pids.push_back(pid);
    for (auto pid : pids)
        release_held(pid, true);
    for (const auto& [owner, c] : consumers_) {
        Join j = join_partial(owner, c);
        if (j.loader >= 0)
            apply_join(owner, j.loader);
        if (j.loader >= 0 || !j.reason.empty())
            joins_[owner] = j;
    }
}


void BatchTracker::emit_batch(uint32_t pid, uint32_t tid, int64_t idx, Ended& b, bool single, bool force)
{
    const Epoch* ep = b.epoch >= 0 ? &epochs_[b.epoch] : nullptr;
    auto& proc = processes_[pid];
    if (!ep && !proc.owner && proc.preexisting && !force) {
        held_[pid].push_back(Held{tid, idx, std::move(b)});
        return;
    }
    proc.batches++;
    proc.busy_ns += b.end - b.start;
    for (auto& l : b.loaders) {
        if (!l.owner)
            l.owner = proc.owner;
        sink_(l);
    }
    std::vector<std::pair<std::string, ArgValue>> ids;
    if (idx >= 0)
        ids.emplace_back("batch", int64_t{idx});
    if (ep && ep->number >= 0)
        ids.emplace_back("epoch", int64_t{ep->number});
    if (ep && ep->loader >= 0)
        ids.emplace_back("loader", int64_t{ep->loader});
    if (b.last_sample_end) {
        Span c = Span::make(SpanKind::Collate, "collate", pid, tid, b.last_sample_end, b.end);
        c.args = ids;
        c.owner = proc.owner;
        tag(c, b.epoch);
        sink_(c);
    }
    Span s = Span::make(SpanKind::Batch, "batch", pid, tid, b.start, b.end);
    s.args = ids;
    if (!single && proc.worker_id >= 0)
        s.args.emplace_back("worker", int64_t{proc.worker_id});
    s.args.emplace_back("samples", static_cast<int64_t>(b.samples));
    s.owner = proc.owner;
    tag(s, b.epoch);
    if (!single && ep && idx >= 0) {
        s.flow_out = next_flow_++;
        epochs_[b.epoch].ready[idx] = Ready{b.end, s.flow_out};
        epochs_[b.epoch].handed[idx] = b.end;
    }
    stats_[{ep ? ep->owner : proc.owner, ep ? ep->loader : -1}].prepare_ns.add(b.end - b.start);
    sink_(s);
}

} // namespace lotus::model
