// BatchTracker: a DataLoader's queue messages (which pass and batch each names, the order tasks go out).
#include "batches.h"

#include <sys/stat.h>

#include <algorithm>

#include "messages.h"

namespace lotus::model {

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

} // namespace lotus::model
