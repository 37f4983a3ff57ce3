// DataLoader semantics (model/batches.h) driven through the engine by synthetic streams: the records a training
// process, its DataLoader workers and their queues produce. No BPF.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>

#include "event_builder.h"
#include "fake_requests.h"
#include "export/report.h"
#include "export/summary.h"
#include "model/engine.h"
#include "model/messages.h"

using namespace lotus;
using model::Span;
using model::SpanKind;

namespace {

constexpr uint64_t ITER = 0x1000, NEXT = 0x2000, INIT = 0x3000, COMPOSE = 0x4000, OP = 0x5000, GETITEM = 0x6000,
                   WORKER_LOOP = 0x7000, WRAP = 0x8000;
constexpr uint64_t T_LOADER = 0x10, T_MPITER = 0x20, T_SPITER = 0x30, T_COMPOSE = 0x40, T_OP = 0x50;
constexpr uint64_t LOADER = 0xa00, LOADER2 = 0xa10;

struct Batches : ::testing::Test {
    model::Rules rules;
    std::vector<Span> spans;
    test::FakeRequests requests{test::slot_resolver(ev)};
    model::Engine engine{rules, [this](const Span& s) { spans.push_back(s); }, &requests};
    test::EventBuilder ev{engine};
    uint64_t now = 1000;

    void describe(uint32_t pid)
    {
        ev.code(pid, ITER, "DataLoader.__iter__", "/x/torch/utils/data/dataloader.py");
        ev.code(pid, NEXT, "_BaseDataLoaderIter.__next__", "/x/torch/utils/data/dataloader.py");
        ev.code(pid, INIT, "_MultiProcessingDataLoaderIter.__init__", "/x/torch/utils/data/dataloader.py");
        ev.code(pid, COMPOSE, "Compose.__call__", "/x/torchvision/transforms/transforms.py");
        ev.code(pid, OP, "ToTensor.__call__", "/x/torchvision/transforms/transforms.py");
        ev.code(pid, GETITEM, "DatasetFolder.__getitem__", "/x/torchvision/datasets/folder.py");
        ev.code(pid, WORKER_LOOP, "_worker_loop", "/x/torch/utils/data/_utils/worker.py");
        ev.code(pid, WRAP, "_wrap", "/x/torch/multiprocessing/spawn.py");
        ev.type(pid, T_LOADER, "DataLoader", {"Generic", "object"});
        ev.type(pid, T_MPITER, "_MultiProcessingDataLoaderIter", {"_BaseDataLoaderIter", "object"});
        ev.type(pid, T_SPITER, "_SingleProcessDataLoaderIter", {"_BaseDataLoaderIter", "object"});
        ev.type(pid, T_COMPOSE, "Compose", {"object"});
        ev.type(pid, T_OP, "ToTensor", {"object"});
    }
    // `for batch in loader` begins: __iter__ forks the workers (fork records inside it) and returns the iterator.
    void begin_epoch(uint32_t pid, uint64_t loader, uint64_t iterator, std::vector<uint32_t> workers)
    {
        ev.entry(pid, pid, now++, 3, ITER, T_LOADER, {}, {}, loader);
        for (auto w : workers)
            ev.proc(LOTUS_EV_FORK, w, pid, pid);
        ev.ret(pid, pid, now++, 3, iterator);
    }
    // A worker's batch: its task read, `samples` samples, the loop's getppid, its feeder thread's send.
    // Pipes: a worker's task queue, and one result queue per iterator.
    static uint64_t task_pipe(uint32_t w) { return 0x7000 + w; }
    static constexpr uint64_t RESULTS = 0x9000;
    void batch(uint32_t w, int64_t idx, int samples = 2, int worker_id = -1)
    {
        ev.msg(w, w, now++, LOTUS_MSG_IN, test::pickled_indexed(idx), task_pipe(w));
        for (int i = 0; i < samples; i++) {
            now += 10;
            std::vector<std::tuple<uint64_t, uint8_t, int64_t>> caps;
            if (worker_id >= 0)
                caps.emplace_back(WORKER_LOOP, 10, worker_id);
            ev.entry(w, w, now, 7, COMPOSE, T_COMPOSE, {{GETITEM, idx * 100 + i}}, caps, 0xc0);
            ev.entry(w, w, now + 2, 8, OP, T_OP, {{COMPOSE, LOTUS_NO_VALUE}}, {}, 0xc1);
            ev.ret(w, w, now + 5, 8);
            ev.ret(w, w, now + 6, 7);
        }
        now += 10;
        ended[{w, idx}] = now;
        ev.getppid(w, w, now++);
    }
    // Worker w's batch idx, made and sent.
    void made(uint32_t w, int64_t idx)
    {
        batch(w, idx);
        send(w, idx);
    }
    std::map<std::pair<uint32_t, int64_t>, uint64_t> ended; // when each (worker, batch)'s loop called getppid
    void send(uint32_t w, int64_t idx, bool stop = false)
    {
        ev.msg(w, w + 1000, now++, LOTUS_MSG_OUT, test::pickled_indexed(idx, stop), RESULTS); // its queue's feeder
    }
    // The training loop's next(): the batch messages it reads meanwhile (-1: none, it had the batch already).
    void next(uint32_t pid, uint64_t iterator, std::vector<int64_t> reads = {}, uint64_t type = T_MPITER)
    {
        ev.entry(pid, pid, now++, 4, NEXT, type, {}, {}, iterator);
        for (auto r : reads)
            ev.msg(pid, pid, now++, LOTUS_MSG_IN, test::pickled_indexed(r), RESULTS);
        ev.ret(pid, pid, now++, 4, 0x77);
    }
    // __iter__ of a persistent loader again: the same iterator, its workers told to resume (each acknowledges
    // through the queue); `inside` runs before it returns.
    void resume(uint32_t pid, uint64_t loader, uint64_t iterator, std::vector<uint32_t> workers,
                const std::function<void()>& inside = {})
    {
        ev.entry(pid, pid, now++, 3, ITER, T_LOADER, {}, {}, loader);
        for (auto w : workers)
            ev.msg(w, w, now++, LOTUS_MSG_IN, test::pickled_resume(), task_pipe(w));
        if (inside)
            inside();
        ev.ret(pid, pid, now++, 3, iterator);
    }
    void stop_iteration(uint32_t pid, uint64_t iterator, uint64_t type = T_MPITER)
    {
        ev.entry(pid, pid, now++, 4, NEXT, type, {}, {}, iterator);
        ev.ret(pid, pid, now++, 4, 0);
    }
    std::vector<Span> of(SpanKind k) const { return test::spans_of(spans, k); }
    // (loader, epoch, batch) of every batch / wait, as their args say ("" where absent).
    static std::vector<std::string> keys(const std::vector<Span>& v)
    {
        std::vector<std::string> out;
        for (const auto& s : v)
            out.push_back(test::arg_text(s, "loader") + "/" + test::arg_text(s, "epoch") + "/" + test::arg_text(s, "batch"));
        return out;
    }
    // Every wait with a flow has exactly one batch with the same flow, of the same (loader, epoch, batch).
    void expect_flows_join_the_same_batch() const
    {
        std::map<uint64_t, const Span*> out;
        for (const auto& s : spans)
            if (s.flow_out)
                out[s.flow_out] = &s;
        for (const auto& w : spans) {
            if (!w.flow_in)
                continue;
            auto b = out.find(w.flow_in);
            ASSERT_NE(b, out.end());
            EXPECT_EQ(keys({*b->second}), keys({w}));
            EXPECT_EQ(b->second->owner, w.owner);
        }
    }
};

} // namespace

TEST(QueueMessages, IndicesMarkersAndOthers)
{
    using model::QueueMessage;
    auto parse = [](const std::string& p) {
        return model::parse_queue_message(reinterpret_cast<const uint8_t*>(p.data()), p.size());
    };
    for (int64_t idx : {0, 5, 255, 256, 40000, 70000, 1 << 30}) {
        auto m = parse(test::pickled_indexed(idx));
        EXPECT_EQ(m.kind, QueueMessage::Indexed) << idx;
        EXPECT_EQ(m.index, idx);
        EXPECT_FALSE(m.stop);
    }
    EXPECT_TRUE(parse(test::pickled_indexed(5)).task); // (5, [1, 2])
    std::string frame0 = std::string("\x80\x04\x95", 3) + std::string(8, '\0');
    EXPECT_TRUE(parse(frame0 + "K\x05]\x94K\x07a\x86.").task);   // (5, [7])
    EXPECT_TRUE(parse(frame0 + "K\x05]\x94(NNe\x86.").task);      // (5, [None, None]): an IterableDataset's
    EXPECT_TRUE(parse(frame0 + "K\x05N\x86.").task);               // (5, None): ... without batching
    EXPECT_TRUE(parse(frame0 + "K\x05K\x07\x86.").task);           // (5, 7): a map-style one's (batch_size=None)
    EXPECT_TRUE(parse(frame0 + "K\x05M\x10\x27\x86.").task);       // (5, 10000)
    EXPECT_FALSE(parse(frame0 + "K\x05]\x94(\x8c torch.multiprocessing.reductions").task); // (5, [tensor...])
    auto stop = parse(test::pickled_indexed(3, true));
    EXPECT_TRUE(stop.stop);
    EXPECT_EQ(stop.index, 3);
    auto cut = test::pickled_indexed(3, true).substr(0, 64); // as captured: the class name cut short
    EXPECT_TRUE(parse(cut).stop);
    EXPECT_EQ(parse(test::pickled_resume()).kind, QueueMessage::Resume);
    // A bare int, a list, a protocol 2 pickle, garbage: not a DataLoader message.
    std::string frame = std::string("\x80\x04\x95", 3) + std::string(8, '\0');
    EXPECT_EQ(parse(frame + "K\x05.").kind, QueueMessage::Other);
    EXPECT_EQ(parse(frame + "]\x94(K\x01" "e.").kind, QueueMessage::Other);
    EXPECT_EQ(parse(std::string("\x80\x02K\x05K\x06\x86q\x00.", 12)).kind, QueueMessage::Other);
    EXPECT_EQ(parse(std::string("\xff\xd8\xff\xe0", 4)).kind, QueueMessage::Other);
    EXPECT_EQ(parse("").kind, QueueMessage::Other);
    std::string negative = frame + "J" + std::string("\xff\xff\xff\xff", 4) + "N\x86.";
    EXPECT_EQ(parse(negative).kind, QueueMessage::Other);
}

TEST_F(Batches, WorkersBatchesWaitsAndFlowsOfOneEpoch)
{
    constexpr uint32_t P = 100, W0 = 101, W1 = 102;
    engine.add_process(P, 0, true);
    describe(P);
    begin_epoch(P, LOADER, 0x77, {W0, W1});
    batch(W0, 0, 2, 0);
    send(W0, 0);
    batch(W1, 1, 2, 1);
    send(W1, 1);
    next(P, 0x77, {0});
    next(P, 0x77, {1});
    batch(W0, 2, 2, 0);
    send(W0, 2);
    next(P, 0x77, {2});
    stop_iteration(P, 0x77);
    auto batches = of(SpanKind::Batch);
    ASSERT_EQ(batches.size(), 3u);
    EXPECT_EQ(keys(batches), (std::vector<std::string>{"0/0/0", "0/0/1", "0/0/2"}));
    EXPECT_EQ(test::arg_text(batches[0], "worker"), "0");
    EXPECT_EQ(test::arg_text(batches[1], "worker"), "1");
    EXPECT_EQ(test::arg_text(batches[0], "samples"), "2");
    auto waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 3u);
    EXPECT_EQ(keys(waits), (std::vector<std::string>{"0/0/0", "0/0/1", "0/0/2"}));
    for (const auto& w : waits)
        EXPECT_NE(w.flow_in, 0u);
    expect_flows_join_the_same_batch();
    // A batch ends at its worker loop's getppid (right after the put), not at its feeder's later send.
    EXPECT_EQ(batches[0].end_ns, ended.at({W0, 0}));
    EXPECT_EQ(batches[2].end_ns, ended.at({W0, 2}));
    auto collates = of(SpanKind::Collate);
    ASSERT_EQ(collates.size(), 3u);
    EXPECT_EQ(collates[1].end_ns, ended.at({W1, 1}));
    EXPECT_EQ(of(SpanKind::Loader).size(), 6u); // one per sample, emitted with its batch
    for (const auto& s : of(SpanKind::Sample)) {
        EXPECT_EQ(s.owner, P);
        EXPECT_EQ(s.loader, 0);
    }
    const auto& st = engine.batches().stats().at({P, 0});
    EXPECT_EQ(st.prepare_ns.count(), 3u);
    EXPECT_EQ(st.wait_ns.count(), 3u);
    EXPECT_EQ(st.delay_ns.count(), 3u);
    EXPECT_EQ(engine.processes().at(W0).owner, P);
    EXPECT_TRUE(engine.processes().at(P).consumer);
    EXPECT_TRUE(engine.processes().at(W1).worker);
}

TEST_F(Batches, OutOfOrderArrivalsAndBatchesReturnedFromTheCache)
{
    constexpr uint32_t P = 100, W0 = 101, W1 = 102;
    engine.add_process(P, 0, true);
    describe(P);
    begin_epoch(P, LOADER, 0x77, {W0, W1});
    made(W1, 1);
    made(W0, 0);
    next(P, 0x77, {1, 0}); // reads 1 (kept), then 0: returns 0
    next(P, 0x77);         // 1 from its cache: no read
    auto waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 2u);
    EXPECT_EQ(test::arg_text(waits[0], "batch"), "0");
    EXPECT_EQ(test::arg_text(waits[0], "out_of_order"), "true");
    EXPECT_EQ(test::arg_text(waits[1], "batch"), "1");
    EXPECT_EQ(test::arg_text(waits[1], "out_of_order"), "false");
    expect_flows_join_the_same_batch();
}

// DataLoader(in_order=False) (torch 2.6+): next() returns each batch as it arrives, a later index first. A batch
// handed over after a later one arrived out of order whether that later one was consumed already or not.
TEST_F(Batches, ArrivalOrderWithInOrderFalse)
{
    constexpr uint32_t P = 100, W0 = 101, W1 = 102;
    engine.add_process(P, 0, true);
    describe(P);
    begin_epoch(P, LOADER, 0x77, {W0, W1});
    made(W1, 1);
    next(P, 0x77, {1}); // returns 1 at once: 0 is not there yet
    made(W1, 3);
    made(W0, 0);
    next(P, 0x77, {3});
    next(P, 0x77, {0});
    made(W0, 2);
    next(P, 0x77, {2});
    made(W0, 4);
    next(P, 0x77, {4});
    stop_iteration(P, 0x77);
    auto waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 5u);
    EXPECT_EQ(keys(waits), (std::vector<std::string>{"0/0/1", "0/0/3", "0/0/0", "0/0/2", "0/0/4"}));
    std::vector<std::string> flags;
    for (const auto& w : waits)
        flags.push_back(test::arg_text(w, "out_of_order"));
    EXPECT_EQ(flags, (std::vector<std::string>{"false", "false", "true", "true", "false"}));
    expect_flows_join_the_same_batch();
    const auto& st = engine.batches().stats().at({P, 0});
    EXPECT_EQ(st.out_of_order, 2u);
    EXPECT_EQ(st.delay_ns.count(), 5u);
}

// pin_memory where an accelerator is: torch's pin-memory thread reads each batch from the result queue and hands
// it to next() through an in-process queue, so next() reads nothing itself.
struct PinThread : Batches {
    static constexpr uint32_t P = 100, PIN = 150, W0 = 101, W1 = 102;
    // The training process begins a pass (iterator 0x77) with workers W0 and W1.
    void start()
    {
        engine.add_process(P, 0, true);
        describe(P);
        begin_epoch(P, LOADER, 0x77, {W0, W1});
    }
    void relay(int64_t idx, bool stop = false)
    {
        ev.msg(P, PIN, now++, LOTUS_MSG_IN, test::pickled_indexed(idx, stop), RESULTS);
    }
    // Worker w's batch idx made, sent, and read by the pin-memory thread.
    void relayed(uint32_t w, int64_t idx)
    {
        made(w, idx);
        relay(idx);
    }
    // The training process's queue feeder thread sending task idx to worker w's index queue.
    void task(uint32_t w, int64_t idx) { ev.msg(P, P + 500, now++, LOTUS_MSG_OUT, test::pickled_indexed(idx), task_pipe(w)); }
    std::vector<std::string> named() const
    {
        std::vector<std::string> out;
        for (const auto& w : of(SpanKind::Wait))
            out.push_back(test::arg_text(w, "epoch") + "/" + test::arg_text(w, "batch"));
        return out;
    }
};

TEST_F(PinThread, InIndexOrderWhateverTheArrivalOrder)
{
    start();
    relayed(W1, 1);
    relayed(W0, 0);
    next(P, 0x77); // 0: in_order=True returns batches in index order, waiting for each
    next(P, 0x77);
    relayed(W0, 2);
    next(P, 0x77);
    stop_iteration(P, 0x77);
    EXPECT_EQ(named(), (std::vector<std::string>{"0/0", "0/1", "0/2"}));
    expect_flows_join_the_same_batch();
    const auto& st = engine.batches().stats().at({P, 0});
    EXPECT_FALSE(st.arrival_order);
    EXPECT_EQ(st.delay_ns.count(), 3u);
}

// in_order=False: next() returns each batch as the thread relays it. Seen when a next() returns before the batch
// next in index order was relayed; the waits named before then in index order are counted where they were wrong,
// and the loader's later passes are named in arrival order from their start.
TEST_F(PinThread, AsTheyArriveOnceSeen)
{
    constexpr uint32_t W2 = 103, W3 = 104;
    start();
    relayed(W1, 1);
    relayed(W0, 0);
    next(P, 0x77); // returned 1 (the first relayed); both had arrived: named 0, wrongly
    next(P, 0x77); // returned 0; named 1, wrongly
    relayed(W1, 3);
    next(P, 0x77); // 2 has not arrived: this is 3, and the loader returns batches as they arrive
    relayed(W0, 2);
    next(P, 0x77);
    stop_iteration(P, 0x77);
    begin_epoch(P, LOADER, 0x78, {W2, W3});
    relayed(W3, 1);
    relayed(W2, 0);
    next(P, 0x78);
    next(P, 0x78);
    stop_iteration(P, 0x78);
    EXPECT_EQ(named(), (std::vector<std::string>{"0/0", "0/1", "0/3", "0/2", "1/1", "1/0"}));
    const auto& st = engine.batches().stats().at({P, 0});
    EXPECT_TRUE(st.arrival_order);
    EXPECT_EQ(st.misnamed, 2u);
    // every wait named in arrival order points to its own batch
    auto waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 6u);
    for (size_t i = 2; i < waits.size(); i++)
        EXPECT_NE(waits[i].flow_in, 0u) << i;
    expect_flows_join_the_same_batch();
}

// A pin-memory thread relays what the workers sent of a pass the loop left early after they sent batches of the
// next pass (persistent workers): each message is of the pass it was sent in, in the pipe's order.
TEST_F(PinThread, ALeftPassesLastBatchesRelayedInTheNextOne)
{
    start();
    relayed(W1, 1);
    next(P, 0x77); // returned before 0 came: in_order=False, this is 1
    batch(W0, 0);  // the loop breaks; 0 is made
    resume(P, LOADER, 0x77, {W0, W1}, [&] { send(W0, 0); }); // (its feeder, after the worker began the new pass)
    made(W1, 1); // the new pass's 1
    relay(0);    // the old pass's 0
    relay(1);
    next(P, 0x77);
    EXPECT_EQ(named(), (std::vector<std::string>{"0/1", "1/1"}));
    expect_flows_join_the_same_batch();
}

// An IterableDataset: a worker whose data ran out sends an end-of-data marker for one task and nothing for the
// tasks it had besides; next() in index order skips both. Named by the lowest relayed batch not returned yet.
TEST_F(PinThread, IterableDatasetSkipsTheIndicesThatNeverCome)
{
    start();
    relayed(W0, 0);
    batch(W1, 1, 0); // its data ran out: an end-of-data marker for task 1, nothing for its task 3
    send(W1, 1, true);
    relay(1, true);
    next(P, 0x77);
    relayed(W0, 2);
    next(P, 0x77);
    relayed(W0, 4);
    next(P, 0x77);
    stop_iteration(P, 0x77);
    EXPECT_EQ(named(), (std::vector<std::string>{"0/0", "0/2", "0/4"}));
    EXPECT_FALSE(engine.batches().stats().at({P, 0}).arrival_order);
    expect_flows_join_the_same_batch();
}

// A loop that never waits: the thread has relayed both batches before next() returns, so no next() returns early.
// in_order=True sends each new task to the workers in turn whatever it consumed; in_order=False sends it to the
// worker whose batch it took, out of turn once it took a later batch first: seen there, one wait late.
TEST_F(PinThread, TasksInTurnOrOutOfTurn)
{
    for (bool in_order : {true, false}) {
        SCOPED_TRACE(in_order);
        spans.clear();
        uint32_t w0 = W0 + (in_order ? 0 : 10), w1 = W1 + (in_order ? 0 : 10);
        uint64_t it = in_order ? 0x77 : 0x78, loader = in_order ? LOADER : LOADER2;
        if (in_order) {
            engine.add_process(P, 0, true);
            describe(P);
        }
        begin_epoch(P, loader, it, {w0, w1});
        for (int64_t i = 0; i < 4; i++) // the prefetch, in turn
            task(i % 2 ? w1 : w0, i);
        relayed(w1, 1);
        relayed(w0, 0);
        next(P, it); // in order: 0; as they arrive: 1, named 0 (wrongly) until seen
        task(in_order ? w0 : w1, 4);
        next(P, it); // in order: 1; as they arrive: 0
        task(w1, 5);
        relayed(w1, 3);
        relayed(w0, 2);
        next(P, it);
        next(P, it);
        stop_iteration(P, it);
        const auto& st = engine.batches().stats().at({P, in_order ? 0 : 1});
        if (in_order) {
            EXPECT_EQ(named(), (std::vector<std::string>{"0/0", "0/1", "0/2", "0/3"}));
            EXPECT_FALSE(st.arrival_order);
        } else {
            EXPECT_EQ(named(), (std::vector<std::string>{"0/0", "0/0", "0/3", "0/2"}));
            EXPECT_TRUE(st.arrival_order);
            EXPECT_EQ(st.misnamed, 1u);
        }
    }
}

TEST_F(Batches, EveryEpochNewWorkersOrPersistentOnes)
{
    constexpr uint32_t P = 100;
    engine.add_process(P, 0, true);
    describe(P);
    // Two epochs with new workers each (their own iterators), then a persistent loader over two epochs.
    for (uint32_t e = 0; e < 2; e++) {
        uint32_t w = 200 + e;
        begin_epoch(P, LOADER, 0x70 + e, {w});
        made(w, 0);
        next(P, 0x70 + e, {0});
        stop_iteration(P, 0x70 + e);
    }
    constexpr uint32_t PW = 300;
    begin_epoch(P, LOADER2, 0x90, {PW});
    made(PW, 0);
    next(P, 0x90, {0});
    stop_iteration(P, 0x90);
    resume(P, LOADER2, 0x90, {PW});
    made(PW, 0);
    next(P, 0x90, {0});
    EXPECT_EQ(keys(of(SpanKind::Batch)), (std::vector<std::string>{"0/0/0", "0/1/0", "1/0/0", "1/1/0"}));
    EXPECT_EQ(keys(of(SpanKind::Wait)), keys(of(SpanKind::Batch)));
    expect_flows_join_the_same_batch();
    EXPECT_EQ(engine.processes().at(PW).loader, 1);
}

// A loop that leaves a pass of a persistent loader early: the next __iter__ reads what the workers still sent of
// it and drops it (torch's _reset), on the loop's own thread. Those reads are neither this pass's nor a relay.
TEST_F(Batches, PersistentIteratorLeftMidPass)
{
    constexpr uint32_t P = 100, W0 = 300, W1 = 301;
    engine.add_process(P, 0, true);
    describe(P);
    begin_epoch(P, LOADER, 0x90, {W0, W1});
    made(W0, 0);
    next(P, 0x90, {0});
    made(W1, 1);
    next(P, 0x90, {1});
    batch(W1, 3); // the loop breaks: batch 3 is never consumed
    resume(P, LOADER, 0x90, {W0, W1}, [&] {
        send(W1, 3); // its queue's feeder thread, after the worker began the new pass
        ev.msg(P, P, now++, LOTUS_MSG_IN, test::pickled_indexed(3), RESULTS); // read and dropped
    });
    made(W1, 1);
    made(W0, 0);
    next(P, 0x90, {1, 0}); // 0, with 1 kept
    next(P, 0x90);         // 1, read before
    EXPECT_EQ(keys(of(SpanKind::Wait)), (std::vector<std::string>{"0/0/0", "0/0/1", "0/1/0", "0/1/1"}));
    expect_flows_join_the_same_batch();
    EXPECT_FALSE(engine.batches().stats().at({P, 0}).arrival_order);
}

TEST_F(Batches, IterableDatasetEndOfDataMarkersAreSkipped)
{
    constexpr uint32_t P = 100, W0 = 101, W1 = 102;
    engine.add_process(P, 0, true);
    describe(P);
    begin_epoch(P, LOADER, 0x77, {W0, W1});
    batch(W0, 0, 0);
    send(W0, 0);
    batch(W1, 1, 0, -1);
    send(W1, 1, true); // W1's data ran out: index 1 is no batch
    batch(W0, 2, 0);
    send(W0, 2);
    next(P, 0x77); // pin_memory: the training loop reads no message itself
    next(P, 0x77);
    EXPECT_EQ(keys(of(SpanKind::Batch)), (std::vector<std::string>{"0/0/0", "0/0/2"}));
    EXPECT_EQ(keys(of(SpanKind::Wait)), (std::vector<std::string>{"0/0/0", "0/0/2"}));
    expect_flows_join_the_same_batch();
}

TEST_F(Batches, AttachedMidEpochIdsAreLeftOutUntilKnownNeverGuessed)
{
    // Tracing began mid-epoch: the iterator and workers exist; the first batches were consumed before.
    constexpr uint32_t P = 100, W0 = 101;
    engine.add_process(P, 0, true);
    engine.add_process(W0, P, false);
    describe(P);
    describe(W0); // (a process alive when tracing began is its own role space)
    // A sample of the batch the worker was preparing when tracing began: reported, its batch is not.
    ev.entry(W0, W0, now++, 7, COMPOSE, T_COMPOSE, {{GETITEM, 1}}, {}, 0xc0);
    ev.ret(W0, W0, now++, 7);
    ev.getppid(W0, W0, now++);
    send(W0, 5);
    next(P, 0x77);      // from its cache: which batch is unknown
    made(W0, 6);
    next(P, 0x77, {6}); // it read batch 6's message: batch 6
    next(P, 0x77);      // then 7 (counted from the one known)
    auto waits = of(SpanKind::Wait);
    ASSERT_EQ(waits.size(), 3u);
    EXPECT_EQ(test::arg_text(waits[0], "batch"), "");
    EXPECT_EQ(test::arg_text(waits[1], "batch"), "6");
    EXPECT_EQ(test::arg_text(waits[2], "batch"), "7");
    for (const auto& w : waits) {
        EXPECT_EQ(test::arg_text(w, "epoch"), ""); // which epoch this is was not seen
        EXPECT_EQ(w.flow_in, 0u);       // the worker's epoch is unknown: no arrow rather than a guessed one
    }
    auto batches = of(SpanKind::Batch);
    ASSERT_EQ(batches.size(), 1u);
    EXPECT_EQ(keys(batches), (std::vector<std::string>{"//6"}));
    EXPECT_EQ(of(SpanKind::Sample).size(), 3u);
    const auto& st = engine.batches().stats().at({P, -1});
    EXPECT_EQ(st.unnamed, 1u);
    EXPECT_EQ(st.unmatched, 2u);
    // Neither their delay nor their arrival order is known: left out, not "0 ms" and "in order".
    for (const auto& w : waits) {
        EXPECT_EQ(test::arg_text(w, "delay_ms"), "");
        EXPECT_EQ(test::arg_text(w, "out_of_order"), "");
    }
    EXPECT_TRUE(st.delay_ns.empty());
    EXPECT_EQ(st.out_of_order, 0u);
    auto printed = [&] {
        exporter::Summary summary;
        auto report = exporter::summarize_batches(engine.batches(), engine.processes(), summary, 2);
        char buf[8192] = {};
        FILE* f = fmemopen(buf, sizeof(buf) - 1, "w");
        exporter::print_report(f, exporter::build_report({summary, report, engine.processes(), {}, {}}));
        fclose(f);
        return std::string(buf);
    };
    std::string text = printed();
    EXPECT_NE(text.find("batches consumed by the training loop: 3;"), std::string::npos) << text;
    EXPECT_EQ(text.find("out of order"), std::string::npos) << text;
    EXPECT_EQ(text.find("from a batch ready to its use"), std::string::npos) << text;
    // The next epoch is known from its start.
    stop_iteration(P, 0x77);
    begin_epoch(P, LOADER, 0x78, {102});
    made(102, 0);
    next(P, 0x78, {0});
    EXPECT_EQ(keys({of(SpanKind::Wait).back()}), (std::vector<std::string>{"0/0/0"}));
    EXPECT_NE(of(SpanKind::Wait).back().flow_in, 0u);
    EXPECT_EQ(test::arg_text(of(SpanKind::Wait).back(), "out_of_order"), "false");
    // Its section (DataLoader 0) has them; the first epoch's still has none.
    text = printed();
    auto section = text.find("DataLoader 0 of main");
    ASSERT_NE(section, std::string::npos) << text;
    EXPECT_EQ(text.rfind("out of order", section), std::string::npos) << text;
    EXPECT_NE(text.find("arrived out of order 0 %", section), std::string::npos) << text;
    EXPECT_NE(text.find("from a batch ready to its use, ms:", section), std::string::npos) << text;
    EXPECT_EQ(text.find("whose hand-over was seen"), std::string::npos) << text;
    expect_flows_join_the_same_batch();
}

TEST_F(Batches, WorkersRunningBeforeTracingAreLinkedThroughTheirQueues)
{
    // Attached mid-epoch to a job whose workers a forkserver made: no fork record names their training process,
    // no __iter__ their epoch. The pipes do: the training process writes their tasks, and its next() reads
    // their batches.
    constexpr uint32_t P = 100, FS = 150, W0 = 151;
    engine.add_process(P, 0, true);
    engine.add_process(FS, P, false);
    engine.add_process(W0, FS, false);
    describe(P);
    describe(W0);
    ev.msg(P, P + 7, now++, LOTUS_MSG_OUT, test::pickled_indexed(6), task_pipe(W0)); // P's queue feeder
    batch(W0, 6);
    EXPECT_EQ(engine.processes().at(W0).owner, P);
    send(W0, 6); // before the training loop read anything of that queue: its epoch is not known yet
    next(P, 0x77, {6});
    batch(W0, 7);
    send(W0, 7); // the queue the training loop reads in that epoch's next(): this epoch's batch
    next(P, 0x77);
    auto batches = of(SpanKind::Batch), waits = of(SpanKind::Wait);
    ASSERT_EQ(batches.size(), 2u);
    ASSERT_EQ(waits.size(), 2u);
    EXPECT_EQ(waits[0].flow_in, 0u);
    EXPECT_NE(waits[1].flow_in, 0u);
    EXPECT_EQ(waits[1].flow_in, batches[1].flow_out);
    EXPECT_EQ(keys({batches[1]}), keys({waits[1]}));
    expect_flows_join_the_same_batch();
    for (const auto& s : of(SpanKind::Sample))
        EXPECT_EQ(s.owner, P);
}

TEST_F(Batches, TwoRanksKeepTheirOwnLoadersEpochsAndBatches)
{
    // torch.multiprocessing.spawn: the launcher's two children each train with a DataLoader of one worker.
    constexpr uint32_t L = 100, A = 110, B = 120, WA = 111, WB = 121;
    engine.add_process(L, 0, true);
    describe(L);
    ev.proc(LOTUS_EV_FORK, A, L, L);
    ev.proc(LOTUS_EV_FORK, B, L, L);
    // Their ranks, captured from torch.multiprocessing.spawn's _wrap(fn, i, ...) up their stacks.
    ev.entry(A, A, now++, 3, ITER, T_LOADER, {}, {{WRAP, 10, 0}}, LOADER);
    ev.proc(LOTUS_EV_FORK, WA, A, A);
    ev.entry(B, B, now++, 3, ITER, T_LOADER, {}, {{WRAP, 10, 1}}, LOADER); // same address: another process
    ev.proc(LOTUS_EV_FORK, WB, B, B);
    ev.ret(A, A, now++, 3, 0x77);
    ev.ret(B, B, now++, 3, 0x77);
    for (int64_t i = 0; i < 2; i++) {
        batch(WA, i);
        batch(WB, i);
        ev.msg(WB, WB + 1000, now++, LOTUS_MSG_OUT, test::pickled_indexed(i), 0x9100);
        ev.msg(WA, WA + 1000, now++, LOTUS_MSG_OUT, test::pickled_indexed(i), 0x9200);
        ev.entry(B, B, now++, 4, NEXT, T_MPITER, {}, {}, 0x77);
        ev.msg(B, B, now++, LOTUS_MSG_IN, test::pickled_indexed(i), 0x9100);
        ev.ret(B, B, now++, 4, 0x55);
        ev.entry(A, A, now++, 4, NEXT, T_MPITER, {}, {}, 0x77);
        ev.msg(A, A, now++, LOTUS_MSG_IN, test::pickled_indexed(i), 0x9200);
        ev.ret(A, A, now++, 4, 0x55);
    }
    auto batches = of(SpanKind::Batch), waits = of(SpanKind::Wait);
    ASSERT_EQ(batches.size(), 4u);
    ASSERT_EQ(waits.size(), 4u);
    expect_flows_join_the_same_batch();
    for (const auto& w : waits) {
        EXPECT_NE(w.flow_in, 0u);
        EXPECT_EQ(w.owner, w.pid);
    }
    EXPECT_EQ(engine.processes().at(WA).owner, A);
    EXPECT_EQ(engine.processes().at(WB).owner, B);
    EXPECT_EQ(model::process_label(engine.processes(), A), "rank 0");
    EXPECT_EQ(model::process_label(engine.processes(), B), "rank 1");
    EXPECT_EQ(model::process_label(engine.processes(), WB), "rank 1 worker ?");
    EXPECT_EQ(engine.batches().stats().at({A, 0}).wait_ns.count(), 2u);
    EXPECT_EQ(engine.batches().stats().at({B, 0}).wait_ns.count(), 2u);
    EXPECT_EQ(engine.batches().loops().size(), 2u);
}

TEST_F(Batches, NoWorkersNextBuildsTheBatch)
{
    constexpr uint32_t P = 100;
    engine.add_process(P, 0, true);
    describe(P);
    begin_epoch(P, LOADER, 0x77, {});
    for (int i = 0; i < 2; i++) {
        ev.entry(P, P, now++, 4, NEXT, T_SPITER, {}, {}, 0x77);
        ev.entry(P, P, now++, 9, COMPOSE, T_COMPOSE, {{GETITEM, i}}, {}, 0xc0);
        ev.ret(P, P, now++, 9);
        ev.ret(P, P, now++, 4, 0x55);
    }
    stop_iteration(P, 0x77, T_SPITER);
    EXPECT_EQ(keys(of(SpanKind::Batch)), (std::vector<std::string>{"0/0/0", "0/0/1"}));
    EXPECT_EQ(keys(of(SpanKind::Wait)), (std::vector<std::string>{"0/0/0", "0/0/1"}));
    EXPECT_EQ(test::arg_text(of(SpanKind::Wait)[0], "delay_ms"), "0.000");
    EXPECT_EQ(of(SpanKind::Sample)[0].loader, 0);
}

TEST_F(Batches, TwoDataLoadersOfOneProcessAreToldApart)
{
    constexpr uint32_t P = 100;
    engine.add_process(P, 0, true);
    describe(P);
    begin_epoch(P, LOADER, 0x77, {201});
    made(201, 0);
    next(P, 0x77, {0});
    stop_iteration(P, 0x77);
    begin_epoch(P, LOADER2, 0x78, {202}); // a validation loader
    batch(202, 0, 3);
    send(202, 0);
    next(P, 0x78, {0});
    EXPECT_EQ(keys(of(SpanKind::Batch)), (std::vector<std::string>{"0/0/0", "1/0/0"}));
    expect_flows_join_the_same_batch();
    EXPECT_EQ(engine.processes().at(202).loader, 1);
    size_t val_samples = 0;
    for (const auto& s : of(SpanKind::Sample))
        val_samples += s.loader == 1;
    EXPECT_EQ(val_samples, 3u);
    EXPECT_EQ(engine.batches().stats().size(), 2u);
}

TEST_F(Batches, ABatchWhoseWorkerSentNothingIsNotInventedAndSocketsAreNotQueues)
{
    constexpr uint32_t P = 100, W = 101;
    engine.add_process(P, 0, true);
    describe(P);
    begin_epoch(P, LOADER, 0x77, {W});
    // a message of the same shape on a socket (multiprocessing's resource sharer): not a task
    ev.msg(W, W, now++, LOTUS_MSG_IN, test::pickled_indexed(9), 8, 0140000 /* S_IFSOCK */);
    batch(W, 0);
    ev.proc(LOTUS_EV_EXIT, W, 0); // killed before its send
    EXPECT_TRUE(of(SpanKind::Batch).empty());
    EXPECT_EQ(of(SpanKind::Loader).size(), 2u); // its samples' loading was real
}

TEST_F(Batches, SamplesOfAWorkerWhoseTrainingProcessIsNotKnownYetWaitForIt)
{
    // Tracing began while a worker (forked before) was mid-batch: nothing names its training process until its
    // next task. Its samples meanwhile are counted with that process's DataLoader once it is known.
    constexpr uint32_t P = 100, W0 = 101;
    engine.add_process(P, 0, true);
    engine.add_process(W0, P, false);
    describe(P);
    describe(W0);
    for (int i = 0; i < 3; i++) {
        ev.entry(W0, W0, now++, 7, COMPOSE, T_COMPOSE, {{GETITEM, i}}, {}, 0xc0);
        ev.ret(W0, W0, now++, 7);
    }
    ev.getppid(W0, W0, now++);
    EXPECT_TRUE(of(SpanKind::Sample).empty()); // held
    next(P, 0x77);                               // the training loop shows itself
    ev.msg(P, P + 7, now++, LOTUS_MSG_OUT, test::pickled_indexed(9), task_pipe(W0));
    batch(W0, 9);
    auto samples = of(SpanKind::Sample);
    ASSERT_EQ(samples.size(), 5u);
    for (const auto& s : samples)
        EXPECT_EQ(s.owner, P);
    engine.finish();
    EXPECT_EQ(of(SpanKind::Sample).size(), 5u);
}
