// The reconstruction engine driven by synthetic event streams: no BPF involved.
#include <gtest/gtest.h>

#include "event_builder.h"
#include "fake_requests.h"
#include "model/batches.h"
#include "model/engine.h"

using namespace lotus;
using model::Span;
using model::SpanKind;

namespace {

constexpr uint32_t P = 100, W = 101;
constexpr uint64_t COMPOSE = 0x1000, GETITEM = 0x2000, CALL_IMPL = 0x3000, TOTENSOR_CALL = 0x4000,
                   WORKER_LOOP = 0x5000, FORWARD = 0x6000, UNDESCRIBED = 0x7000;
constexpr uint64_t T_CROP = 0x10, T_TOTENSOR = 0x20, T_COMPOSE = 0x30;

struct Engine : ::testing::Test {
    model::Rules rules;
    std::vector<Span> spans;
    std::vector<std::tuple<uint32_t, uint64_t, uint32_t, uint32_t>> roles; // tgid, code, flags, space
    std::map<uint64_t, uint32_t> type_flags;                               // type -> LOTUS_TYPE_* told to BPF
    // The role sink resolves captured locals as the session would from co_localsplusnames; they reach the
    // engine as a RecordSlots right after the CODE record.
    test::FakeRequests requests{
        [this](uint32_t t, uint32_t space, uint64_t c, uint64_t, const model::CodeRole& r) {
            std::vector<uint8_t> slots;
            for (const auto& name : r.capture_locals)
                slots.push_back(name == "worker_id" ? 10 : 26);
            if (!slots.empty())
                ev.resolved.emplace_back(t, c, slots);
            roles.emplace_back(t, c, r.flags, space);
        },
        [this](uint32_t, uint64_t type, uint64_t, uint32_t flags) { type_flags[type] = flags; }};
    model::Engine engine{rules, [this](const Span& s) { spans.push_back(s); }, &requests};
    test::EventBuilder ev{engine};

    void describe(uint32_t tgid)
    {
        ev.code(tgid, COMPOSE, "Compose.__call__", "/x/torchvision/transforms/transforms.py");
        ev.code(tgid, GETITEM, "DatasetFolder.__getitem__");
        ev.code(tgid, CALL_IMPL, "Module._call_impl");
        ev.code(tgid, TOTENSOR_CALL, "ToTensor.__call__");
        ev.code(tgid, FORWARD, "RandomResizedCrop.forward");
        ev.code(tgid, WORKER_LOOP, "_worker_loop", "/usr/lib/python3/dist-packages/torch/utils/data/_utils/worker.py");
        ev.type(tgid, T_CROP, "RandomResizedCrop");
        ev.type(tgid, T_TOTENSOR, "ToTensor");
        ev.type(tgid, T_COMPOSE, "Compose");
    }
    // One sample: Compose at depth d with two ops, timestamps from t.
    void sample(uint32_t tgid, uint32_t tid, uint64_t t, uint32_t d, int64_t index)
    {
        ev.entry(tgid, tid, t, d, COMPOSE, T_COMPOSE, {{GETITEM, index}});
        ev.entry(tgid, tid, t + 10, d + 1, CALL_IMPL, T_CROP, {{COMPOSE, LOTUS_NO_VALUE}});
        ev.entry(tgid, tid, t + 12, d + 2, FORWARD, T_CROP, {{CALL_IMPL, LOTUS_NO_VALUE}});
        ev.ret(tgid, tid, t + 50, d + 2);
        ev.ret(tgid, tid, t + 60, d + 1);
        ev.entry(tgid, tid, t + 70, d + 1, TOTENSOR_CALL, T_TOTENSOR, {{COMPOSE, LOTUS_NO_VALUE}});
        ev.ret(tgid, tid, t + 90, d + 1);
        ev.ret(tgid, tid, t + 100, d);
    }
    std::vector<Span> of(SpanKind k) const { return test::spans_of(spans, k); }
};

} // namespace

TEST_F(Engine, SampleWithOpsNestsAndNamesOpsAfterTheirClass)
{
    describe(P);
    sample(P, P, 1000, 3, 42);
    EXPECT_TRUE(spans.empty()); // complete once its thread goes on to another item, or the stream ends
    engine.finish();
    ASSERT_EQ(spans.size(), 3u);
    EXPECT_EQ(spans.back().kind, SpanKind::Sample); // ops are emitted with their sample
    auto ops = of(SpanKind::Op);
    ASSERT_EQ(ops.size(), 2u);
    EXPECT_EQ(ops[0].name, "RandomResizedCrop");
    EXPECT_EQ(ops[0].start_ns, 1010u);
    EXPECT_EQ(ops[0].end_ns, 1060u);
    EXPECT_EQ(ops[1].name, "ToTensor");
    auto samples = of(SpanKind::Sample);
    ASSERT_EQ(samples.size(), 1u);
    EXPECT_EQ(samples[0].sample, 42);
    EXPECT_EQ(samples[0].start_ns, 1000u);
    EXPECT_EQ(samples[0].end_ns, 1100u);
    for (const auto& op : ops) {
        EXPECT_EQ(op.sample, 42);
        EXPECT_EQ(op.sample_id, samples[0].sample_id);
        EXPECT_GE(op.start_ns, samples[0].start_ns);
        EXPECT_LE(op.end_ns, samples[0].end_ns);
    }
    EXPECT_EQ(engine.processes().at(P).samples, 1u);
    EXPECT_TRUE(engine.pipeline_seen());
}

TEST_F(Engine, RolesAreReportedForEveryDescribedCode)
{
    describe(P);
    ASSERT_EQ(roles.size(), 6u);
    auto flags_of = [&](uint64_t code) {
        for (auto& [t, c, f, space] : roles)
            if (c == code)
                return f;
        return 0u;
    };
    // A call of an object: BPF emits it (and the calls it makes) when self's class is a pipeline class.
    EXPECT_TRUE(flags_of(COMPOSE) & LOTUS_ROLE_SELF_PIPELINE);
    EXPECT_TRUE(flags_of(CALL_IMPL) & LOTUS_ROLE_SELF_PIPELINE);
    EXPECT_TRUE(flags_of(CALL_IMPL) & LOTUS_ROLE_SKIP);
    EXPECT_FALSE(flags_of(GETITEM) & LOTUS_ROLE_SELF_PIPELINE);
    EXPECT_TRUE(flags_of(WORKER_LOOP) & LOTUS_ROLE_CAPTURE);
    EXPECT_TRUE(type_flags.at(T_COMPOSE) & LOTUS_TYPE_PIPELINE);
    EXPECT_TRUE(type_flags.at(T_COMPOSE) & LOTUS_TYPE_CLASSIFIED);
    EXPECT_FALSE(type_flags.at(T_CROP) & LOTUS_TYPE_PIPELINE);
    EXPECT_TRUE(type_flags.at(T_CROP) & LOTUS_TYPE_CLASSIFIED);
}

TEST_F(Engine, InterleavedThreadsKeepTheirOwnStacks)
{
    describe(P);
    constexpr uint32_t T2 = 555;
    ev.entry(P, P, 100, 0, COMPOSE, T_COMPOSE, {{GETITEM, 1}});
    ev.entry(P, T2, 105, 0, COMPOSE, T_COMPOSE, {{GETITEM, 2}});
    ev.entry(P, P, 110, 1, TOTENSOR_CALL, T_TOTENSOR);
    ev.entry(P, T2, 115, 1, CALL_IMPL, T_CROP);
    ev.ret(P, P, 120, 1);
    ev.ret(P, T2, 125, 1);
    ev.ret(P, T2, 130, 0);
    ev.ret(P, P, 140, 0);
    engine.finish();
    auto ops = of(SpanKind::Op);
    ASSERT_EQ(ops.size(), 2u);
    // T2's sample finished first, so its op comes out first
    EXPECT_EQ(ops[0].name, "RandomResizedCrop");
    EXPECT_EQ(ops[0].tid, T2);
    EXPECT_EQ(ops[0].sample, 2);
    EXPECT_EQ(ops[1].name, "ToTensor");
    EXPECT_EQ(ops[1].tid, P);
    EXPECT_EQ(ops[1].sample, 1);
    EXPECT_EQ(of(SpanKind::Sample).size(), 2u);
}

TEST_F(Engine, MissingReturnIsNeverInventedAndCounted)
{
    describe(P);
    ev.entry(P, P, 100, 5, COMPOSE, T_COMPOSE, {{GETITEM, 7}});
    ev.entry(P, P, 110, 6, TOTENSOR_CALL, T_TOTENSOR);
    // the op's return was lost: the sample's return arrives
    ev.ret(P, P, 200, 5);
    EXPECT_EQ(engine.counters().lost_returns, 1u);
    // next sample at the same depth while the previous one never returned
    ev.entry(P, P, 300, 5, COMPOSE, T_COMPOSE, {{GETITEM, 8}});
    ASSERT_EQ(spans.size(), 1u); // the first, complete now its thread went on to another item
    EXPECT_EQ(spans[0].kind, SpanKind::Sample);
    ev.entry(P, P, 400, 5, COMPOSE, T_COMPOSE, {{GETITEM, 9}});
    ev.ret(P, P, 500, 5);
    engine.finish();
    ASSERT_EQ(of(SpanKind::Sample).size(), 2u);
    EXPECT_EQ(of(SpanKind::Sample)[1].sample, 9);
    EXPECT_EQ(engine.counters().lost_returns, 2u);
}

TEST_F(Engine, DroppedPipelineEntryLeavesItsOpsOut)
{
    describe(P);
    // Compose's entry record was dropped: ops arrive with no open sample.
    ev.entry(P, P, 110, 4, TOTENSOR_CALL, T_TOTENSOR);
    ev.ret(P, P, 120, 4);
    ev.ret(P, P, 130, 3);
    // Positive control: the thread's next sample, whole, is emitted with its own two ops and no more.
    sample(P, P, 1000, 3, 9);
    engine.finish();
    ASSERT_EQ(of(SpanKind::Sample).size(), 1u);
    EXPECT_EQ(of(SpanKind::Sample)[0].sample, 9);
    auto ops = of(SpanKind::Op);
    ASSERT_EQ(ops.size(), 2u);
    for (const auto& op : ops) {
        EXPECT_EQ(op.sample, 9);
        EXPECT_GE(op.start_ns, 1000u); // (not the orphan ToTensor at 110)
    }
}

TEST_F(Engine, FinishedOpsOfAnUnfinishedSampleAreNotEmitted)
{
    describe(P);
    ev.entry(P, P, 100, 0, COMPOSE, T_COMPOSE, {{GETITEM, 1}});
    ev.entry(P, P, 110, 1, TOTENSOR_CALL, T_TOTENSOR);
    ev.ret(P, P, 120, 1);
    EXPECT_TRUE(spans.empty());
    engine.finish();
    EXPECT_TRUE(spans.empty());
    EXPECT_EQ(engine.counters().incomplete, 2u);
}

TEST_F(Engine, OpenSpansAtTheEndAreIncompleteNotEmitted)
{
    describe(P);
    ev.entry(P, P, 100, 0, COMPOSE, T_COMPOSE, {{GETITEM, 1}});
    ev.entry(P, P, 110, 1, TOTENSOR_CALL, T_TOTENSOR);
    engine.finish();
    EXPECT_TRUE(spans.empty());
    EXPECT_EQ(engine.counters().incomplete, 2u);
}

TEST_F(Engine, UndescribedCodeIsSkipped)
{
    describe(P);
    ev.entry(P, P, 100, 0, UNDESCRIBED);
    ev.ret(P, P, 110, 0);
    EXPECT_TRUE(spans.empty());
    EXPECT_EQ(engine.counters().unknown_code, 1u);
}

TEST_F(Engine, IndexIsUnknownWhenNoGetitemInChain)
{
    describe(P);
    ev.entry(P, P, 100, 0, COMPOSE, T_COMPOSE, {{CALL_IMPL, 3}});
    ev.ret(P, P, 110, 0);
    engine.finish();
    ASSERT_EQ(spans.size(), 1u);
    EXPECT_EQ(spans[0].sample, -1);
}

TEST_F(Engine, WorkerIdComesFromWorkerLoopCaptureAndForkInheritsCodes)
{
    engine.add_process(P, 0, true);
    describe(P);
    ev.proc(LOTUS_EV_FORK, W, P);
    // The child was never described anything: it knows its parent's code objects.
    ev.entry(W, W, 100, 0, COMPOSE, T_COMPOSE, {{GETITEM, 11}}, {{WORKER_LOOP, 10, 3}});
    ev.ret(W, W, 200, 0);
    const auto& w = engine.processes().at(W);
    EXPECT_EQ(w.parent, P);
    EXPECT_EQ(w.worker_id, 3);
    EXPECT_EQ(model::process_label(engine.processes(), W), "worker 3");
    EXPECT_EQ(model::process_label(engine.processes(), P), "main");
    ev.proc(LOTUS_EV_EXIT, W, 0);
    EXPECT_TRUE(engine.processes().at(W).exited);
    EXPECT_EQ(spans.size(), 1u); // its exit completes its sample
}

TEST_F(Engine, HowEachProcessEndedIsKeptAsTheKernelSaidIt)
{
    engine.add_process(P, 0, true);
    ev.proc(LOTUS_EV_FORK, W, P);
    ev.proc(LOTUS_EV_FORK, W + 1, P);
    ev.proc(LOTUS_EV_FORK, W + 2, P);
    ev.proc(LOTUS_EV_EXIT, W, 9);             // SIGKILL
    ev.proc(LOTUS_EV_EXIT, W + 1, 0x80 | 11); // SIGSEGV, core dumped
    ev.proc(LOTUS_EV_EXIT, W + 2, 0);         // a clean exit
    ev.proc(LOTUS_EV_EXIT, P, 3 << 8);        // exit(3)
    const auto& procs = engine.processes();
    EXPECT_EQ(model::how_it_ended(procs.at(W)), "killed by SIGKILL");
    EXPECT_EQ(model::exit_signal(procs.at(W)), 9);
    EXPECT_EQ(model::exit_code(procs.at(W)), -1);
    EXPECT_EQ(model::how_it_ended(procs.at(W + 1)), "killed by SIGSEGV (core dumped)");
    EXPECT_EQ(model::how_it_ended(procs.at(W + 2)), "");
    EXPECT_EQ(model::exit_code(procs.at(W + 2)), 0);
    EXPECT_EQ(model::how_it_ended(procs.at(P)), "exited with status 3");
    EXPECT_EQ(model::exit_code(procs.at(P)), 3);
}

TEST_F(Engine, ExecForgetsTheOldImage)
{
    constexpr uint32_t Q = 200; // positive control: a process described alike that does not exec
    describe(P);
    describe(Q);
    ev.proc(LOTUS_EV_EXEC, P, 0);
    for (uint32_t tgid : {P, Q}) {
        ev.entry(tgid, tgid, 100, 0, COMPOSE, T_COMPOSE, {{GETITEM, 1}});
        ev.ret(tgid, tgid, 110, 0);
    }
    engine.finish();
    // P's Compose after its exec is code of the new image, of which nothing was described: no sample.
    auto samples = of(SpanKind::Sample);
    ASSERT_EQ(samples.size(), 1u);
    EXPECT_EQ(samples[0].pid, Q);
    for (const auto& s : spans)
        EXPECT_NE(s.pid, P) << s.name;
}

TEST_F(Engine, ForkedSiblingsShareWhatEitherWasDescribed)
{
    // BPF describes a code object once per role space: the second worker of an epoch is told nothing of code
    // its sibling (or parent) already ran, before or after the fork.
    engine.add_process(P, 0, true);
    ev.proc(LOTUS_EV_FORK, W, P, P);
    ev.proc(LOTUS_EV_FORK, W + 1, P, P);
    describe(W);
    sample(W + 1, W + 1, 1000, 7, 3);
    EXPECT_EQ(engine.counters().unknown_code, 0u);
    for (auto& [t, c, f, space] : roles)
        EXPECT_EQ(space, P); // roles are set in the space, for all its processes
    // W + 1 made another object at COMPOSE's address: described as its own, it names the calls of W + 1 whose
    // entry records say they went by W + 1's own description.
    ev.code(W + 1, COMPOSE, "helper", "y.py", true);
    EXPECT_EQ(std::get<3>(roles.back()), (W + 1) | LOTUS_SPACE_OWN);
    ev.entry(W + 1, W + 1, 2000, 7, COMPOSE, T_COMPOSE, {{GETITEM, 4}}, {}, 0xc0, 0, LOTUS_OWN_CODE);
    ev.ret(W + 1, W + 1, 2010, 7);
    sample(W, W, 3000, 7, 5);
    sample(W + 1, W + 1, 4000, 7, 6); // its object at COMPOSE is the space's again: BPF goes by the space's
    engine.finish();
    ASSERT_EQ(of(SpanKind::Sample).size(), 3u);
    EXPECT_EQ(of(SpanKind::Sample)[0].pid, W + 1);
    EXPECT_EQ(of(SpanKind::Sample)[1].pid, W);
    EXPECT_EQ(of(SpanKind::Op).size(), 6u);
    EXPECT_EQ(of(SpanKind::Op)[0].name, "RandomResizedCrop");
}

TEST_F(Engine, ExecStartsTheSpaceItsLaterChildrenShare)
{
    describe(P);
    constexpr uint32_t kSpace = LOTUS_SPACE_EXEC_BASE + 4;
    ev.proc(LOTUS_EV_FORK, W, P, P);
    ev.proc(LOTUS_EV_EXEC, W, 0, kSpace); // e.g. a spawned worker: a new interpreter
    ev.proc(LOTUS_EV_FORK, W + 1, W, kSpace);
    sample(W + 1, W + 1, 1000, 7, 3);
    EXPECT_TRUE(of(SpanKind::Sample).empty()); // the parent's objects are not the new image's
    roles.clear();
    describe(W);
    ASSERT_FALSE(roles.empty());
    EXPECT_EQ(std::get<3>(roles[0]), kSpace);
    sample(W + 1, W + 1, 2000, 7, 3);
    sample(P, P, 3000, 7, 3); // the old space lives on in P
    engine.finish();
    ASSERT_EQ(of(SpanKind::Sample).size(), 2u);
    EXPECT_EQ(of(SpanKind::Sample)[0].pid, W + 1);
}

TEST_F(Engine, ExitClosesOpenSpansOfThatProcess)
{
    describe(P);
    ev.entry(P, P, 100, 0, COMPOSE, T_COMPOSE, {{GETITEM, 1}});
    ev.proc(LOTUS_EV_EXIT, P, 0);
    EXPECT_EQ(engine.counters().incomplete, 1u);
    engine.finish();
    EXPECT_EQ(engine.counters().incomplete, 1u);
}

TEST_F(Engine, MalformedRecordsAreCountedNotTrusted)
{
    uint32_t junk = LOTUS_EV_PY_ENTRY;
    engine.consume(&junk, sizeof(junk));
    lotus_event_header h{999, 1, 1, 0, 0};
    engine.consume(&h, sizeof(h));
    lotus_event_header short_entry{LOTUS_EV_PY_ENTRY, 1, 1, 0, 0};
    engine.consume(&short_entry, sizeof(short_entry));
    EXPECT_EQ(engine.counters().malformed, 3u);
    EXPECT_TRUE(spans.empty());
}

TEST_F(Engine, NamesFromDamagedRecordsStayValidUtf8)
{
    describe(P);
    // An op class whose name bytes were damaged: a stray continuation byte, a truncated sequence, an overlong
    // form; valid multi-byte characters are kept.
    ev.type(P, 0x99, std::string("Crop\x84X\xc3") + "\xc3\xa9" + "\xe0\x80\x80");
    ev.entry(P, P, 10, 0, COMPOSE, T_COMPOSE, {{GETITEM, 1}});
    ev.entry(P, P, 11, 1, CALL_IMPL, 0x99, {{COMPOSE, LOTUS_NO_VALUE}});
    ev.ret(P, P, 12, 1);
    ev.ret(P, P, 13, 0);
    engine.finish();
    auto ops = of(SpanKind::Op);
    ASSERT_EQ(ops.size(), 1u);
    const std::string r = "\xef\xbf\xbd"; // U+FFFD per byte that starts no valid sequence
    EXPECT_EQ(ops[0].name, "Crop" + r + "X" + r + "\xc3\xa9" + r + r + r);
}

TEST_F(Engine, ManySamplesAcrossTwoWorkers)
{
    describe(P);
    ev.proc(LOTUS_EV_FORK, W, P);
    ev.proc(LOTUS_EV_FORK, W + 1, P);
    for (int i = 0; i < 50; i++) {
        sample(W, W, 1000 + i * 1000, 7, i * 2);
        sample(W + 1, W + 1, 1500 + i * 1000, 7, i * 2 + 1);
    }
    engine.finish();
    EXPECT_EQ(of(SpanKind::Sample).size(), 100u);
    EXPECT_EQ(of(SpanKind::Op).size(), 200u);
    EXPECT_EQ(engine.processes().at(W).samples, 50u);
    EXPECT_EQ(engine.processes().at(W + 1).samples, 50u);
    EXPECT_EQ(engine.counters().lost_returns, 0u);
}

TEST_F(Engine, LoadersOfAChildThatNeverHandsOverABatchDoNotPileUp)
{
    // A multiprocessing child (not a DataLoader worker) running a pipeline in a loop: no batch ever ends, so
    // its loader spans would wait for one forever; they go out in groups of kMaxPendingLoaders instead.
    describe(P);
    ev.proc(LOTUS_EV_FORK, W, P);
    constexpr size_t kMax = model::BatchTracker::kMaxPendingLoaders;
    for (size_t i = 0; i < 2 * kMax + 100; i++)
        sample(W, W, 1000 + i * 1000, 7, int64_t(i));
    engine.finish();
    // the first sample's loading began before its (implicit) batch: it has no loader span
    EXPECT_EQ(of(SpanKind::Loader).size(), 2 * kMax);
    EXPECT_EQ(of(SpanKind::Sample).size(), 2 * kMax + 100);
}

// One item's __getitem__ calling two pipelines (ImageFolder's transform, then its target_transform) and an object
// of its own: one sample, from the first call's start to the last one's end, with every op, and one loader. The
// next item, even of the same index (a sampler drawing with replacement), calls the same pipeline object again:
// a sample of its own. So does an item of another dataset whose own index is the same (ConcatDataset: its
// caller's index differs).
TEST_F(Engine, OneItemsPipelinesAndOwnCallsAreOneSample)
{
    constexpr uint64_t FETCH = 0x8000, CONCAT_GETITEM = 0x8100, OUTER_GETITEM = 0x8200, IMG_TF = 0xc0, TARGET_TF = 0xc1,
                       LABEL_OBJ = 0xc2;
    constexpr uint64_t T_LABEL = 0x70;
    engine.add_process(P, 0, true);
    describe(P);
    ev.code(P, FETCH, "_MapDatasetFetcher.fetch", "/x/torch/utils/data/_utils/fetch.py");
    ev.code(P, CONCAT_GETITEM, "ConcatDataset.__getitem__", "/x/torch/utils/data/dataset.py");
    ev.code(P, OUTER_GETITEM, "LoggedFolder.__getitem__", "/home/me/train.py");
    ev.type(P, T_LABEL, "LabelEncoder");
    // item: (pipeline object, its op, then an own call?) with the chain its calls come from
    auto item = [&](uint64_t t, std::vector<std::pair<uint64_t, int64_t>> chain, bool own_call) {
        ev.entry(P, P, t, 3, COMPOSE, T_COMPOSE, chain, {}, IMG_TF);
        ev.entry(P, P, t + 10, 4, TOTENSOR_CALL, T_TOTENSOR, {{COMPOSE, LOTUS_NO_VALUE}});
        ev.ret(P, P, t + 20, 4);
        ev.ret(P, P, t + 30, 3);
        ev.entry(P, P, t + 40, 3, COMPOSE, T_COMPOSE, chain, {}, TARGET_TF);
        ev.entry(P, P, t + 45, 4, CALL_IMPL, T_CROP, {{COMPOSE, LOTUS_NO_VALUE}});
        ev.ret(P, P, t + 50, 4);
        ev.ret(P, P, t + 60, 3);
        if (own_call) {
            ev.entry(P, P, t + 70, 3, TOTENSOR_CALL, T_LABEL, chain, {}, LABEL_OBJ);
            ev.ret(P, P, t + 80, 3);
        }
    };
    item(1000, {{GETITEM, 5}, {FETCH, LOTUS_NO_VALUE}}, true);
    EXPECT_TRUE(spans.empty()); // the item may call more
    item(2000, {{GETITEM, 5}, {FETCH, LOTUS_NO_VALUE}}, false);                          // the same index again
    item(3000, {{GETITEM, 5}, {CONCAT_GETITEM, 7}, {FETCH, LOTUS_NO_VALUE}}, false);     // another dataset's 5
    item(4000, {{GETITEM, 5}, {CONCAT_GETITEM, 9}, {FETCH, LOTUS_NO_VALUE}}, false);
    // A subclass's __getitem__ calls super().__getitem__ (the pipelines), then an object of its own.
    item(5000, {{GETITEM, 6}, {OUTER_GETITEM, 6}, {FETCH, LOTUS_NO_VALUE}}, false);
    ev.entry(P, P, 5070, 3, TOTENSOR_CALL, T_LABEL, {{OUTER_GETITEM, 6}, {FETCH, LOTUS_NO_VALUE}}, {}, LABEL_OBJ);
    ev.ret(P, P, 5080, 3);
    engine.finish();
    auto samples = of(SpanKind::Sample);
    ASSERT_EQ(samples.size(), 5u);
    EXPECT_EQ(samples[4].end_ns, 5080u);
    samples.pop_back();
    EXPECT_EQ(samples[0].start_ns, 1000u);
    EXPECT_EQ(samples[0].end_ns, 1080u); // its own call's end
    EXPECT_EQ(samples[1].start_ns, 2000u);
    EXPECT_EQ(samples[1].end_ns, 2060u);
    for (const auto& smp : samples)
        EXPECT_EQ(smp.sample, 5);
    auto ops = of(SpanKind::Op);
    ASSERT_EQ(ops.size(), 12u);
    std::vector<std::string> first;
    for (const auto& op : ops)
        if (op.sample_id == samples[0].sample_id)
            first.push_back(op.name);
    EXPECT_EQ(first, (std::vector<std::string>{"ToTensor", "RandomResizedCrop", "LabelEncoder"}));
    EXPECT_EQ(engine.processes().at(P).samples, 5u);
}

// An object of the item's own that calls pipelines, the same one again too (two views of an image for contrastive
// learning, DINO's multi-crop): while it has not returned, every pipeline call is that item's. The next item, of
// the same index, is a sample of its own.
TEST_F(Engine, PipelinesCalledInsideOneOfTheItemsCallsAreOneSample)
{
    constexpr uint64_t FETCH = 0x8000, TWO_CALL = 0x8300, TWO_OBJ = 0xc5, IMG_TF = 0xc0;
    constexpr uint64_t T_TWO = 0x71;
    engine.add_process(P, 0, true);
    describe(P);
    ev.code(P, FETCH, "_MapDatasetFetcher.fetch", "/x/torch/utils/data/_utils/fetch.py");
    ev.code(P, TWO_CALL, "TwoCropsTransform.__call__", "/home/me/moco/loader.py");
    ev.type(P, T_TWO, "TwoCropsTransform");
    auto item = [&](uint64_t t) {
        ev.entry(P, P, t, 3, TWO_CALL, T_TWO, {{GETITEM, 5}, {FETCH, LOTUS_NO_VALUE}}, {}, TWO_OBJ);
        for (uint64_t v = 0; v < 2; v++) {
            uint64_t at = t + 10 + 100 * v;
            ev.entry(P, P, at, 4, COMPOSE, T_COMPOSE, {{TWO_CALL, LOTUS_NO_VALUE}, {GETITEM, 5}, {FETCH, LOTUS_NO_VALUE}},
                     {}, IMG_TF);
            ev.entry(P, P, at + 10, 5, TOTENSOR_CALL, T_TOTENSOR, {{COMPOSE, LOTUS_NO_VALUE}});
            ev.ret(P, P, at + 20, 5);
            ev.ret(P, P, at + 30, 4);
        }
        ev.ret(P, P, t + 300, 3);
    };
    item(1000);
    item(2000);
    engine.finish();
    auto samples = of(SpanKind::Sample);
    ASSERT_EQ(samples.size(), 2u);
    EXPECT_EQ(samples[0].start_ns, 1010u);
    EXPECT_EQ(samples[0].end_ns, 1140u); // the second view's end
    EXPECT_EQ(samples[1].start_ns, 2010u);
    EXPECT_EQ(of(SpanKind::Op).size(), 4u);
    EXPECT_EQ(engine.processes().at(P).samples, 2u);
}

// A pipeline call that raised, caught by a __getitem__ among its callers, which runs the pipeline again (another
// index: a replacement item): the same item, one sample. The next item, whose call raised too, is its own.
TEST_F(Engine, AnItemRetriedAfterItsPipelineRaisedIsOneSample)
{
    constexpr uint64_t FETCH = 0x8000, OUTER_GETITEM = 0x8200, IMG_TF = 0xc0;
    engine.add_process(P, 0, true);
    describe(P);
    ev.code(P, FETCH, "_MapDatasetFetcher.fetch", "/x/torch/utils/data/_utils/fetch.py");
    ev.code(P, OUTER_GETITEM, "RetryFolder.__getitem__", "/home/me/train.py");
    auto run = [&](uint64_t t, int64_t inner, int64_t outer, bool raises) {
        ev.entry(P, P, t, 3, COMPOSE, T_COMPOSE, {{GETITEM, inner}, {OUTER_GETITEM, outer}, {FETCH, LOTUS_NO_VALUE}},
                 {}, IMG_TF);
        ev.entry(P, P, t + 10, 4, TOTENSOR_CALL, T_TOTENSOR, {{COMPOSE, LOTUS_NO_VALUE}});
        ev.ret(P, P, t + 20, 4, raises ? 0 : 1);
        ev.ret(P, P, t + 30, 3, raises ? 0 : 1);
    };
    run(1000, 7, 7, true);  // item 7 raised
    run(1100, 0, 7, false); // retried as item 0 by item 7's __getitem__
    run(2000, 8, 8, true);  // item 8 raised
    run(2100, 8, 8, false); // run again for the same index by the same frame: not told from a next item 8
    run(3000, 9, 9, false);
    engine.finish();
    auto samples = of(SpanKind::Sample);
    ASSERT_EQ(samples.size(), 4u);
    EXPECT_EQ(samples[0].sample, 7);
    EXPECT_EQ(samples[0].start_ns, 1000u);
    EXPECT_EQ(samples[0].end_ns, 1130u);
    EXPECT_EQ(samples[1].sample, 8);
    EXPECT_EQ(samples[1].end_ns, 2030u);
    EXPECT_EQ(of(SpanKind::Op).size(), 5u);
}

TEST_F(Engine, PipelineByObjectWhateverItsCodeObject)
{
    // transforms v2: Compose is an nn.Module. Its call enters Module._wrapped_call_impl, _call_impl and
    // Compose.forward with the same self; the calls forward makes are the ops.
    constexpr uint64_t WRAPPED = 0xa000, V2_FORWARD = 0xb000, COMPOSE_OBJ = 0xc0, CROP_OBJ = 0xc1;
    describe(P);
    ev.code(P, WRAPPED, "Module._wrapped_call_impl");
    ev.code(P, V2_FORWARD, "Compose.forward", "/x/torchvision/transforms/v2/_container.py");
    ev.entry(P, P, 100, 4, WRAPPED, T_COMPOSE, {{GETITEM, 9}}, {}, COMPOSE_OBJ);
    ev.entry(P, P, 101, 5, CALL_IMPL, T_COMPOSE, {{WRAPPED, LOTUS_NO_VALUE}}, {}, COMPOSE_OBJ);
    ev.entry(P, P, 102, 6, V2_FORWARD, T_COMPOSE, {{CALL_IMPL, LOTUS_NO_VALUE}}, {}, COMPOSE_OBJ);
    ev.entry(P, P, 110, 7, WRAPPED, T_CROP, {{V2_FORWARD, LOTUS_NO_VALUE}}, {}, CROP_OBJ);
    ev.entry(P, P, 111, 8, CALL_IMPL, T_CROP, {{WRAPPED, LOTUS_NO_VALUE}}, {}, CROP_OBJ); // the op's own frames
    ev.ret(P, P, 119, 8);
    ev.ret(P, P, 120, 7);
    ev.entry(P, P, 130, 7, TOTENSOR_CALL, T_TOTENSOR, {{V2_FORWARD, LOTUS_NO_VALUE}});
    ev.ret(P, P, 140, 7);
    ev.ret(P, P, 150, 6);
    ev.ret(P, P, 151, 5);
    ev.ret(P, P, 152, 4);
    engine.finish();
    auto samples = of(SpanKind::Sample);
    ASSERT_EQ(samples.size(), 1u);
    EXPECT_EQ(samples[0].start_ns, 100u);
    EXPECT_EQ(samples[0].end_ns, 152u);
    EXPECT_EQ(samples[0].sample, 9);
    auto ops = of(SpanKind::Op);
    ASSERT_EQ(ops.size(), 2u);
    EXPECT_EQ(ops[0].name, "RandomResizedCrop");
    EXPECT_EQ(ops[0].start_ns, 110u);
    EXPECT_EQ(ops[0].end_ns, 120u);
    EXPECT_EQ(ops[1].name, "ToTensor");
}

TEST_F(Engine, SubclassOfComposeIsAPipelineAndAClassOfAnyOtherNameIsNot)
{
    describe(P);
    constexpr uint64_t T_TIMED = 0x40, T_OTHER = 0x41;
    ev.type(P, T_TIMED, "TimedCompose", {"Compose", "object"});
    ev.type(P, T_OTHER, "Pipeline", {"object"});
    EXPECT_TRUE(type_flags.at(T_TIMED) & LOTUS_TYPE_PIPELINE);
    EXPECT_FALSE(type_flags.at(T_OTHER) & LOTUS_TYPE_PIPELINE);
    ev.entry(P, P, 100, 0, COMPOSE, T_OTHER, {{GETITEM, 1}});
    ev.ret(P, P, 110, 0);
    ev.entry(P, P, 200, 0, COMPOSE, T_TIMED, {{GETITEM, 2}});
    ev.entry(P, P, 210, 1, TOTENSOR_CALL, T_TOTENSOR, {{COMPOSE, LOTUS_NO_VALUE}});
    ev.ret(P, P, 220, 1);
    ev.ret(P, P, 230, 0);
    engine.finish();
    EXPECT_EQ(of(SpanKind::Sample).size(), 1u);
    EXPECT_EQ(of(SpanKind::Op).size(), 1u);
}

TEST_F(Engine, ContainerTransformsAreOpsWhoseCallsAreOpsToo)
{
    // Compose([RandomApply([ColorJitter]), ToTensor]): RandomApply is an op; ColorJitter, which it calls, is an
    // op too, inside it, with the container named; the sample is one sample.
    constexpr uint64_t T_APPLY = 0x50, T_JITTER = 0x51, APPLY_OBJ = 0xd0, JITTER_CALL = 0xd000;
    describe(P);
    ev.type(P, T_APPLY, "RandomApply", {"Module", "object"});
    ev.type(P, T_JITTER, "ColorJitter", {"Module", "object"});
    ev.code(P, JITTER_CALL, "ColorJitter.forward");
    ev.entry(P, P, 100, 0, COMPOSE, T_COMPOSE, {{GETITEM, 3}}, {}, 0xc0);
    ev.entry(P, P, 110, 1, CALL_IMPL, T_APPLY, {{COMPOSE, LOTUS_NO_VALUE}}, {}, APPLY_OBJ);
    ev.entry(P, P, 111, 2, FORWARD, T_APPLY, {{CALL_IMPL, LOTUS_NO_VALUE}}, {}, APPLY_OBJ); // its own forward
    ev.entry(P, P, 120, 3, CALL_IMPL, T_JITTER, {{FORWARD, LOTUS_NO_VALUE}}, {}, 0xd1);
    ev.ret(P, P, 130, 3);
    ev.ret(P, P, 131, 2);
    ev.ret(P, P, 140, 1);
    ev.entry(P, P, 150, 1, TOTENSOR_CALL, T_TOTENSOR, {{COMPOSE, LOTUS_NO_VALUE}});
    ev.ret(P, P, 160, 1);
    ev.ret(P, P, 170, 0);
    engine.finish();
    EXPECT_EQ(of(SpanKind::Sample).size(), 1u);
    auto ops = of(SpanKind::Op);
    ASSERT_EQ(ops.size(), 3u);
    EXPECT_EQ(ops[0].name, "ColorJitter");
    EXPECT_EQ(ops[0].container, "RandomApply");
    EXPECT_EQ(ops[1].name, "RandomApply");
    EXPECT_EQ(ops[1].container, "");
    EXPECT_EQ(ops[2].name, "ToTensor");
    EXPECT_GE(ops[0].start_ns, ops[1].start_ns);
    EXPECT_LE(ops[0].end_ns, ops[1].end_ns);
}

TEST_F(Engine, APipelineCalledInsideAnOpIsPartOfThatOp)
{
    describe(P);
    ev.entry(P, P, 100, 0, COMPOSE, T_COMPOSE, {{GETITEM, 1}}, {}, 0xc0);
    ev.entry(P, P, 110, 1, TOTENSOR_CALL, T_TOTENSOR, {{COMPOSE, LOTUS_NO_VALUE}}, {}, 0xc2);
    ev.entry(P, P, 115, 3, COMPOSE, T_COMPOSE, {{GETITEM, 2}}, {}, 0xc3); // deeper inside the op
    ev.ret(P, P, 118, 3);
    ev.ret(P, P, 120, 1);
    ev.ret(P, P, 130, 0);
    engine.finish();
    EXPECT_EQ(of(SpanKind::Sample).size(), 1u);
    EXPECT_EQ(of(SpanKind::Op).size(), 1u);
}

TEST_F(Engine, A310MethodWithoutQualnameIsStillNamedByItsClass)
{
    describe(P);
    constexpr uint64_t BARE_CALL = 0xe000;
    ev.code(P, BARE_CALL, "__call__", "/home/me/transforms.py"); // 3.10: no qualified names
    ev.entry(P, P, 100, 0, COMPOSE, T_COMPOSE, {{GETITEM, 1}}, {}, 0xc0);
    ev.entry(P, P, 110, 1, BARE_CALL, T_CROP, {{COMPOSE, LOTUS_NO_VALUE}}, {}, 0xc2);
    ev.ret(P, P, 120, 1);
    ev.ret(P, P, 130, 0);
    engine.finish();
    ASSERT_EQ(of(SpanKind::Op).size(), 1u);
    EXPECT_EQ(of(SpanKind::Op)[0].name, "RandomResizedCrop");
}

TEST_F(Engine, ComprehensionsAndGeneratorExpressionsArePartOfThePipelineNotOps)
{
    // `[t(x) for t in self.transforms]` (3.10: the comprehension is a frame of its own, entered from the
    // pipeline) and `all(... for ...)` (a generator resumed from C): the transforms they call are the ops.
    constexpr uint64_t LISTCOMP = 0xf000, GENEXPR = 0xf100;
    describe(P);
    ev.code(P, LISTCOMP, "<listcomp>");
    ev.code(P, GENEXPR, "Compose.__call__.<locals>.<genexpr>");
    ev.entry(P, P, 100, 0, COMPOSE, T_COMPOSE, {{GETITEM, 1}}, {}, 0xc0);
    ev.entry(P, P, 105, 1, LISTCOMP, 0, {{COMPOSE, LOTUS_NO_VALUE}});
    ev.entry(P, P, 110, 2, TOTENSOR_CALL, T_TOTENSOR, {{LISTCOMP, LOTUS_NO_VALUE}});
    ev.ret(P, P, 120, 2);
    ev.ret(P, P, 125, 1);
    ev.entry(P, P, 130, 1, GENEXPR, 0, {{COMPOSE, LOTUS_NO_VALUE}});
    ev.ret(P, P, 131, 1);
    ev.ret(P, P, 140, 0);
    engine.finish();
    auto ops = of(SpanKind::Op);
    ASSERT_EQ(ops.size(), 1u);
    EXPECT_EQ(ops[0].name, "ToTensor");
    EXPECT_EQ(of(SpanKind::Sample).size(), 1u);
}

TEST_F(Engine, SiblingsWithDifferentClassesAtOneAddressNameTheirOwnOps)
{
    // Workers of a forkserver import their transforms after the fork: the same address can hold Compose in one
    // and Grayscale in its sibling (BPF tells them apart by fingerprint; the second is described as its own).
    engine.add_process(P, 0, true);
    ev.proc(LOTUS_EV_FORK, W, P, P);
    ev.proc(LOTUS_EV_FORK, W + 1, P, P);
    describe(W);
    constexpr uint64_t X = 0x60;
    ev.type(W, X, "Compose");
    ev.type(W + 1, X, "Grayscale", {"Transform"}, true);
    EXPECT_EQ(type_flags.size(), 4u);
    ev.entry(W, W, 100, 0, COMPOSE, X, {{GETITEM, 1}}, {}, 0xc0);
    ev.entry(W, W, 110, 1, TOTENSOR_CALL, T_TOTENSOR, {{COMPOSE, LOTUS_NO_VALUE}});
    ev.ret(W, W, 120, 1);
    ev.ret(W, W, 130, 0);
    ev.entry(W + 1, W + 1, 200, 0, COMPOSE, T_COMPOSE, {{GETITEM, 2}}, {}, 0xc0);
    ev.entry(W + 1, W + 1, 210, 1, CALL_IMPL, X, {{COMPOSE, LOTUS_NO_VALUE}}, {}, 0, 0, LOTUS_OWN_SELF_TYPE);
    ev.ret(W + 1, W + 1, 220, 1);
    ev.ret(W + 1, W + 1, 230, 0);
    engine.finish();
    auto ops = of(SpanKind::Op);
    ASSERT_EQ(ops.size(), 2u);
    EXPECT_EQ(ops[0].name, "ToTensor");
    EXPECT_EQ(ops[1].name, "Grayscale");
    EXPECT_EQ(of(SpanKind::Sample).size(), 2u);
}

// Thread names as the kernel reports them: the latest one wins, per thread; invalid UTF-8 is replaced.
TEST_F(Engine, ThreadNamesFromTheKernel)
{
    ev.thread_name(7, 7, 1, "python3");
    ev.thread_name(7, 7, 2, "pt_main_thread"); // renamed
    ev.thread_name(7, 9, 3, "lotus-w\xff");
    ev.thread_name(8, 8, 4, "a-name-longer-than-fifteen");
    const auto& p = engine.processes();
    EXPECT_EQ(p.at(7).thread_names.at(7), "pt_main_thread");
    EXPECT_EQ(p.at(7).thread_names.at(9), "lotus-w\xEF\xBF\xBD");
    EXPECT_EQ(p.at(8).thread_names.at(8), "a-name-longer-t");
}

TEST_F(Engine, ProcessesOfAnotherInterpreterAreKeptAsRecorded)
{
    model::RecordOtherInterpreter r{};
    r.type = model::kRecordOtherInterpreter;
    r.tgid = r.tid = W;
    r.ts_ns = 5;
    std::string path = "/opt/conda/bin/python3.12";
    path.copy(r.path, path.size());
    engine.consume(&r, sizeof(r));
    engine.consume(&r, offsetof(model::RecordOtherInterpreter, path)); // cut short: malformed, not read
    ASSERT_EQ(engine.other_interpreters().size(), 1u);
    EXPECT_EQ(engine.other_interpreters()[0].pid, W);
    EXPECT_EQ(engine.other_interpreters()[0].path, path);
    EXPECT_EQ(engine.counters().malformed, 1u);
}

TEST_F(Engine, PythonsOutsideTheTracedTreeAreKeptAsRecorded)
{
    model::RecordUntracedPython r{};
    r.type = model::kRecordUntracedPython;
    r.tgid = r.tid = W;
    r.ts_ns = 5;
    std::string comm = "python3", path = "/usr/bin/python3.11";
    comm.copy(r.comm, comm.size());
    path.copy(r.path, path.size());
    engine.consume(&r, sizeof(r));
    engine.consume(&r, offsetof(model::RecordUntracedPython, path)); // cut short: malformed, not read
    ASSERT_EQ(engine.untraced_pythons().size(), 1u);
    EXPECT_EQ(engine.untraced_pythons()[0].pid, W);
    EXPECT_EQ(engine.untraced_pythons()[0].comm, comm);
    EXPECT_EQ(engine.untraced_pythons()[0].path, path);
    EXPECT_EQ(engine.counters().malformed, 1u);
}

// A class of the user's in the pipeline's place (the dataset calls it as its transform; no --pipeline names it)
// whose call runs other objects' calls in turn: one op, and the engine names it and what it was seen calling (its
// inner calls reach the stream while their classes are new to BPF). An op calling one object is no container; a
// callee's own calls (deeper) are not the op's; the op's own frames (its __call__ under the slot) are not callees.
TEST_F(Engine, AnOpRunningOtherObjectsCallsInTurnIsNamedAsAContainer)
{
    constexpr uint64_t FETCH = 0x8000, PIPE_CALL = 0x8400, SCALE_CALL = 0x8500, SHIFT_CALL = 0x8600, LONE_CALL = 0x8700;
    constexpr uint64_t T_PIPE = 0x80, T_SCALE = 0x81, T_SHIFT = 0x82, T_LONE = 0x83;
    constexpr uint64_t PIPE_OBJ = 0xd0, SCALE_OBJ = 0xd1, SHIFT_OBJ = 0xd2, LONE_OBJ = 0xd3, INNER_OBJ = 0xd4;
    engine.add_process(P, 0, true);
    describe(P);
    ev.code(P, FETCH, "_MapDatasetFetcher.fetch", "/x/torch/utils/data/_utils/fetch.py");
    ev.code(P, PIPE_CALL, "Pipeline.__call__", "/home/me/text.py");
    ev.code(P, SCALE_CALL, "Scale.__call__", "/home/me/text.py");
    ev.code(P, SHIFT_CALL, "Shift.__call__", "/home/me/text.py");
    ev.code(P, LONE_CALL, "Lone.__call__", "/home/me/text.py");
    ev.type(P, T_PIPE, "Pipeline");
    ev.type(P, T_SCALE, "Scale");
    ev.type(P, T_SHIFT, "Shift");
    ev.type(P, T_LONE, "Lone");
    auto item = [&](uint64_t t, int64_t index, bool inner_seen) {
        std::vector<std::pair<uint64_t, int64_t>> chain{{GETITEM, index}, {FETCH, LOTUS_NO_VALUE}};
        ev.entry(P, P, t, 3, PIPE_CALL, T_PIPE, chain, {}, PIPE_OBJ);
        if (inner_seen) {
            ev.entry(P, P, t + 10, 4, SCALE_CALL, T_SCALE, {{PIPE_CALL, LOTUS_NO_VALUE}}, {}, SCALE_OBJ);
            ev.entry(P, P, t + 12, 5, SHIFT_CALL, T_SHIFT, {{SCALE_CALL, LOTUS_NO_VALUE}}, {}, INNER_OBJ); // Scale's own
            ev.ret(P, P, t + 14, 5);
            ev.ret(P, P, t + 20, 4);
            ev.entry(P, P, t + 30, 4, SHIFT_CALL, T_SHIFT, {{PIPE_CALL, LOTUS_NO_VALUE}}, {}, SHIFT_OBJ);
            ev.ret(P, P, t + 40, 4);
        }
        ev.ret(P, P, t + 50, 3);
        ev.entry(P, P, t + 60, 3, LONE_CALL, T_LONE, chain, {}, LONE_OBJ);
        if (inner_seen) {
            ev.entry(P, P, t + 62, 4, SCALE_CALL, T_SCALE, {{LONE_CALL, LOTUS_NO_VALUE}}, {}, SCALE_OBJ);
            ev.ret(P, P, t + 64, 4);
        }
        ev.ret(P, P, t + 70, 3);
    };
    item(1000, 1, true);
    item(2000, 2, false);
    item(3000, 3, false);
    engine.finish();
    auto ops = of(SpanKind::Op);
    std::vector<std::string> names;
    for (const auto& op : ops)
        names.push_back(op.name);
    EXPECT_EQ(names, (std::vector<std::string>{"Pipeline", "Lone", "Pipeline", "Lone", "Pipeline", "Lone"}));
    EXPECT_EQ(of(SpanKind::Sample).size(), 3u);
    ASSERT_EQ(engine.containers().size(), 1u);
    const auto& c = engine.containers()[0];
    EXPECT_EQ(c.op, "Pipeline");
    EXPECT_EQ(c.callees, (std::vector<std::string>{"Scale", "Shift"}));
    EXPECT_EQ(c.calls, 1u);
    EXPECT_EQ(c.pid, P);
    EXPECT_FALSE(c.in_pipeline);
}

// With the evaluator probed (--all-calls), the op's own __call__ frame is an entry of the same object one level
// below the slot's: its callees are one level below that.
TEST_F(Engine, AContainersOwnFramesAreNotItsCallees)
{
    constexpr uint64_t FETCH = 0x8000, PIPE_CALL = 0x8400, SCALE_CALL = 0x8500;
    constexpr uint64_t T_PIPE = 0x80, T_SCALE = 0x81;
    constexpr uint64_t PIPE_OBJ = 0xd0, A_OBJ = 0xd1, B_OBJ = 0xd2;
    engine.add_process(P, 0, true);
    describe(P);
    ev.code(P, FETCH, "_MapDatasetFetcher.fetch", "/x/torch/utils/data/_utils/fetch.py");
    ev.code(P, PIPE_CALL, "Pipeline.__call__", "/home/me/text.py");
    ev.code(P, SCALE_CALL, "Scale.__call__", "/home/me/text.py");
    ev.type(P, T_PIPE, "Pipeline");
    ev.type(P, T_SCALE, "Scale");
    std::vector<std::pair<uint64_t, int64_t>> chain{{GETITEM, 4}, {FETCH, LOTUS_NO_VALUE}};
    ev.entry(P, P, 1000, 3, PIPE_CALL, T_PIPE, chain, {}, PIPE_OBJ);
    ev.entry(P, P, 1001, 4, PIPE_CALL, T_PIPE, {{GETITEM, 4}}, {}, PIPE_OBJ); // its own frame
    ev.entry(P, P, 1010, 5, SCALE_CALL, T_SCALE, {{PIPE_CALL, LOTUS_NO_VALUE}}, {}, A_OBJ);
    ev.ret(P, P, 1020, 5);
    ev.entry(P, P, 1030, 5, SCALE_CALL, T_SCALE, {{PIPE_CALL, LOTUS_NO_VALUE}}, {}, B_OBJ);
    ev.ret(P, P, 1040, 5);
    ev.ret(P, P, 1045, 4);
    ev.ret(P, P, 1050, 3);
    engine.finish();
    ASSERT_EQ(engine.containers().size(), 1u);
    EXPECT_EQ(engine.containers()[0].callees, (std::vector<std::string>{"Scale", "Scale"}));
    EXPECT_EQ(of(SpanKind::Op).size(), 1u);
}
