// --trainer-calls in the engine (model/engine_object_calls.cpp): what it asks capture at a training process's
// next() calls, and what the stream's RecordObjectCalls say of the process. No BPF.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "event_builder.h"
#include "fake_requests.h"
#include "model/engine.h"

using namespace lotus;

namespace {

constexpr uint64_t T_MPITER = 0x20, T_SPITER = 0x30, T_COMPOSE = 0x40, T_OP = 0x50;
constexpr uint32_t PID = 10;

struct TrainerCalls : ::testing::Test {
    model::Rules rules;
    std::vector<model::Span> spans;
    test::FakeRequests requests;
    model::Engine engine{rules, [this](const model::Span& s) { spans.push_back(s); }, &requests};
    test::EventBuilder ev{engine};
    std::vector<std::pair<uint32_t, bool>> asked;
    uint64_t now = 1000;

    void SetUp() override
    {
        engine.add_process(PID, 1, true);
        ev.type(PID, T_MPITER, "_MultiProcessingDataLoaderIter", {"_BaseDataLoaderIter", "object"});
        ev.type(PID, T_SPITER, "_SingleProcessDataLoaderIter", {"_BaseDataLoaderIter", "object"});
        ev.type(PID, T_COMPOSE, "Compose", {"object"});
        ev.type(PID, T_OP, "Normalize", {"object"});
    }
    void sink() { requests.calls = [this](uint32_t tgid, bool on) { asked.emplace_back(tgid, on); }; }
    // next() of an iterator of a loader with workers (T_MPITER) or without (T_SPITER), at slot_tp_iternext.
    void next(uint64_t type, uint64_t iterator = 0xb0)
    {
        ev.entry(PID, PID, now++, 4, LOTUS_SLOT_NEXT, type, {}, {}, iterator);
        ev.ret(PID, PID, now++, 4, 0x77);
    }
    void switched(bool on, uint64_t ts)
    {
        model::RecordObjectCalls r{model::kRecordObjectCalls, PID, PID, 0, ts, on ? 1u : 0u, model::kCallsAuto};
        engine.consume(&r, sizeof(r));
    }
    const model::ProcessInfo& info() const { return engine.processes().at(PID); }
};

TEST_F(TrainerCalls, AutoAsksOnceAtTheFirstNextOfALoaderWithWorkers)
{
    sink();
    next(T_MPITER);
    next(T_MPITER);
    next(T_MPITER, 0xb8);
    EXPECT_EQ(asked, (std::vector<std::pair<uint32_t, bool>>{{PID, false}}));
}

TEST_F(TrainerCalls, ALoaderWithoutWorkersAsksForTheProbeBackForGood)
{
    sink();
    next(T_MPITER);
    next(T_SPITER, 0xc0);
    next(T_SPITER, 0xc0);
    next(T_MPITER);
    EXPECT_EQ(asked, (std::vector<std::pair<uint32_t, bool>>{{PID, false}, {PID, true}}));
}

TEST_F(TrainerCalls, ALoaderWithoutWorkersBeforeAnyWithWorkersAsksNothing)
{
    sink();
    next(T_SPITER, 0xc0); // (a sanity pass before training: the probe is there, and stays until...)
    EXPECT_TRUE(asked.empty());
    next(T_MPITER); // ...the training loader
    EXPECT_EQ(asked, (std::vector<std::pair<uint32_t, bool>>{{PID, false}}));
}

TEST_F(TrainerCalls, ANewProgramInTheProcessGetsTheProbeBack)
{
    sink();
    next(T_MPITER);
    ev.proc(LOTUS_EV_EXEC, PID, 1, PID);
    EXPECT_EQ(asked, (std::vector<std::pair<uint32_t, bool>>{{PID, false}, {PID, true}}));
}

TEST_F(TrainerCalls, OnAsksNothingAndOffAsksAtAnyLoader)
{
    sink();
    requests.mode = model::TrainerCalls::On;
    next(T_MPITER);
    EXPECT_TRUE(asked.empty());
    std::vector<std::pair<uint32_t, bool>> asked2;
    test::FakeRequests off;
    off.calls = [&](uint32_t tgid, bool on) { asked2.emplace_back(tgid, on); };
    off.mode = model::TrainerCalls::Off;
    model::Engine other{rules, {}, &off};
    test::EventBuilder ev2{other};
    ev2.type(PID, T_SPITER, "_SingleProcessDataLoaderIter", {"_BaseDataLoaderIter", "object"});
    ev2.entry(PID, PID, 1, 4, LOTUS_SLOT_NEXT, T_SPITER, {}, {}, 0xc0);
    ev2.ret(PID, PID, 2, 4);
    ev2.entry(PID, PID, 3, 4, LOTUS_SLOT_NEXT, T_SPITER, {}, {}, 0xc0);
    EXPECT_EQ(asked2, (std::vector<std::pair<uint32_t, bool>>{{PID, false}}));
}

TEST_F(TrainerCalls, WhereCaptureCannotSwitchTheProcessIsNotedAsKeptProbed)
{
    next(T_MPITER);
    EXPECT_EQ(info().calls_kept_ns, 1000u);
    EXPECT_EQ(info().calls_off_ns, 0u);
}

TEST_F(TrainerCalls, TheRecordsSayFromWhenUntilWhenAndTheBatchesBegunUnprobed)
{
    sink();
    next(T_MPITER);
    next(T_SPITER, 0xc0); // asked back; the probe is not back yet, nor even gone
    EXPECT_EQ(info().batches_unprobed, 0u);
    uint64_t began = now++;
    next(T_SPITER, 0xc0); // begun after the close began, read before its record: unprobed all the same
    switched(false, began); // (stamped with when its close began)
    EXPECT_EQ(info().batches_unprobed, 1u);
    next(T_SPITER, 0xc0);
    next(T_SPITER, 0xc0);
    uint64_t back = now++;
    next(T_SPITER, 0xc0); // begun after the attach returned, read before its record: probed
    switched(true, back);
    next(T_SPITER, 0xc0);
    EXPECT_EQ(info().calls_off_ns, began);
    EXPECT_EQ(info().calls_on_ns, back);
    EXPECT_EQ(info().batches_unprobed, 3u);
    EXPECT_EQ(info().calls_off_mode, model::kCallsAuto);
}

TEST_F(TrainerCalls, CallsOpenWhenTheProbeWentAreCutNotEmitted)
{
    sink();
    next(T_MPITER);
    // The loop calls a pipeline on a batch (a sample of the training process) and one of its ops...
    ev.entry(PID, PID, now++, 4, LOTUS_SLOT_CALL, T_COMPOSE, {}, {}, 0xd0);
    ev.entry(PID, PID, now++, 5, LOTUS_SLOT_CALL, T_OP, {}, {}, 0xd1);
    // ...and the probe goes before either returns.
    switched(false, now++);
    EXPECT_EQ(info().calls_cut, 2u);
    ev.ret(PID, PID, now++, 4); // (a return would not come; one that did is of nothing open)
    engine.finish();
    EXPECT_TRUE(test::spans_of(spans, model::SpanKind::Sample).empty());
    EXPECT_TRUE(test::spans_of(spans, model::SpanKind::Op).empty());
    EXPECT_EQ(engine.counters().incomplete, 0u);
}

TEST_F(TrainerCalls, ANextInsideACutCallStaysToReturn)
{
    sink();
    next(T_MPITER);
    // An op of a pipeline called by the loop draws from a loader itself: its next() is probed by the other link.
    ev.entry(PID, PID, now++, 4, LOTUS_SLOT_CALL, T_COMPOSE, {}, {}, 0xd0);
    ev.entry(PID, PID, now++, 5, LOTUS_SLOT_CALL, T_OP, {}, {}, 0xd1);
    ev.entry(PID, PID, now++, 6, LOTUS_SLOT_NEXT, T_MPITER, {}, {}, 0xb0);
    switched(false, now++);
    EXPECT_EQ(info().calls_cut, 2u);
    size_t waits = test::spans_of(spans, model::SpanKind::Wait).size();
    ev.ret(PID, PID, now++, 6, 0x77);
    EXPECT_EQ(test::spans_of(spans, model::SpanKind::Wait).size(), waits + 1);
}

} // namespace
