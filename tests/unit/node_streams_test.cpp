#include <gtest/gtest.h>

#include <cstring>

#include "lotus_abi.h"
#include "model/node_streams.h"
#include "model/user_records.h"

using namespace lotus;

TEST(NodeStreams, IdsSpacesPipesAndFunctionsMoveTogetherAndTimeShifts)
{
    model::StreamShift shift{2, -1000};
    lotus_proc_event fork{};
    fork.h = {LOTUS_EV_FORK, 300, 300, 0, 5000};
    fork.parent_tgid = 200;
    fork.space = 200;
    model::shift_record(reinterpret_cast<uint8_t*>(&fork), sizeof(fork), shift);
    EXPECT_EQ(fork.h.tgid, 300 + 2 * model::kNodeIdStride);
    EXPECT_EQ(fork.parent_tgid, 200 + 2 * model::kNodeIdStride);
    EXPECT_EQ(fork.space, 200 + 2 * model::kNodeIdStride); // (a known process's space is its pid: still equal)
    EXPECT_EQ(fork.h.ts_ns, 4000u);
    EXPECT_EQ(model::node_local_id(fork.h.tgid), 300u);

    lotus_proc_event exec{};
    exec.h = {LOTUS_EV_EXEC, 300, 300, 0, 6000};
    exec.space = LOTUS_SPACE_EXEC_BASE + 3;
    model::shift_record(reinterpret_cast<uint8_t*>(&exec), sizeof(exec), shift);
    EXPECT_EQ(exec.space, LOTUS_SPACE_EXEC_BASE + 3 + 2 * model::kNodeIdStride);
    EXPECT_LT(exec.space, 3 * model::kNodeIdStride); // inside its node's range

    lotus_msg msg{};
    msg.h = {LOTUS_EV_MSG, 300, 301, 0, 7000};
    msg.file = 12345;
    model::shift_record(reinterpret_cast<uint8_t*>(&msg), sizeof(msg), shift);
    EXPECT_NE(msg.file, 12345u);
    EXPECT_EQ(msg.h.tid, 301 + 2 * model::kNodeIdStride);

    model::RecordNativeFunc f{};
    f.type = model::kRecordNativeFunc;
    f.tgid = 300;
    f.func = 7;
    lotus_native n{};
    n.h = {LOTUS_EV_NATIVE_ENTRY, 300, 300, 0, 8000};
    n.func = 7;
    model::shift_record(reinterpret_cast<uint8_t*>(&f), sizeof(f), shift);
    model::shift_record(reinterpret_cast<uint8_t*>(&n), sizeof(n), shift);
    EXPECT_EQ(f.func, n.func);
    EXPECT_NE(f.func, 7u);

    // The own-space bit stays where it is.
    lotus_proc_event own{};
    own.h = {LOTUS_EV_FORK, 9, 9, 0, 1};
    own.space = 9 | LOTUS_SPACE_OWN;
    model::shift_record(reinterpret_cast<uint8_t*>(&own), sizeof(own), shift);
    EXPECT_EQ(own.space, (9 + 2 * model::kNodeIdStride) | LOTUS_SPACE_OWN);
}

TEST(NodeStreams, TheFirstNodeKeepsItsIdsAndOnlyItsClockMoves)
{
    model::StreamShift shift{0, 250};
    model::RecordProcess p{model::kRecordProcess, 42, 42, 0, 100, 41, 0};
    model::shift_record(reinterpret_cast<uint8_t*>(&p), sizeof(p), shift);
    EXPECT_EQ(p.pid, 42u);
    EXPECT_EQ(p.parent, 41u);
    EXPECT_EQ(p.ts_ns, 350u);
    model::RecordNativeLate late{};
    late.type = model::kRecordNativeLate;
    late.ts_ns = 10;
    late.loaded_ns = 5;
    model::shift_record(reinterpret_cast<uint8_t*>(&late), sizeof(late), shift);
    EXPECT_EQ(late.loaded_ns, 255u);
    // A record too short for its header is left alone.
    uint8_t tiny[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    model::shift_record(tiny, sizeof(tiny), shift);
    EXPECT_EQ(tiny[7], 8);
}
