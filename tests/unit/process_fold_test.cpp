// Exited processes folded into their role's row (model/process_fold.h), and what follows them: the engine's
// processes, the usage table, the timeline, the summary's table.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "export/timeline.h"
#include "export/usage_summary.h"
#include "lotus_abi.h"
#include "model/engine.h"
#include "model/process_fold.h"

using namespace lotus;

namespace {

constexpr uint64_t MS = 1'000'000, S = 1'000'000'000;

// Worker `id` of DataLoader 0 of training process 1, seen from `first` to its clean exit at `exit_ns`.
model::ProcessInfo worker(uint32_t pid, int id, uint64_t first, uint64_t exit_ns, uint64_t samples = 32)
{
    model::ProcessInfo p;
    p.pid = pid;
    p.parent = 1;
    p.worker = true;
    p.worker_id = id;
    p.owner = 1;
    p.loader = 0;
    p.samples = samples;
    p.batches = 1;
    p.busy_ns = (exit_ns - first) / 2;
    p.first_ns = first;
    p.last_ns = exit_ns;
    p.exited = true;
    p.exit_status = 0;
    p.exit_ns = exit_ns;
    return p;
}

std::map<uint32_t, model::ProcessInfo> job(int epochs)
{
    std::map<uint32_t, model::ProcessInfo> procs;
    procs[1].pid = 1;
    procs[1].root = true;
    procs[1].consumer = true;
    for (int e = 0; e < epochs; e++)
        for (int id = 0; id < 2; id++) {
            uint32_t pid = 100 + 10 * e + id;
            procs[pid] = worker(pid, id, e * S, e * S + 800 * MS);
        }
    return procs;
}

} // namespace

TEST(ProcessFold, ARolesLaterExitsFoldIntoItsLastKeptOne)
{
    auto procs = job(20); // epoch e's workers exit at e s + 0.8 s
    // at 19.9 s, epochs 0-17 have exited at least 2 s before: 18 per worker id, 16 kept, 2 folded
    auto folds = model::folds_due(procs, 19 * S + 900 * MS);
    ASSERT_EQ(folds.size(), 4u);
    std::map<uint32_t, uint32_t> into(folds.begin(), folds.end());
    EXPECT_EQ(into.at(260), 250u); // worker 0 of epoch 16 into that of epoch 15 (the 16th)
    EXPECT_EQ(into.at(270), 250u);
    EXPECT_EQ(into.at(261), 251u);
    EXPECT_EQ(into.at(271), 251u);
    // 16 or fewer exited of a role: nothing
    EXPECT_TRUE(model::folds_due(job(16), 100 * S).empty());
}

TEST(ProcessFold, NeverAProcessThatEndedBadlyNorATrainingProcess)
{
    auto procs = job(20);
    procs[170].exit_status = 9;         // killed by SIGKILL: its fate is told by its pid
    procs[171].exit_status = 1 << 8;    // exited with status 1
    procs[180].consumer = true;         // iterates DataLoaders itself
    auto folds = model::folds_due(procs, 100 * S);
    for (auto [pid, into] : folds) {
        EXPECT_NE(pid, 170u);
        EXPECT_NE(pid, 171u);
        EXPECT_NE(pid, 180u);
        EXPECT_NE(into, 170u);
        EXPECT_NE(pid, 1u);
    }
    // worker 0: 20 minus 2 left out = 18 foldable, 2 folded; worker 1: 19, 3 folded
    EXPECT_EQ(folds.size(), 5u);
}

TEST(ProcessFold, AbsorbAddsFiguresAndKeepsTheFirstPids)
{
    auto row = worker(10, 0, 0, 1 * S, 32);
    for (uint32_t pid = 11; pid < 30; pid++)
        model::absorb(row, worker(pid, 0, (pid - 10) * S, (pid - 10) * S + 500 * MS, 16));
    EXPECT_EQ(row.processes(), 20u);
    EXPECT_EQ(row.samples, 32u + 19 * 16);
    EXPECT_EQ(row.batches, 20u);
    EXPECT_EQ(row.seen_ns(), 1 * S + 19 * 500 * MS);
    EXPECT_EQ(row.busy_ns, 500 * MS + 19 * 250 * MS);
    EXPECT_EQ(model::pid_list(row), "10,11,12,13,14,15,16,17,18,+11");
    // a row folded into another brings its own
    auto top = worker(5, 0, 0, 1 * S, 1);
    model::absorb(top, row);
    EXPECT_EQ(top.processes(), 21u);
    EXPECT_EQ(top.samples, 1u + row.samples);
}

TEST(ProcessFold, TheEngineFoldsHelperChildrenAtExitsAndTellsItsSink)
{
    model::Rules rules({}, {});
    model::Engine engine(rules, [](const model::Span&) {});
    std::vector<std::pair<uint32_t, uint32_t>> told;
    engine.set_fold_sink([&](uint32_t pid, uint32_t into) {
        // both still known when told
        EXPECT_TRUE(engine.processes().count(pid));
        EXPECT_TRUE(engine.processes().count(into));
        told.emplace_back(pid, into);
    });
    engine.add_process(1, 0, true);
    auto event = [&](uint32_t type, uint32_t pid, uint64_t ts, uint32_t code) {
        lotus_proc_event p{};
        p.h = {type, pid, pid, 0, ts};
        if (type == LOTUS_EV_FORK)
            p.parent_tgid = 1;
        else
            p.exit_code = code;
        engine.consume(&p, sizeof(p));
    };
    // a subprocess a second, each gone after 10 ms; one of them killed
    for (uint32_t i = 0; i < 40; i++) {
        event(LOTUS_EV_FORK, 1000 + i, i * S, 0);
        event(LOTUS_EV_EXIT, 1000 + i, i * S + 10 * MS, i == 30 ? 9 : 0);
    }
    // at 39 s: the exits up to 37 s are due, 38 clean ones minus the 16 kept
    EXPECT_EQ(told.size(), 37u - 16u);
    for (auto [pid, into] : told)
        EXPECT_EQ(into, 1015u);
    const auto& procs = engine.processes();
    EXPECT_EQ(procs.at(1015).processes(), 22u);
    EXPECT_TRUE(procs.count(1030));  // killed: kept by its pid
    EXPECT_FALSE(procs.count(1020)); // folded
    EXPECT_EQ(procs.size(), 1 + 16 + 1 + 2u); // main, 16 kept (one a row), the killed one, the last two
}

TEST(ProcessFold, UsageFoldedGivesTheSameTableAsUnfolded)
{
    auto feed = [](model::UsageTracker& t, uint32_t pid, uint64_t from, uint64_t user_ms) {
        lotus_proc_event f{};
        f.h = {LOTUS_EV_FORK, pid, pid, 0, from};
        f.parent_tgid = 1;
        t.consume(&f, sizeof(f));
        lotus_usage u{};
        u.h = {LOTUS_EV_USAGE, pid, pid, 0, from + 500 * MS};
        u.runtime_ns = user_ms * MS;
        u.utime_ns = user_ms * MS;
        t.consume(&u, sizeof(u));
    };
    model::UsageTracker plain, folded;
    for (uint32_t i = 0; i < 20; i++) {
        feed(plain, 100 + i, i * S, 100 + i);
        feed(folded, 100 + i, i * S, 100 + i);
    }
    for (uint32_t i = 16; i < 20; i++)
        folded.fold(100 + i, 115);
    EXPECT_EQ(folded.processes().size(), 16u);
    std::map<uint32_t, model::ProcessInfo> procs;
    for (uint32_t i = 0; i < 20; i++)
        procs[100 + i] = worker(100 + i, 0, i * S, i * S + 500 * MS);
    auto a = exporter::usage_rows(plain, procs);
    for (uint32_t i = 16; i < 20; i++)
        procs.erase(100 + i);
    auto b = exporter::usage_rows(folded, procs);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); i++) {
        EXPECT_EQ(a[i].role, b[i].role);
        EXPECT_EQ(a[i].processes, b[i].processes);
        EXPECT_DOUBLE_EQ(a[i].wall_s, b[i].wall_s);
        EXPECT_DOUBLE_EQ(a[i].user_s, b[i].user_s);
        EXPECT_DOUBLE_EQ(a[i].cpu_avg_pct, b[i].cpu_avg_pct);
    }
    EXPECT_EQ(b[0].processes, 20u);
}

TEST(ProcessFold, TimelineBinsAndAliveTimeJoinTheRow)
{
    exporter::Timeline tl(0);
    auto batch = [&](uint32_t pid, uint64_t from, uint64_t to) {
        model::Span s;
        s.kind = model::SpanKind::Batch;
        s.pid = s.tid = pid;
        s.start_ns = from;
        s.end_ns = to;
        tl.add(s);
    };
    batch(10, 0, 100 * MS);       // bins 0-1
    batch(11, 200 * MS, 250 * MS); // bin 4
    tl.fold(11, 10, 150 * MS, 300 * MS);
    EXPECT_FALSE(tl.busy_ns().count(11));
    const auto& b = tl.busy_ns().at(10);
    EXPECT_EQ(b.at(0), 50 * MS);
    EXPECT_EQ(b.at(4), 50 * MS);
    const auto& alive = tl.folded_alive_ns().at(10);
    EXPECT_EQ(alive.at(3), 50 * MS);
    EXPECT_EQ(alive.at(4), 50 * MS);
    EXPECT_EQ(alive.at(5), 50 * MS);
    EXPECT_EQ(alive.at(0), 0u);
}

TEST(ProcessFold, NeverAProcessANoteNamesNorAPidUsedAgain)
{
    auto procs = job(20);
    auto all = model::folds_due(procs, 100 * S);
    ASSERT_FALSE(all.empty());
    uint32_t named = all.front().first;
    for (auto [pid, into] : model::folds_due(procs, 100 * S, {named}))
        EXPECT_NE(pid, named);

    // the engine: a FORK of a pid whose process exited makes it a live process again
    model::Rules rules({}, {});
    model::Engine engine(rules, [](const model::Span&) {});
    engine.add_process(1, 0, true);
    lotus_proc_event p{};
    p.h = {LOTUS_EV_FORK, 7, 7, 0, 1 * S};
    p.parent_tgid = 1;
    engine.consume(&p, sizeof(p));
    p.h = {LOTUS_EV_EXIT, 7, 7, 0, 2 * S};
    p.exit_code = 9;
    engine.consume(&p, sizeof(p));
    EXPECT_TRUE(engine.processes().at(7).exited);
    p.h = {LOTUS_EV_FORK, 7, 7, 0, 3 * S};
    p.parent_tgid = 1;
    engine.consume(&p, sizeof(p));
    const auto& again = engine.processes().at(7);
    EXPECT_FALSE(again.exited);
    EXPECT_EQ(model::how_it_ended(again), "");
}
