#include "batches.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

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
        // An iterator made before tracing began: which loader and epoch it is, and which batch next() returns,
        // are unknown until a batch message names one.
        Epoch unknown;
        unknown.owner = pid;
        epochs_.push_back(unknown);
        e = static_cast<int>(epochs_.size() - 1);
        c.iterators[iterator] = e;
    }
    c.next[tid] = NextCall{e, -1};
    LoopSpan& loop = loops_[pid];
    if (!loop.first_ns)
        loop.first_ns = ts;
    if (single_process) {
        Thread& t = thread(pid, tid);
        t.single = true;
        start_batch(t, ts, epochs_[e].counted ? epochs_[e].next_idx : -1, e);
    }
    return unknown;
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

uint32_t BatchTracker::message_begin(const lotus_msg& m)
{
    pending_ = PendingMessage{};
    if ((m.mode & S_IFMT) != S_IFIFO) // a DataLoader's queues are pipes (sockets carry other conversations)
        return 0;
    QueueMessage q = parse_queue_message(m.data, std::min<size_t>(m.nbytes, sizeof(m.data)), fw_);
    if (q.kind == QueueMessage::Other)
        return 0;
    uint32_t pid = m.h.tgid, tid = m.h.tid;
    if (m.dir == LOTUS_MSG_IN) {
        if (auto c = consumers_.find(pid); c != consumers_.end()) {
            // The training loop reading batches inside next(); a training process reads no tasks.
            if (q.kind != QueueMessage::Indexed)
                return 0;
            int sent_in = sent_epoch(m.file, q.index);
            if (auto nc = c->second.next.find(tid); nc != c->second.next.end()) {
                if (!q.stop) {
                    nc->second.last_read = q.index;
                    result_epoch_[m.file] = nc->second.epoch;
                }
                return 0;
            }
            // The loop's own thread inside DataLoader.__iter__: a persistent iterator's reset reading what its
            // workers still sent of the pass left unfinished (a loop that broke out of it), which torch drops.
            auto& open = c->second.open;
            if (std::any_of(open.begin(), open.end(), [&](const Bracket& b) { return b.tid == tid; }))
                return 0;
            // Another thread reading a result queue: a pin-memory thread relaying the batch to next(), of the pass
            // its worker sent it in (a pass left unfinished may still send after the next one began).
            if (sent_in < 0)
                if (auto re = result_epoch_.find(m.file); re != result_epoch_.end())
                    sent_in = re->second;
            if (sent_in >= 0 && !q.stop) {
                Epoch& ep = epochs_[sent_in];
                ep.relayed.push_back(q.index);
                ep.relayed_set.insert(q.index);
                ep.pending.insert(q.index);
            }
            return 0;
        }
        if (tid != pid) // a worker's loop runs on its main thread
            return 0;
        ProcessInfo& proc = processes_[pid];
        if (!proc.owner) {
            auto w = task_writer_.find(m.file);
            proc.owner = w != task_writer_.end() ? w->second : owner_of(pid);
            release_held(pid, false);
        }
        if (q.kind == QueueMessage::Resume) {
            // A persistent worker's next epoch: the one whose __iter__ sends the resume now.
            auto c = consumers_.find(proc.owner);
            if (c != consumers_.end() && !c->second.open.empty())
                worker_epoch_[pid] = c->second.open.back().epoch;
            else
                worker_epoch_.erase(pid);
            return 0;
        }
        // A task: batch q.index begins (the previous one, if its loop's getppid was not seen, ended by now).
        if (!q.task)
            return 0; // a batch read by a training process whose next() was not seen (tracing began inside it)
        task_reader_[m.file] = pid;
        proc.worker = true;
        auto we = worker_epoch_.find(pid);
        int e = we == worker_epoch_.end() ? -1 : we->second;
        if (e >= 0)
            proc.loader = epochs_[e].loader;
        pending_ = PendingMessage{PendingMessage::TaskRead, pid, m.h.ts_ns, m.file, q, e};
        return thread(pid, tid).in_batch ? tid : 0;
    }
    // Sent: a worker's queue feeder thread sending batch q.index, or an end-of-data marker in its place.
    if (q.kind != QueueMessage::Indexed)
        return 0;
    if (tid != pid) // a multiprocessing queue's feeder thread writes to the pipe
        processes_[pid].feeder_threads.insert(tid);
    if (!processes_[pid].worker) {
        task_writer_[m.file] = pid; // a training process sending tasks (or another program's queue)
        if (q.task)
            task_sent(m.file, q.index);
        return 0;
    }
    if (!worker_epoch_.count(pid))
        if (auto re = result_epoch_.find(m.file); re != result_epoch_.end())
            adopt_epoch(pid, re->second);
    pending_ = PendingMessage{PendingMessage::ResultSent, pid, m.h.ts_ns, m.file, q, -1};
    const Thread& t = thread(pid, pid);
    return t.in_batch && t.idx == q.index ? pid : 0; // its loop's getppid not seen yet (or never: the send bounds it)
}

void BatchTracker::message_end()
{
    PendingMessage p = pending_;
    pending_ = PendingMessage{};
    const QueueMessage& q = p.q;
    if (p.step == PendingMessage::TaskRead) {
        Thread& t = thread(p.pid, p.pid);
        if (t.in_batch)
            end_batch(t, p.ts);
        start_batch(t, p.ts, q.index, p.epoch);
        seen_ = true;
        return;
    }
    if (p.step != PendingMessage::ResultSent)
        return;
    Thread& t = thread(p.pid, p.pid);
    if (t.in_batch && t.idx == q.index)
        end_batch(t, p.ts);
    auto ended = t.ended.find(q.index);
    // The pass this message is of: its batch's, else the worker's now. (The queue's feeder thread sends after its
    // worker put the batch: a persistent worker may have begun its next pass meanwhile.)
    int e = -1;
    if (ended != t.ended.end() && ended->second.epoch >= 0)
        e = ended->second.epoch;
    else if (auto we = worker_epoch_.find(p.pid); we != worker_epoch_.end())
        e = we->second;
    if (e >= 0) {
        result_epoch_[p.file] = e; // a pin-memory thread's reads of this queue are of this pass
        auto& sent = sent_[p.file];
        sent.emplace_back(q.index, e);
        if (sent.size() > kMaxUnread)
            sent.pop_front();
    }
    if (q.stop) {
        // An IterableDataset worker's data ran out: that index carries no batch, next() skips it.
        if (e >= 0) {
            epochs_[e].stops.insert(q.index);
            epochs_[e].iterable = true;
        }
        if (ended != t.ended.end())
            t.ended.erase(ended);
        return;
    }
    if (ended != t.ended.end()) {
        emit_batch(p.pid, p.pid, q.index, ended->second, false);
        t.ended.erase(ended);
    }
}

// The pass a result queue's message read now was sent in: its pipe delivers messages in the order they were sent
// (the queue's writers hold its lock while they write). -1 where its send was not seen. Messages sent before it
// and not read (lost records) are dropped.
int BatchTracker::sent_epoch(uint64_t file, int64_t idx)
{
    auto it = sent_.find(file);
    if (it == sent_.end())
        return -1;
    auto& sent = it->second;
    auto m = std::find_if(sent.begin(), sent.end(), [&](const auto& p) { return p.first == idx; });
    if (m == sent.end())
        return -1;
    int e = m->second;
    sent.erase(sent.begin(), std::next(m));
    if (sent.empty()) // every message of the pipe read (each epoch's workers have new queues): nothing kept
        sent_.erase(it);
    return e;
}

// A pass's loader returns batches as they arrive (in_order=False), seen now: its waits are named in the order its
// pin-memory thread relayed them from here on (and in the loader's later passes). Those of this pass named before
// in index order went out already: counted where the relay order names another batch.
void BatchTracker::seen_arrival_order(Epoch& ep)
{
    auto c = consumers_.find(ep.owner);
    if (c == consumers_.end() || !c->second.arrival_order.insert(ep.loader).second)
        return;
    BatchStats& st = stats_[{ep.owner, ep.loader}];
    st.arrival_order = true;
    for (size_t j = 0; j < ep.named.size() && j < ep.relayed.size(); j++)
        st.misnamed += ep.named[j] != ep.relayed[j];
    if (ep.number > 0)
        st.passes_before = std::max(st.passes_before, static_cast<uint64_t>(ep.number));
}

// A task sent to a worker's index queue. next() hands tasks to the workers in turn, so each queue gets every W-th
// task, W the active workers, in index order (torch < 2.6, and in_order=True). in_order=False skips a worker that
// has its share of tasks outstanding: after the loop took a later batch first, the next task goes to that batch's
// worker out of turn. So a queue whose step between tasks changes shows in_order=False, unless workers left the
// rotation (an IterableDataset's end of data) or the pass began again (a persistent loader's next epoch: the
// indices start over).
void BatchTracker::task_sent(uint64_t file, int64_t idx)
{
    auto [it, fresh] = task_steps_.try_emplace(file, idx, 0);
    if (fresh)
        return;
    auto& [last, step] = it->second;
    int64_t s = idx - last;
    last = idx;
    if (s <= 0) { // the indices started over
        step = 0;
        return;
    }
    int64_t before = step;
    step = s;
    if (!before || s == before)
        return;
    auto r = task_reader_.find(file);
    if (r == task_reader_.end())
        return;
    auto we = worker_epoch_.find(r->second);
    if (we == worker_epoch_.end())
        return;
    Epoch& ep = epochs_[we->second];
    if (!ep.iterable && !ep.relayed.empty() && ep.number >= 0)
        seen_arrival_order(ep);
}

// A worker whose epoch began before tracing did: its batches (those not sent yet too) are that epoch's.
void BatchTracker::adopt_epoch(uint32_t pid, int epoch)
{
    worker_epoch_[pid] = epoch;
    processes_[pid].loader = epochs_[epoch].loader;
    if (!processes_[pid].owner)
        processes_[pid].owner = epochs_[epoch].owner;
    for (auto& [key, t] : threads_) {
        if (key >> 32 != pid)
            continue;
        if (t.in_batch && t.epoch < 0)
            t.epoch = epoch;
        for (auto& [idx, b] : t.ended)
            if (b.epoch < 0)
                b.epoch = epoch;
    }
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

void BatchTracker::described(const RecordObject& r)
{
    auto c = consumers_.find(r.tgid);
    if (c == consumers_.end())
        return;
    auto text = [](const char* s, size_t n) { return std::string(s, strnlen(s, n)); };
    Holds h{true, false, r.ts_ns, r.dataset, r.sampler,
            text(r.dataset_class, sizeof(r.dataset_class)) + "\n" + text(r.dataset_root, sizeof(r.dataset_root)) +
                "\n" + text(r.sampler_class, sizeof(r.sampler_class))};
    if (r.kind == kObjectLoader) {
        auto id = c->second.loader_ids.find(r.object);
        if (id == c->second.loader_ids.end())
            return;
        c->second.loader_reading[r.object] = h;
        LoaderName name{std::string(r.dataset_class, strnlen(r.dataset_class, sizeof(r.dataset_class))),
                        std::string(r.dataset_root, strnlen(r.dataset_root, sizeof(r.dataset_root)))};
        if (!name.dataset_class.empty())
            loader_names_[{r.tgid, id->second}] = name;
    } else if (r.kind == kObjectIterator) {
        auto it = c->second.iterators.find(r.object);
        if (it != c->second.iterators.end() && epochs_[it->second].loader < 0)
            epochs_[it->second].holds = h;
    }
}

// The DataLoader that the passes in flight at attach (iterators first met in next()) of one training process
// belong to: the one loader iterated while traced whose dataset and sampler are the objects each of them held.
// Their figures are counted together, so all must name that one loader. Never a guess: else why not.
BatchTracker::Join BatchTracker::join_partial(uint32_t owner, const Consumer& c) const
{
    int found = -1;
    for (const auto& ep : epochs_) {
        if (ep.owner != owner || ep.loader >= 0)
            continue;
        const Holds& h = ep.holds;
        if (!h.read)
            return {-1, "what its iterator holds was not read (a record file made before lotus-bpf read it, or an "
                        "interpreter whose object layout it does not know)"};
        if (!h.dataset || !h.sampler)
            return {-1, "what its iterator holds could not be read"};
        if (!h.trusted)
            return {-1, "its iterator was read after its last next() ended (it may have gone)"};
        std::vector<int> match;
        for (const auto& [obj, lh] : c.loader_holds)
            if (lh.trusted && lh.same(h))
                match.push_back(c.loader_ids.at(obj));
        // A loader whose holdings were not read while it ran could hold these very objects: no join then either.
        for (const auto& [obj, id] : c.loader_ids)
            if (auto lh = c.loader_holds.find(obj); lh == c.loader_holds.end() || !lh->second.trusted)
                return {-1, fmt::format("what DataLoader {} holds was not read while it ran: it could be that one", id)};
        std::sort(match.begin(), match.end());
        if (match.empty())
            return {-1, "no DataLoader iterated while traced holds its dataset and sampler"};
        if (match.size() > 1)
            return {-1, fmt::format("DataLoaders {} and {} hold the same dataset and sampler: it could be either",
                                    match[0], match[1])};
        if (found >= 0 && found != match[0])
            return {-1, fmt::format("iterators of DataLoaders {} and {} were both in flight: their batches are counted "
                                    "together",
                                    found, match[0])};
        found = match[0];
    }
    return {found, ""};
}

void BatchTracker::apply_join(uint32_t owner, int loader)
{
    for (auto& ep : epochs_)
        if (ep.owner == owner && ep.loader < 0)
            ep.loader = loader;
    auto partial = stats_.find({owner, -1});
    BatchStats& into = stats_[{owner, loader}];
    into.joined_partial = true;
    if (partial != stats_.end()) {
        into.partial_batches += partial->second.wait_ns.count();
        into.merge(partial->second);
        stats_.erase(partial);
    }
    // Its workers: those of the owner whose epoch was never known (alive at attach) or is one of these.
    for (auto& [pid, p] : processes_) {
        auto e = worker_epoch_.find(pid);
        bool of_pass = e == worker_epoch_.end() || (epochs_[e->second].owner == owner && epochs_[e->second].loader == loader);
        if (p.owner == owner && p.loader < 0 && (p.worker || p.worker_id >= 0) && of_pass)
            p.loader = loader;
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
