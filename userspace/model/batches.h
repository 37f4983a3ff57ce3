// DataLoader semantics on top of the engine's stream: worker batches (with their loader and collate parts), the
// training loop's waits for them, hand-over delays, out-of-order arrivals, epochs, per training process and
// per DataLoader.
//
// Signals, chosen so that none depends on how one CPython version dispatches a call:
// - a training process's `DataLoader.__iter__` (a call from C through tp_iter in every version; also the
//   iterator's __init__ where it is seen) begins an epoch of that loader and returns its iterator; processes
//   forked meanwhile, by it or by its forkserver, are that epoch's workers;
// - a worker's main thread calling getppid: torch's worker loop checks that its parent lives once per task,
//   right after it put the last batch on the result queue (the end of that batch);
// - the iterator's `__next__` (through tp_iternext) is the training loop waiting for a batch;
// - the DataLoader's own queue messages (LOTUS_EV_MSG, model/messages.h): a worker reading task (idx, indices)
//   from its index queue begins batch idx; its (idx, data) written to the result queue (by its queue's feeder
//   thread) confirms batch idx was one (an IterableDataset's end-of-data marker says it was not); a persistent worker reading _ResumeIteration begins its next
//   epoch; the training loop reading (idx, data) inside next() names the batch next() returns.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/quantile_sketch.h"
#include <optional>

#include "lotus_abi.h"
#include "messages.h"
#include "spans.h"
#include "user_records.h"

namespace lotus::model {

// Per training process and DataLoader. Durations in fixed-size sketches (common/quantile_sketch.h: counts, totals,
// means, min and max exact; quantiles within 1 %), so that the tracer's memory does not grow with the run.
struct BatchStats {
    common::QuantileSketch prepare_ns; // per batch: worker's batch span
    common::QuantileSketch wait_ns;    // per consumed batch: next() blocked
    common::QuantileSketch delay_ns;   // per matched batch (its hand-over seen): consumed - ready
    uint64_t out_of_order = 0;         // matched batches that arrived after a later one
    // Waits and delays of at most 1 ms, 1-500 ms, over 500 ms (the Lotus paper's buckets).
    uint64_t wait_le_1ms = 0, wait_1_500ms = 0, wait_gt_500ms = 0;
    uint64_t delay_le_1ms = 0, delay_1_500ms = 0, delay_gt_500ms = 0;
    uint64_t unnamed = 0;             // consumed batches whose index could not be known (attached mid-epoch)
    uint64_t unmatched = 0;           // consumed batches with an index whose preparation was not seen
    // next() returned batches as they arrived (DataLoader(in_order=False)), seen through a pin-memory thread;
    // misnamed: waits named in index order before that was seen, which carry another batch's id.
    bool arrival_order = false;
    uint64_t misnamed = 0;
    uint64_t passes_before = 0; // earlier passes of that loader, named in index order before it was seen
    // The pass in flight when tracing began was found to be this loader's (BatchTracker::joins): its figures are
    // in these, from the batches seen of it.
    bool joined_partial = false;
    uint64_t partial_batches = 0; // that pass's consumed batches seen

    void add_wait(uint64_t ns);
    void add_delay(uint64_t ns, bool out_of_order);
    void merge(const BatchStats& other);
};

// What a DataLoader loads, as read from the target (RecordObject): its dataset's class and root; "" unread.
struct LoaderName {
    std::string dataset_class, root;
};

// Per training process: its loop, first next() start to last next() end (all its DataLoaders).
struct LoopSpan {
    uint64_t first_ns = 0, last_ns = 0;
    uint64_t wait_ns = 0; // sum of its waits
};

class BatchTracker {
public:
    using SpanSink = std::function<void(const Span&)>;
    // Loader spans a thread may hold for a batch not handed over yet (DataLoader batches are far smaller).
    static constexpr size_t kMaxPendingLoaders = 4096;
    // fw: the DataLoader queues' pickle globals.
    BatchTracker(SpanSink& sink, std::map<uint32_t, ProcessInfo>& processes,
                 const framework::Framework& fw = framework::builtin());

    void forked(uint32_t child, uint32_t parent);
    void exited(uint32_t pid);
    // pid is folded into its role's row (process_fold.h): what is kept by its pid or by its own queue goes.
    void forget(uint32_t pid);
    // DataLoader.__iter__(self=loader) entered (true: ask what the loader holds now, a RecordObject: at every
    // pass, an address may name a new DataLoader) / returned `iterator` (0: it raised) at ts.
    bool iter_begin(uint32_t pid, uint32_t tid, uint64_t loader);
    void iter_end(uint32_t pid, uint32_t tid, uint64_t iterator, uint64_t ts);
    // A DataLoader iterator's __init__(self=iterator, loader) entered / returned.
    void init_begin(uint32_t pid, uint32_t tid, uint64_t iterator, uint64_t loader);
    void init_end(uint32_t pid, uint32_t tid, uint64_t iterator);
    // true: ask what the iterator holds (a RecordObject): it was made before tracing began (its pass in flight), or
    // it is the first next() of a pass of a process that has a pass in flight, whose loader it may be.
    bool next_started(uint32_t pid, uint32_t tid, uint64_t ts, uint64_t iterator, bool single_process);
    void next_finished(uint32_t pid, uint32_t tid, uint64_t start, uint64_t end, bool raised);
    // The calls go one way: the tracker calls nothing back. Where a record ends a batch, the caller first completes
    // what the thread building it holds (its last sample), so that the batch counts it: a queue message in two
    // steps, message_begin (returning the thread whose batch the message ends, or 0) then message_end; a getppid
    // after asking getppid_ends_batch. next() returning ends a num_workers=0 batch: complete its thread first.
    uint32_t message_begin(const lotus_msg& m);
    void message_end();
    void message(const lotus_msg& m) { message_begin(m), message_end(); } // nothing held (tests)
    bool getppid_ends_batch(uint32_t pid, uint32_t tid) const;
    void getppid(uint32_t pid, uint32_t tid, uint64_t ts); // a worker's loop begins its next task
    // at: the thread's counters then (the event's; null: none), for the loading's between a sample's end and the
    // next one's start.
    void sample_started(uint32_t pid, uint32_t tid, uint64_t ts, uint64_t sample_id, int64_t sample,
                        const lotus_counters* at = nullptr);
    void sample_finished(uint32_t pid, uint32_t tid, uint64_t ts, const lotus_counters* at = nullptr);
    void opened(uint32_t pid, uint32_t tid, uint64_t ts, std::string path);
    void open_size(uint32_t pid, uint32_t tid, int64_t bytes); // the thread's last open's file: its size
    // What a DataLoader or an iterator holds (read where next_started or the engine asked).
    void described(const RecordObject& r);
    // The training process and DataLoader number a sample of this thread is for now ({0, -1}: unknown).
    std::pair<uint32_t, int> data_for(uint32_t pid, uint32_t tid) const;
    // End of stream: batches still waiting for their training process to be known go out as they are; the pass
    // in flight when tracing began joins its DataLoader where exactly one holds the dataset and sampler its
    // iterator held.
    void finish();
    // After finish: per training process, the DataLoader its pass in flight at attach joined, or why none.
    struct Join {
        int loader = -1;    // -1: not joined
        std::string reason; // why not
    };
    const std::map<uint32_t, Join>& joins() const { return joins_; }
    // What each DataLoader (owner, number) loads, where it was read.
    const std::map<std::pair<uint32_t, int>, LoaderName>& loader_names() const { return loader_names_; }

    const std::map<std::pair<uint32_t, int>, BatchStats>& stats() const { return stats_; }
    const std::map<uint32_t, LoopSpan>& loops() const { return loops_; }
    // The batch process pid is preparing now, its start and index (-1: unknown), if any.
    std::optional<std::pair<uint64_t, int64_t>> open_batch(uint32_t pid) const;
    bool seen() const { return seen_; }

private:
    struct Ready {
        uint64_t ts;
        uint64_t flow;
    };
    // What a DataLoader or an iterator holds, read at read_ns; trusted once a call of the holder is seen to end
    // after that (the addresses then named the objects it held).
    struct Holds {
        bool read = false, trusted = false;
        uint64_t read_ns = 0, dataset = 0, sampler = 0;
        std::string classes; // the dataset's and the sampler's classes, and the dataset's root
        bool same(const Holds& o) const
        {
            return dataset && sampler && dataset == o.dataset && sampler == o.sampler && classes == o.classes;
        }
    };
    // One pass over a DataLoader in one training process.
    struct Epoch {
        uint32_t owner = 0;
        int loader = -1;        // -1: unknown (an iterator first met in next(): made before tracing began)
        int number = -1;        // that loader's epoch in the owner, counted from tracing's start; -1 unknown
        bool counted = false;   // the index next() returns next is known
        int64_t next_idx = 0;
        std::map<int64_t, Ready> ready; // handed over, not consumed yet
        // Every batch handed over in this pass, consumed or not, and when: with in_order=False (torch 2.6+) a
        // later batch may be consumed before this one, and it still arrived first. Cleared at StopIteration.
        std::map<int64_t, uint64_t> handed;
        // A pin-memory thread's relay (pin_memory where an accelerator is): the batches it read from the result
        // queue, in that order, end-of-data markers left out; next() then reads none itself.
        std::vector<int64_t> relayed;
        std::set<int64_t> relayed_set;
        std::set<int64_t> pending;  // relayed, not returned yet
        std::vector<int64_t> named; // the batch each next() of this pass returned, as named then (-1: unnamed)
        bool iterable = false;      // an end-of-data marker was sent: workers drop out of the task rotation
        std::set<int64_t> stops;        // IterableDataset end-of-data markers: indices next() skips
        // What its iterator holds, read where asked (the pass in flight at attach, and each pass of its process
        // after it: a DataLoader's __iter__ may end before its own reading, the pass's next() calls seldom do).
        Holds holds;
        bool asked = false;
        uint64_t asked_ns = 0; // when the next() that asked began (a reading before it was of an earlier pass)
    };
    struct Bracket { // a DataLoader.__iter__ or iterator __init__ running: processes forked meanwhile are its workers
        uint32_t tid;
        int epoch;
        bool from_init;
        uint64_t iterator;
        int nested = 0;  // from_init: base-class __init__ calls inside it (3.10 sees them)
        int returns = 0;
        uint64_t loader = 0; // the DataLoader object (from __iter__)
    };
    struct NextCall {
        int epoch;
        int64_t last_read = -1; // index of the last batch message this thread read during the call
    };
    struct Consumer { // a training process
        std::map<uint64_t, int> loader_ids; // DataLoader object -> number
        std::map<uint64_t, Holds> loader_holds;   // DataLoader object -> what it held at its last trusted reading
        std::map<uint64_t, Holds> loader_reading; // DataLoader object -> its reading at the __iter__ running
        std::map<int, int> epochs_begun;    // DataLoader number -> epochs begun
        std::set<int> arrival_order;        // DataLoader numbers whose next() returns batches as they arrive
        std::vector<Bracket> open;
        std::unordered_map<uint64_t, int> iterators; // iterator object -> its epoch now
        std::unordered_map<uint32_t, NextCall> next; // per thread
        bool in_flight = false; // an iterator made before tracing began was met
    };
    // A batch a worker finished (its loop's next getppid, or its next task), not yet handed over: it is one
    // when its (idx, data) is sent; an end-of-data marker instead, or nothing, means it was not.
    struct Ended {
        int epoch = -1;
        uint64_t start = 0, end = 0, last_sample_end = 0, samples = 0;
        std::vector<Span> loaders;
    };
    // A thread building batches: a worker's main thread, or a training loop's next() with num_workers=0.
    struct Thread {
        bool in_batch = false;
        bool partial = false; // began before tracing did: its start (and index) are unknown
        bool single = false;  // a num_workers=0 batch, delimited by next()
        int epoch = -1;
        int64_t idx = -1;
        uint64_t start = 0, boundary = 0, last_sample_end = 0;
        std::optional<lotus_counters> boundary_counters; // the thread's at the boundary, where an event had them
        uint64_t samples = 0;
        struct Opened {
            uint64_t ts = 0;
            std::string path;
            int64_t bytes = -1; // its size at the open's return (a regular file); -1: unknown
        };
        std::deque<Opened> opens; // recent openat paths with their times
        std::vector<Span> loaders; // emitted with their batch, or when kMaxPendingLoaders pile up without one
        std::map<int64_t, Ended> ended; // by batch index
    };
    Thread& thread(uint32_t pid, uint32_t tid);
    int new_epoch(uint32_t owner, Consumer& c, uint64_t loader);
    uint32_t owner_of(uint32_t pid) const; // the nearest training process above pid
    void start_batch(Thread& t, uint64_t start, int64_t idx, int epoch);
    void flush_loaders(Thread& t);
    void end_batch(Thread& t, uint64_t end); // a worker's: waits in t.ended for its hand-over
    void emit_batch(uint32_t pid, uint32_t tid, int64_t idx, Ended& b, bool single, bool force = false);
    void release_held(uint32_t pid, bool force);
    void tag(Span& s, int epoch) const;
    void adopt_epoch(uint32_t pid, int epoch);
    void task_sent(uint64_t file, int64_t idx);
    int sent_epoch(uint64_t file, int64_t idx);
    void seen_arrival_order(Epoch& ep);
    Join join_partial(uint32_t owner, const Consumer& c) const;
    std::map<int, std::vector<const Holds*>> loader_readings(uint32_t owner, const Consumer& c) const;
    void apply_join(uint32_t owner, int loader);

    SpanSink& sink_;
    std::map<uint32_t, ProcessInfo>& processes_;
    const framework::Framework& fw_;
    // A queue message between message_begin and message_end: what message_end does with it.
    struct PendingMessage {
        enum Step { None, TaskRead, ResultSent } step = None;
        uint32_t pid = 0;
        uint64_t ts = 0, file = 0;
        QueueMessage q;
        int epoch = -1; // TaskRead: the worker's epoch now
    } pending_;
    std::vector<Epoch> epochs_;                       // by serial
    std::map<uint32_t, Consumer> consumers_;          // by pid
    std::unordered_map<uint32_t, int> worker_epoch_;  // worker pid -> the epoch it prepares batches for
    // The queues' pipes name both ends: who writes tasks into a pipe (a worker reading them prepares batches for
    // that process), and which epoch's next() reads batches out of one (a worker writing there, whose epoch was
    // not seen begin, prepares batches of that epoch).
    std::unordered_map<uint64_t, uint32_t> task_writer_;
    std::unordered_map<uint64_t, int> result_epoch_;
    // Per result queue pipe, the messages workers sent and nobody read yet: (index, pass), in pipe order.
    std::unordered_map<uint64_t, std::deque<std::pair<int64_t, int>>> sent_;
    static constexpr size_t kMaxUnread = 1024; // (reads not seen: the oldest go)
    std::unordered_map<uint64_t, uint32_t> task_reader_;                    // index queue pipe -> its worker
    std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> task_steps_; // pipe -> last task sent, step to it
    // Batches of a worker alive before tracing began whose training process is not known yet (nothing named it
    // so far), waiting for it: (idx, batch) per worker pid.
    struct Held {
        uint32_t tid;
        int64_t idx;
        Ended batch;
    };
    std::unordered_map<uint32_t, std::vector<Held>> held_;
    std::unordered_map<uint32_t, std::vector<Span>> held_loaders_; // of batches begun before tracing
    std::unordered_map<uint64_t, Thread> threads_;    // key pid << 32 | tid
    std::map<std::pair<uint32_t, int>, BatchStats> stats_;
    std::map<uint32_t, LoopSpan> loops_;
    std::map<uint32_t, Join> joins_;
    std::map<std::pair<uint32_t, int>, LoaderName> loader_names_;
    uint64_t next_flow_ = 1;
    bool seen_ = false;
};

} // namespace lotus::model
