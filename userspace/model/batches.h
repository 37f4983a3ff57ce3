// DataLoader semantics on top of the engine's stream: worker batches (with their loader and collate parts),
// the training loop's waits for them, hand-over delays, out-of-order arrivals and epochs.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "spans.h"

namespace lotus::model {

struct BatchStats {
    std::vector<uint64_t> prepare_ns; // per batch: worker's batch span
    std::vector<uint64_t> wait_ns;    // per consumed batch: next() blocked
    std::vector<bool> out_of_order;   // per consumed batch (same order as wait_ns)
    std::vector<uint64_t> delay_ns;   // per matched batch: consumed - ready
    uint64_t loop_first_ns = 0, loop_last_ns = 0; // first next() start, last next() end
};

class BatchTracker {
public:
    using SpanSink = std::function<void(const Span&)>;
    // Loader spans a thread may hold for a batch not handed over yet (DataLoader batches are far smaller).
    static constexpr size_t kMaxPendingLoaders = 4096;
    BatchTracker(SpanSink& sink, std::map<uint32_t, ProcessInfo>& processes);

    void forked(uint32_t child);
    // A DataLoader iterator's __init__(self=iterator, loader) began / returned: workers forked meanwhile are
    // that iterator's, and a new epoch of that loader begins.
    void iterator_created(uint32_t pid, uint64_t iterator, uint64_t loader);
    void iterator_constructed(uint32_t pid, uint64_t iterator);
    void sample_started(uint32_t pid, uint32_t tid, uint64_t ts, int64_t batch_idx, uint64_t sample_id,
                        int64_t sample);
    void sample_finished(uint32_t pid, uint32_t tid, uint64_t ts);
    void opened(uint32_t pid, uint32_t tid, uint64_t ts, std::string path);
    void wait_done(uint32_t pid, uint32_t tid, uint64_t ts);
    void batch_put(uint32_t pid, uint32_t tid, uint64_t ts, int64_t idx);
    void stop_marker(uint32_t pid, uint32_t tid); // the thread's next put is an end-of-data marker
    void next_started(uint32_t pid, uint32_t tid, uint64_t ts, uint64_t iterator, bool single_process);
    void next_finished(uint32_t pid, uint32_t tid, uint64_t start, uint64_t end, uint64_t iterator,
                       bool single_process, bool raised);

    const BatchStats& stats() const { return stats_; }
    bool seen() const { return seen_; }

private:
    struct Thread {
        bool in_batch = false;
        int64_t idx = -1;
        uint64_t start = 0, boundary = 0, last_sample_end = 0, last_put = 0, last_wait_done = 0;
        uint64_t samples = 0;
        std::deque<std::pair<uint64_t, std::string>> opens; // recent openat paths with their times
        int64_t prev_idx = -1;
        int64_t last_put_idx = -1;
        bool stop_pending = false;
        int resets = 0;    // persistent workers: the batch index restarts at every epoch
        bool single = false; // a num_workers=0 batch, delimited by next()
        bool partial = false; // began before tracing did
        int loader = -1;     // for single-process batches: the iterator's loader
        std::vector<Span> loaders; // emitted with their batch (nothing outlives an unfinished batch), or when
                                   // kMaxPendingLoaders pile up without one
    };
    struct Ready {
        uint64_t ts;
        uint64_t flow;
        bool stop = false; // an IterableDataset's end-of-data marker: an index the main process skips
    };
    struct Iterator {
        int loader = -1;
        int epoch = -1;
        int64_t consumed = 0; // batches returned by next() in this epoch
        int64_t next_idx = 0; // task index of the next batch next() returns
        bool ended = true;
    };

    Thread& thread(uint32_t pid, uint32_t tid);
    void start_batch(uint32_t pid, Thread& t, uint64_t start, int64_t idx);
    static void adopt_index(Thread& t, int64_t idx);
    void flush_loaders(Thread& t);
    void finish_batch(uint32_t pid, uint32_t tid, Thread& t, uint64_t end, int epoch);
    int worker_epoch(uint32_t pid, const Thread& t) const;
    int worker_loader(uint32_t pid) const;
    void new_epoch(Iterator& it);

    SpanSink& sink_;
    std::map<uint32_t, ProcessInfo>& processes_;
    std::unordered_map<uint64_t, Thread> threads_; // key pid << 32 | tid
    std::unordered_map<uint64_t, Iterator> iterators_;
    std::map<std::pair<int, int>, std::map<int64_t, Ready>> ready_; // (loader, epoch) -> batch index -> hand-over
    std::map<uint64_t, int> loader_ids_; // DataLoader object -> number
    std::map<int, int> loader_epochs_;   // DataLoader number -> epochs begun
    uint64_t constructing_ = 0;          // iterator whose __init__ is running (it forks the workers)
    uint64_t next_flow_ = 1;
    BatchStats stats_;
    bool seen_ = false;
};

} // namespace lotus::model
