// model::BatchTracker on its own: the calls the engine makes into it (forks, DataLoader.__iter__, next(),
// the queues' messages, samples, the worker loop's getppid), with no engine, no code objects and no BPF.
// (batches_test.cpp drives the same semantics through the engine from records.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "event_builder.h"
#include "model/batches.h"

using namespace lotus;
using model::BatchTracker;
using model::Span;
using model::SpanKind;

namespace {

struct BatchTrackerTest : ::testing::Test {
    std::vector<Span> spans;
    BatchTracker::SpanSink sink = [this](const Span& s) { spans.push_back(s); };
    std::map<uint32_t, model::ProcessInfo> processes;
    BatchTracker tracker{sink, processes};
    uint64_t now = 1000;

    static uint64_t task_pipe(uint32_t w) { return 0x7000 + w; }
    static constexpr uint64_t RESULTS = 0x9000;

    void root(uint32_t pid) { processes[pid].root = true; }
    void fork(uint32_t child, uint32_t parent)
    {
        processes[child].parent = parent; // (the engine records the parent before telling the tracker)
        tracker.forked(child, parent);
    }
    lotus_msg make_message(uint32_t pid, uint32_t tid, uint8_t dir, const std::string& pickle, uint64_t file)
    {
        lotus_msg m{};
        m.h.tgid = pid;
        m.h.tid = tid;
        m.h.ts_ns = now++;
        m.file = file;
        m.mode = 0010000; // S_IFIFO
        m.dir = dir;
        m.nbytes = static_cast<uint8_t>(std::min(pickle.size(), sizeof(m.data)));
        memcpy(m.data, pickle.data(), m.nbytes);
        return m;
    }
    void message(uint32_t pid, uint32_t tid, uint8_t dir, const std::string& pickle, uint64_t file)
    {
        tracker.message(make_message(pid, tid, dir, pickle, file));
    }
    // A training process's `for batch in loader` begins: __iter__ forks `workers`, returns `iterator`.
    void begin_epoch(uint32_t pid, uint64_t loader, uint64_t iterator, const std::vector<uint32_t>& workers)
    {
        tracker.iter_begin(pid, pid, loader);
        for (auto w : workers)
            fork(w, pid);
        tracker.iter_end(pid, pid, iterator, 0);
    }
    // A worker's batch: its task, `samples` samples, its loop's getppid (the batch's end); then its feeder
    // thread sends it (or an end-of-data marker in its place).
    std::map<std::pair<uint32_t, int64_t>, uint64_t> ended;
    std::map<std::pair<uint32_t, int64_t>, uint64_t> last_sample_end;
    void batch(uint32_t w, int64_t idx, int samples = 2)
    {
        message(w, w, LOTUS_MSG_IN, test::pickled_indexed(idx), task_pipe(w));
        for (int i = 0; i < samples; i++) {
            now += 10;
            tracker.sample_started(w, w, now, ++sample_id, idx * 100 + i);
            now += 5;
            tracker.sample_finished(w, w, now);
            last_sample_end[{w, idx}] = now;
        }
        now += 3;
        ended[{w, idx}] = now;
        tracker.getppid(w, w, now++);
    }
    uint64_t sample_id = 0;
    void send(uint32_t w, int64_t idx, bool stop = false)
    {
        message(w, w + 1000, LOTUS_MSG_OUT, test::pickled_indexed(idx, stop), RESULTS);
    }
    // The training loop's next(): the batch messages it reads meanwhile; returns when it returned.
    uint64_t next(uint32_t pid, uint64_t iterator, const std::vector<int64_t>& reads = {}, bool single = false,
                  int samples = 0)
    {
        uint64_t start = now++;
        tracker.next_started(pid, pid, start, iterator, single);
        for (auto r : reads)
            message(pid, pid, LOTUS_MSG_IN, test::pickled_indexed(r), RESULTS);
        for (int i = 0; i < samples; i++) { // num_workers=0: next() loads the samples itself
            tracker.sample_started(pid, pid, now++, ++sample_id, i);
            tracker.sample_finished(pid, pid, now++);
        }
        uint64_t end = now++;
        tracker.next_finished(pid, pid, start, end, false);
        return end;
    }
    void stop_iteration(uint32_t pid, uint64_t iterator)
    {
        uint64_t start = now++;
        tracker.next_started(pid, pid, start, iterator, false);
        tracker.next_finished(pid, pid, start, now++, true);
    }
    std::vector<Span> of(SpanKind k) const { return test::spans_of(spans, k); }
    // "owner/loader/epoch/batch" of each span.
    static std::vector<std::string> keys(const std::vector<Span>& v)
    {
        std::vector<std::string> out;
        for (const auto& s : v)
            out.push_back(std::to_string(s.owner) + "/" + std::to_string(s.loader) + "/" + test::arg_text(s, "epoch") + "/" +
                          test::arg_text(s, "batch"));
        return out;
    }
    // Every wait's flow ends at the one batch with the same keys.
    void expect_flows_join() const
    {
        std::map<uint64_t, const Span*> out;
        for (const auto& s : spans)
            if (s.flow_out)
                out[s.flow_out] = &s;
        for (const auto& w : of(SpanKind::Wait)) {
            if (!w.flow_in)
                continue;
            auto b = out.find(w.flow_in);
            ASSERT_NE(b, out.end());
            EXPECT_EQ(keys({*b->second}), keys({w}));
        }
    }
};

} // namespace

TEST_F(BatchTrackerTest, AnEpochsBatchesWaitsDelaysAndCollates)
{
    constexpr uint32_t P = 10, W0 = 11, W1 = 12;
    root(P);
    begin_epoch(P, 0xa0, 0x70, {W0, W1});
    EXPECT_EQ(processes[W0].owner, P);
    EXPECT_EQ(processes[W1].loader, 0);
    batch(W0, 0, 3);
    send(W0, 0);
    batch(W1, 1, 2);
    send(W1, 1);
    uint64_t got0 = next(P, 0x70, {0});
    uint64_t got1 = next(P, 0x70, {1});
    stop_iteration(P, 0x70);

    auto batches = of(SpanKind::Batch);
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_EQ(keys(batches), (std::vector<std::string>{"10/0/0/0", "10/0/0/1"}));
    EXPECT_EQ(batches[0].end_ns, ended.at({W0, 0}));
    EXPECT_EQ(test::arg_text(batches[0], "samples"), "3");
    EXPECT_EQ(batches[1].pid, W1);
    auto collates = of(SpanKind::Collate);
    ASSERT_EQ(collates.size(), 2u);
    EXPECT_EQ(collates[0].start_ns, last_sample_end.at({W0, 0})); // last sample's end to the batch's end
    EXPECT_EQ(collates[0].end_ns, ended.at({W0, 0}));
    EXPECT_EQ(of(SpanKind::Loader).size(), 5u); // one per sample, out with its batch

    auto waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 2u);
    EXPECT_EQ(keys(waits), (std::vector<std::string>{"10/0/0/0", "10/0/0/1"}));
    EXPECT_EQ(waits[0].name, "wait"); // one name for every wait; the batch in args
    // Delay: from the batch's end (ready) to next() returning it (consumed).
    EXPECT_EQ(test::arg_ns(waits[0], "delay_ms"), static_cast<int64_t>(got0 - ended.at({W0, 0})));
    EXPECT_EQ(test::arg_ns(waits[1], "delay_ms"), static_cast<int64_t>(got1 - ended.at({W1, 1})));
    EXPECT_EQ(of(SpanKind::Consumed).size(), 2u);
    expect_flows_join();
    const auto& st = tracker.stats().at({P, 0});
    EXPECT_EQ(st.prepare_ns.count(), 2u);
    EXPECT_EQ(st.wait_ns.count(), 2u);
    EXPECT_EQ(st.delay_ns.count(), 2u); // (exact below the sketch's limit: the two delays are its extremes)
    EXPECT_EQ(st.delay_ns.min(), std::min(got0 - ended.at({W0, 0}), got1 - ended.at({W1, 1})));
    EXPECT_EQ(st.delay_ns.max(), std::max(got0 - ended.at({W0, 0}), got1 - ended.at({W1, 1})));
    EXPECT_EQ(processes[W0].batches, 1u);
    EXPECT_TRUE(processes[W1].worker);
    EXPECT_EQ(processes[W1].feeder_threads, (std::set<uint32_t>{W1 + 1000})); // the thread that sent its batches
    EXPECT_TRUE(processes[P].consumer);
    EXPECT_EQ(tracker.loops().at(P).last_ns, now - 1);
}

// The tracker calls nothing back: a record that ends a batch says so first (message_begin's thread,
// getppid_ends_batch), and a sample the caller completes then still counts in the batch ending.
TEST_F(BatchTrackerTest, ARecordThatEndsABatchSaysSoFirst)
{
    constexpr uint32_t P = 10, W0 = 11;
    root(P);
    begin_epoch(P, 0xa0, 0x70, {W0});
    auto msg = [&](uint32_t pid, uint32_t tid, uint8_t dir, int64_t idx, uint64_t file) {
        return make_message(pid, tid, dir, test::pickled_indexed(idx), file);
    };
    // The first task ends nothing; the worker's one sample is still open when its getppid comes.
    EXPECT_EQ(tracker.message_begin(msg(W0, W0, LOTUS_MSG_IN, 0, task_pipe(W0))), 0u);
    tracker.message_end();
    tracker.sample_started(W0, W0, now++, 1, 0);
    EXPECT_FALSE(tracker.getppid_ends_batch(W0, W0 + 1)); // another thread of the worker builds no batch
    EXPECT_TRUE(tracker.getppid_ends_batch(W0, W0));
    tracker.sample_finished(W0, W0, now++); // what the engine completes before the batch ends
    tracker.getppid(W0, W0, now++);
    EXPECT_FALSE(tracker.getppid_ends_batch(W0, W0)); // ended
    // Its next task, with no getppid seen before it, ends batch 1 on the worker's main thread; the feeder's send
    // of batch 1 then ends nothing more, and a send of a batch the thread builds ends it.
    EXPECT_EQ(tracker.message_begin(msg(W0, W0, LOTUS_MSG_IN, 1, task_pipe(W0))), 0u);
    tracker.message_end();
    tracker.sample_started(W0, W0, now++, 2, 1);
    EXPECT_EQ(tracker.message_begin(msg(W0, W0, LOTUS_MSG_IN, 2, task_pipe(W0))), W0);
    uint64_t pending = now;
    tracker.sample_finished(W0, W0, now++);
    tracker.message_end();
    EXPECT_EQ(tracker.message_begin(msg(W0, W0 + 1000, LOTUS_MSG_OUT, 0, RESULTS)), 0u);
    tracker.message_end();
    EXPECT_EQ(tracker.message_begin(msg(W0, W0 + 1000, LOTUS_MSG_OUT, 1, RESULTS)), 0u);
    tracker.message_end();
    tracker.sample_started(W0, W0, now++, 3, 2);
    EXPECT_EQ(tracker.message_begin(msg(W0, W0 + 1000, LOTUS_MSG_OUT, 2, RESULTS)), W0);
    tracker.sample_finished(W0, W0, now++);
    tracker.message_end();
    auto batches = of(SpanKind::Batch);
    ASSERT_EQ(batches.size(), 3u);
    for (const auto& b : batches)
        EXPECT_EQ(test::arg_text(b, "samples"), "1") << test::arg_text(b, "batch");
    EXPECT_EQ(of(SpanKind::Collate).at(1).start_ns, pending); // the sample finished between the two steps
}

TEST_F(BatchTrackerTest, OutOfOrderArrivalsAndBatchesFromNextsCache)
{
    constexpr uint32_t P = 10, W0 = 11, W1 = 12;
    root(P);
    begin_epoch(P, 0xa0, 0x70, {W0, W1});
    batch(W1, 1);
    send(W1, 1);
    batch(W0, 0);
    send(W0, 0);
    next(P, 0x70, {1, 0}); // reads 1 (kept in torch's cache), then 0: returns 0
    next(P, 0x70);         // 1, from the cache: nothing read
    auto waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 2u);
    EXPECT_EQ(test::arg_text(waits[0], "batch"), "0");
    EXPECT_EQ(test::arg_text(waits[0], "out_of_order"), "true"); // 1 was ready before 0
    EXPECT_EQ(test::arg_text(waits[1], "batch"), "1");
    EXPECT_EQ(test::arg_text(waits[1], "out_of_order"), "false");
    EXPECT_EQ(tracker.stats().at({P, 0}).out_of_order, 1u); // of 2 delays
    EXPECT_EQ(tracker.stats().at({P, 0}).delay_ns.count(), 2u);
    expect_flows_join();
}

TEST_F(BatchTrackerTest, EndOfDataMarkersAreSkippedNeverBatches)
{
    constexpr uint32_t P = 10, W0 = 11, W1 = 12;
    root(P);
    begin_epoch(P, 0xa0, 0x70, {W0, W1});
    batch(W0, 0);
    send(W0, 0);
    batch(W1, 1, 0);     // an IterableDataset worker whose data ran out:
    send(W1, 1, true);   // its marker in place of batch 1
    batch(W0, 2);
    send(W0, 2);
    next(P, 0x70, {2, 0}); // returns 0 (2 cached)
    next(P, 0x70);         // from the cache: past the marker, 2
    auto batches = of(SpanKind::Batch);
    EXPECT_EQ(keys(batches), (std::vector<std::string>{"10/0/0/0", "10/0/0/2"}));
    auto waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 2u);
    EXPECT_EQ(test::arg_text(waits[1], "batch"), "2");
    EXPECT_NE(waits[1].flow_in, 0u);
    expect_flows_join();
}

TEST_F(BatchTrackerTest, EpochsWithNewWorkersAndWithPersistentOnes)
{
    constexpr uint32_t P = 10;
    root(P);
    // Two epochs, new workers each.
    for (uint32_t e = 0; e < 2; e++) {
        uint32_t w = 20 + e;
        begin_epoch(P, 0xa0, 0x70 + e, {w});
        batch(w, 0);
        send(w, 0);
        next(P, 0x70 + e, {0});
        stop_iteration(P, 0x70 + e);
    }
    // A persistent loader: its worker forked once; each later epoch begins with a _ResumeIteration it reads
    // while __iter__ runs, and __iter__ returns the same iterator.
    constexpr uint32_t W = 30;
    begin_epoch(P, 0xb0, 0x80, {W});
    batch(W, 0);
    send(W, 0);
    next(P, 0x80, {0});
    stop_iteration(P, 0x80);
    tracker.iter_begin(P, P, 0xb0);
    message(W, W, LOTUS_MSG_IN, test::pickled_resume(), task_pipe(W));
    tracker.iter_end(P, P, 0x80, 0);
    batch(W, 0);
    send(W, 0);
    next(P, 0x80, {0});
    EXPECT_EQ(keys(of(SpanKind::Batch)),
              (std::vector<std::string>{"10/0/0/0", "10/0/1/0", "10/1/0/0", "10/1/1/0"}));
    EXPECT_EQ(keys(of(SpanKind::Wait)), keys(of(SpanKind::Batch)));
    expect_flows_join();
    EXPECT_EQ(tracker.stats().at({P, 0}).wait_ns.count(), 2u);
    EXPECT_EQ(tracker.stats().at({P, 1}).wait_ns.count(), 2u);
}

TEST_F(BatchTrackerTest, NoWorkersNextBuildsTheBatchItself)
{
    constexpr uint32_t P = 10;
    root(P);
    begin_epoch(P, 0xa0, 0x70, {});
    next(P, 0x70, {}, true, 3);
    next(P, 0x70, {}, true, 3);
    auto batches = of(SpanKind::Batch);
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_EQ(keys(batches), (std::vector<std::string>{"10/0/0/0", "10/0/0/1"}));
    EXPECT_EQ(batches[0].pid, P);
    EXPECT_EQ(test::arg_text(batches[0], "samples"), "3");
    EXPECT_EQ(test::arg_text(batches[0], "worker"), ""); // no worker made it
    EXPECT_EQ(batches[0].flow_out, 0u);       // nothing handed over
    auto waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 2u);
    EXPECT_EQ(test::arg_text(waits[1], "batch"), "1");
    EXPECT_EQ(test::arg_ns(waits[0], "delay_ms"), 0);
    EXPECT_EQ(of(SpanKind::Loader).size(), 6u);
}

TEST_F(BatchTrackerTest, TwoDataLoadersOfOneProcess)
{
    constexpr uint32_t P = 10, TRAIN = 11, VAL = 12;
    root(P);
    begin_epoch(P, 0xa0, 0x70, {TRAIN});
    begin_epoch(P, 0xb0, 0x80, {VAL});
    batch(VAL, 0);
    send(VAL, 0);
    batch(TRAIN, 0);
    send(TRAIN, 0);
    next(P, 0x70, {0});
    next(P, 0x80, {0});
    EXPECT_EQ(keys(of(SpanKind::Batch)), (std::vector<std::string>{"10/1/0/0", "10/0/0/0"}));
    EXPECT_EQ(keys(of(SpanKind::Wait)), (std::vector<std::string>{"10/0/0/0", "10/1/0/0"}));
    EXPECT_EQ(processes[VAL].loader, 1);
    EXPECT_EQ(tracker.stats().size(), 2u);
    expect_flows_join();
}

TEST_F(BatchTrackerTest, RanksKeepTheirOwnLoadersEpochsAndBatches)
{
    constexpr uint32_t MAIN = 10, R0 = 20, R1 = 30, W00 = 21, W10 = 31;
    root(MAIN);
    fork(R0, MAIN);
    fork(R1, MAIN);
    begin_epoch(R0, 0xa0, 0x70, {W00});
    begin_epoch(R1, 0xa0, 0x70, {W10}); // same addresses: forked from one image
    batch(W10, 0);
    send(W10, 0);
    batch(W00, 0);
    send(W00, 0);
    next(R1, 0x70, {0});
    next(R0, 0x70, {0});
    EXPECT_EQ(processes[W00].owner, R0);
    EXPECT_EQ(processes[W10].owner, R1);
    EXPECT_EQ(keys(of(SpanKind::Batch)), (std::vector<std::string>{"30/0/0/0", "20/0/0/0"}));
    EXPECT_EQ(keys(of(SpanKind::Wait)), (std::vector<std::string>{"30/0/0/0", "20/0/0/0"}));
    expect_flows_join();
    EXPECT_TRUE(tracker.stats().count({R0, 0}));
    EXPECT_TRUE(tracker.stats().count({R1, 0}));
    EXPECT_FALSE(processes[MAIN].consumer);
}

TEST_F(BatchTrackerTest, WhatBeganBeforeTracingIsNotGuessed)
{
    constexpr uint32_t P = 10, W = 11;
    root(P);
    processes[W] = model::ProcessInfo{};
    processes[W].parent = P;
    processes[W].preexisting = true;
    // An iterator made before tracing: next() reads nothing, so its batch is unknown.
    next(P, 0x70);
    auto waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 1u);
    EXPECT_EQ(test::arg_text(waits[0], "batch"), "");
    EXPECT_EQ(tracker.stats().at({P, -1}).unnamed, 1u);
    // A worker in the middle of a batch: its samples are reported, the batch (start unknown) is not.
    tracker.sample_started(W, W, now++, 1, 5);
    tracker.sample_finished(W, W, now++);
    tracker.sample_started(W, W, now++, 2, 6);
    tracker.sample_finished(W, W, now++);
    tracker.getppid(W, W, now++);
    // Its next batch is whole; the batch next() reads names what it returns (the epoch stays unknown).
    batch(W, 7);
    send(W, 7);
    next(P, 0x70, {7});
    tracker.finish();
    auto batches = of(SpanKind::Batch);
    ASSERT_EQ(batches.size(), 1u);
    EXPECT_EQ(test::arg_text(batches[0], "batch"), "7");
    EXPECT_EQ(test::arg_text(batches[0], "epoch"), ""); // its epoch began before tracing: its number is unknown
    waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 2u);
    EXPECT_EQ(test::arg_text(waits[1], "batch"), "7");
    // The second sample's loading is known (from the first's end); the first's began before tracing.
    EXPECT_EQ(of(SpanKind::Loader).size(), 1u + 2u);
}

TEST_F(BatchTrackerTest, ABatchNeverHandedOverIsNotInvented)
{
    constexpr uint32_t P = 10, W = 11;
    root(P);
    begin_epoch(P, 0xa0, 0x70, {W});
    batch(W, 0); // ended, never sent: the worker was killed
    tracker.exited(W);
    EXPECT_TRUE(of(SpanKind::Batch).empty());
    EXPECT_EQ(of(SpanKind::Loader).size(), 2u); // its samples' loading was real
}

namespace {

model::RecordObject holds(uint32_t pid, uint64_t object, uint32_t kind, uint64_t dataset, uint64_t sampler,
                          uint64_t read_ns, const char* cls = "")
{
    model::RecordObject r{};
    r.type = model::kRecordObject;
    r.tgid = r.tid = pid;
    r.ts_ns = read_ns;
    r.object = object;
    r.kind = kind;
    r.dataset = dataset;
    r.sampler = sampler;
    strncpy(r.dataset_class, cls, sizeof(r.dataset_class) - 1);
    return r;
}

} // namespace

// The pass in flight at attach (an iterator first met in next()) joins the DataLoader whose next __iter__
// holds the same dataset and sampler objects; over one dataset, the sampler tells two loaders apart.
TEST_F(BatchTrackerTest, ThePassInFlightAtAttachJoinsTheLoaderHoldingItsDatasetAndSampler)
{
    const uint32_t P = 10;
    root(P);
    const uint64_t DATASET = 0xd0, TRAIN_SAMPLER = 0x51, VAL_SAMPLER = 0x52, OLD_IT = 0x70;
    EXPECT_TRUE(tracker.next_started(P, P, now++, OLD_IT, false)); // unknown: ask what it holds
    tracker.described(holds(P, OLD_IT, model::kObjectIterator, DATASET, VAL_SAMPLER, now++, "ImageFolder"));
    tracker.next_finished(P, P, now - 2, now, false);
    now++;
    next(P, OLD_IT);
    stop_iteration(P, OLD_IT);
    EXPECT_EQ(tracker.stats().count({P, -1}), 1u);
    // the train loader (0), then the val loader (1), each over the same dataset
    for (auto [loader, sampler] : {std::pair{0xa0ul, TRAIN_SAMPLER}, std::pair{0xb0ul, VAL_SAMPLER}}) {
        EXPECT_TRUE(tracker.iter_begin(P, P, loader));
        tracker.described(holds(P, loader, model::kObjectLoader, DATASET, sampler, now++, "ImageFolder"));
        tracker.iter_end(P, P, loader + 1, now++);
        next(P, loader + 1);
        stop_iteration(P, loader + 1);
    }
    EXPECT_TRUE(tracker.iter_begin(P, P, 0xa0)) << "read at every pass: an address may name a new DataLoader";
    tracker.finish();
    ASSERT_EQ(tracker.joins().count(P), 1u);
    EXPECT_EQ(tracker.joins().at(P).loader, 1) << tracker.joins().at(P).reason;
    EXPECT_EQ(tracker.stats().count({P, -1}), 0u);
    const auto& val = tracker.stats().at({P, 1});
    EXPECT_TRUE(val.joined_partial);
    EXPECT_EQ(val.partial_batches, 2u);
    EXPECT_EQ(val.wait_ns.count(), 2u + 1u);
    EXPECT_FALSE(tracker.stats().at({P, 0}).joined_partial);
    EXPECT_EQ(tracker.loader_names().at({P, 1}).dataset_class, "ImageFolder");
}

// Never joined on a guess: two loaders holding the same dataset and sampler, or a reading the iterator may not
// have been alive for, leave the pass in flight a section of its own, with why.
TEST_F(BatchTrackerTest, ThePassInFlightStaysApartWhenItCannotBeTold)
{
    const uint32_t P = 10, Q = 20;
    root(P);
    root(Q);
    // P: two loaders sharing one dataset and one sampler
    tracker.next_started(P, P, now++, 0x70, false);
    tracker.described(holds(P, 0x70, model::kObjectIterator, 0xd0, 0x51, now++));
    tracker.next_finished(P, P, now - 2, now, false);
    now++;
    stop_iteration(P, 0x70);
    for (uint64_t loader : {0xa0ul, 0xb0ul}) {
        tracker.iter_begin(P, P, loader);
        tracker.described(holds(P, loader, model::kObjectLoader, 0xd0, 0x51, now++));
        tracker.iter_end(P, P, loader + 1, now++);
    }
    // Q: its iterator was read after its one next() had ended (the address may have named another object then)
    uint64_t start = now++, end = now++;
    tracker.next_started(Q, Q, start, 0x80, false);
    tracker.described(holds(Q, 0x80, model::kObjectIterator, 0xd1, 0x53, end + 100));
    tracker.next_finished(Q, Q, start, end, false);
    tracker.iter_begin(Q, Q, 0xc0);
    tracker.described(holds(Q, 0xc0, model::kObjectLoader, 0xd1, 0x53, now + 200));
    tracker.iter_end(Q, Q, 0xc1, now + 300);
    // R: a loader at the addresses the pass's freed dataset and sampler had, but of another class (reused)
    const uint32_t R = 30;
    root(R);
    tracker.next_started(R, R, now++, 0x90, false);
    tracker.described(holds(R, 0x90, model::kObjectIterator, 0xd2, 0x54, now++, "Subset"));
    tracker.next_finished(R, R, now - 2, now, false);
    now++;
    stop_iteration(R, 0x90);
    tracker.iter_begin(R, R, 0xe0);
    tracker.described(holds(R, 0xe0, model::kObjectLoader, 0xd2, 0x54, now++, "ImageFolder"));
    tracker.iter_end(R, R, 0xe1, now++);
    // S: the loader holding its objects, and another whose holdings were read only after its __iter__ had ended
    // (they may be the same objects): never joined to the one known
    const uint32_t S = 40;
    root(S);
    tracker.next_started(S, S, now++, 0x100, false);
    tracker.described(holds(S, 0x100, model::kObjectIterator, 0xd3, 0x55, now++));
    tracker.next_finished(S, S, now - 2, now, false);
    now++;
    stop_iteration(S, 0x100);
    tracker.iter_begin(S, S, 0x110);
    tracker.described(holds(S, 0x110, model::kObjectLoader, 0xd3, 0x55, now++));
    tracker.iter_end(S, S, 0x111, now++);
    tracker.iter_begin(S, S, 0x120);
    uint64_t iter_ended = now++;
    tracker.iter_end(S, S, 0x121, iter_ended);
    tracker.described(holds(S, 0x120, model::kObjectLoader, 0xd3, 0x55, iter_ended + 1));
    tracker.finish();
    EXPECT_EQ(tracker.joins().at(S).loader, -1);
    EXPECT_NE(tracker.joins().at(S).reason.find("what DataLoader 1 holds was not read while it ran"),
              std::string::npos) << tracker.joins().at(S).reason;
    EXPECT_EQ(tracker.joins().at(R).loader, -1);
    EXPECT_EQ(tracker.joins().at(P).loader, -1);
    EXPECT_NE(tracker.joins().at(P).reason.find("DataLoaders 0 and 1 hold the same dataset and sampler"),
              std::string::npos);
    EXPECT_EQ(tracker.joins().at(Q).loader, -1);
    EXPECT_NE(tracker.joins().at(Q).reason.find("after its last next() ended"), std::string::npos);
    EXPECT_EQ(tracker.stats().count({P, -1}), 1u);
    EXPECT_EQ(tracker.stats().count({Q, -1}), 1u);
}

// A DataLoader's __iter__ may return before the tracer has read it (the tracer behind its stream): its passes'
// iterators, read at their first next() once a pass in flight was met, tell what it holds instead, trusted where
// a next() of theirs ended after the reading; one read before its pass began is another pass's, not its own.
TEST_F(BatchTrackerTest, APassesIteratorTellsWhatItsLoaderHoldsWhereTheLoaderWasReadLate)
{
    const uint32_t P = 10, Q = 20;
    root(P);
    root(Q);
    const uint64_t DATASET = 0xd0, TRAIN_SAMPLER = 0x51, VAL_SAMPLER = 0x52, OLD_IT = 0x70;
    EXPECT_TRUE(tracker.next_started(P, P, now++, OLD_IT, false));
    tracker.described(holds(P, OLD_IT, model::kObjectIterator, DATASET, TRAIN_SAMPLER, now++, "ImageFolder"));
    tracker.next_finished(P, P, now - 2, now, false);
    now++;
    stop_iteration(P, OLD_IT);
    // the val loader (0), then the train loader (1): each read only after its __iter__ returned
    for (auto [loader, sampler] : {std::pair{0xa0ul, VAL_SAMPLER}, std::pair{0xb0ul, TRAIN_SAMPLER}}) {
        tracker.iter_begin(P, P, loader);
        uint64_t returned = now++;
        tracker.iter_end(P, P, loader + 1, returned);
        tracker.described(holds(P, loader, model::kObjectLoader, DATASET, sampler, returned + 1, "ImageFolder"));
        now += 2;
        uint64_t start = now++;
        EXPECT_TRUE(tracker.next_started(P, P, start, loader + 1, false)) << "its pass's first next(): ask";
        tracker.described(holds(P, loader + 1, model::kObjectIterator, DATASET, sampler, now++, "ImageFolder"));
        tracker.next_finished(P, P, start, now++, false);
        start = now++;
        EXPECT_FALSE(tracker.next_started(P, P, start, loader + 1, false)) << "once a pass";
        tracker.next_finished(P, P, start, now++, false);
        stop_iteration(P, loader + 1);
    }
    // Q: its one later pass's iterator read is stamped before that pass began (an earlier object's): not its own
    tracker.next_started(Q, Q, now++, 0x80, false);
    tracker.described(holds(Q, 0x80, model::kObjectIterator, 0xd1, 0x53, now++));
    tracker.next_finished(Q, Q, now - 2, now, false);
    now++;
    stop_iteration(Q, 0x80);
    tracker.iter_begin(Q, Q, 0xc0);
    uint64_t early = now++;
    tracker.iter_end(Q, Q, 0xc1, now++);
    uint64_t start = now++;
    EXPECT_TRUE(tracker.next_started(Q, Q, start, 0xc1, false));
    tracker.described(holds(Q, 0xc1, model::kObjectIterator, 0xd1, 0x53, early));
    tracker.next_finished(Q, Q, start, now++, false);
    tracker.finish();
    ASSERT_EQ(tracker.joins().count(P), 1u);
    EXPECT_EQ(tracker.joins().at(P).loader, 1) << tracker.joins().at(P).reason;
    EXPECT_TRUE(tracker.stats().at({P, 1}).joined_partial);
    EXPECT_FALSE(tracker.stats().at({P, 0}).joined_partial);
    EXPECT_EQ(tracker.joins().at(Q).loader, -1);
    EXPECT_NE(tracker.joins().at(Q).reason.find("what DataLoader 0 holds was not read while it ran"),
              std::string::npos) << tracker.joins().at(Q).reason;
}

// With no pass in flight at attach, next() asks to read nothing.
TEST_F(BatchTrackerTest, NoIteratorIsReadWithoutAPassInFlight)
{
    const uint32_t P = 10;
    root(P);
    tracker.iter_begin(P, P, 0xa0);
    tracker.iter_end(P, P, 0xa1, now++);
    EXPECT_FALSE(tracker.next_started(P, P, now++, 0xa1, false));
}

TEST_F(BatchTrackerTest, ALoaderCarriesItsFilesSizeWhereTheOpensReturnSaidIt)
{
    constexpr uint32_t P = 10, W0 = 11;
    root(P);
    begin_epoch(P, 0xa0, 0x70, {W0});
    message(W0, W0, LOTUS_MSG_IN, test::pickled_indexed(0), task_pipe(W0));
    now += 2;
    tracker.opened(W0, W0, now++, "/data/a.jpg");
    tracker.open_size(W0, W0, 81234);
    tracker.opened(W0, W0, now++, "/usr/lib/python3/x.py"); // a later open: not the sample's file
    tracker.open_size(W0, W0, 5);
    tracker.sample_started(W0, W0, now++, ++sample_id, 3);
    tracker.sample_finished(W0, W0, now++);
    tracker.opened(W0, W0, now++, "/data/b.jpg"); // its return never said (a record file before event ABI 12)
    tracker.sample_started(W0, W0, now++, ++sample_id, 4);
    tracker.sample_finished(W0, W0, now++);
    tracker.open_size(W0 + 7, W0 + 7, 99); // another thread's: nothing to attach it to
    tracker.getppid(W0, W0, now++);
    send(W0, 0);
    next(P, 0x70, {0});
    auto loaders = of(SpanKind::Loader);
    ASSERT_EQ(loaders.size(), 2u);
    EXPECT_EQ(test::arg_text(loaders[0], "path"), "/data/a.jpg");
    EXPECT_EQ(test::arg_text(loaders[0], "bytes"), "81234");
    EXPECT_EQ(test::arg_text(loaders[1], "path"), "/data/b.jpg");
    EXPECT_EQ(test::arg_text(loaders[1], "bytes"), ""); // unknown: left out
}
