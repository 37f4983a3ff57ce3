// The one switch on a record's type (model/record_dispatch.h).
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "model/record_dispatch.h"

using namespace lotus;

namespace {

struct Seen : model::RecordHandler {
    std::vector<int> calls;
    model::RecordUsage usage_read{};
    void py_entry(const lotus_py_entry&) override { calls.push_back(LOTUS_EV_PY_ENTRY); }
    void process_event(const lotus_proc_event& p) override { calls.push_back(static_cast<int>(p.h.type)); }
    void getppid(const lotus_event_header&) override { calls.push_back(LOTUS_EV_GETPPID); }
    void usage(const model::RecordUsage& r) override
    {
        calls.push_back(model::kRecordUsage);
        usage_read = r;
    }
    model::RecordEnd end_read{};
    void end(const model::RecordEnd& e) override
    {
        calls.push_back(model::kRecordEnd);
        end_read = e;
    }
};

} // namespace

TEST(RecordDispatch, EachTypeToItsHandlerOnceLongEnough)
{
    Seen s;
    lotus_py_entry e{};
    e.h.type = LOTUS_EV_PY_ENTRY;
    EXPECT_TRUE(model::dispatch(&e, sizeof(e), s));
    EXPECT_FALSE(model::dispatch(&e, sizeof(e) - 1, s)); // cut short: refused, nothing called
    lotus_proc_event p{};
    for (auto t : {LOTUS_EV_FORK, LOTUS_EV_EXIT, LOTUS_EV_EXEC}) {
        p.h.type = t;
        EXPECT_TRUE(model::dispatch(&p, sizeof(p), s));
    }
    lotus_event_header h{LOTUS_EV_GETPPID, 1, 1, 0, 0};
    EXPECT_TRUE(model::dispatch(&h, sizeof(h), s)); // a header-only record
    h.type = 999;
    EXPECT_FALSE(model::dispatch(&h, sizeof(h), s)); // no known type
    EXPECT_FALSE(model::dispatch(&h, 3, s));         // not even a header
    EXPECT_EQ(s.calls, (std::vector<int>{LOTUS_EV_PY_ENTRY, LOTUS_EV_FORK, LOTUS_EV_EXIT, LOTUS_EV_EXEC,
                                         LOTUS_EV_GETPPID}));
}

TEST(RecordDispatch, AnOlderUsageRecordIsReadWithoutItsNetworkFields)
{
    Seen s;
    model::RecordUsage r{};
    r.type = model::kRecordUsage;
    r.rss_kb = 123;
    r.flags = model::kUsageNet;
    r.net_sent = 77;
    EXPECT_TRUE(model::dispatch(&r, offsetof(model::RecordUsage, net_sent), s));
    EXPECT_EQ(s.usage_read.rss_kb, 123u);
    EXPECT_EQ(s.usage_read.flags, 0u); // not counted in that file
    EXPECT_EQ(s.usage_read.net_sent, 0u);
    EXPECT_FALSE(model::dispatch(&r, offsetof(model::RecordUsage, net_sent) - 1, s));
    EXPECT_TRUE(model::dispatch(&r, sizeof(r), s));
    EXPECT_EQ(s.usage_read.flags, model::kUsageNet);
    EXPECT_EQ(s.usage_read.net_sent, 77u);
}

// Records made before private memory (USS) was read end at net_recv: theirs is not known (kNoPss), never 0.
TEST(RecordDispatch, AnOlderUsageRecordHasNoPrivateMemory)
{
    Seen s;
    model::RecordUsage r{};
    r.type = model::kRecordUsage;
    r.flags = model::kUsageNet;
    r.net_recv = 5;
    r.private_kb = 4096;
    EXPECT_TRUE(model::dispatch(&r, offsetof(model::RecordUsage, private_kb), s));
    EXPECT_EQ(s.usage_read.flags, model::kUsageNet);
    EXPECT_EQ(s.usage_read.net_recv, 5u);
    EXPECT_EQ(s.usage_read.private_kb, model::kNoPss);
    EXPECT_EQ(s.usage_read.shared_dirty_kb, model::kNoPss);
    EXPECT_EQ(s.usage_read.anon_kb, model::kNoPss);
    r.shared_dirty_kb = 100;
    r.anon_kb = 200;
    EXPECT_TRUE(model::dispatch(&r, sizeof(r), s));
    EXPECT_EQ(s.usage_read.anon_kb, 200u);
    EXPECT_EQ(s.usage_read.private_kb, 4096u);
    EXPECT_EQ(s.usage_read.shared_dirty_kb, 100u);
}

// The capture's end record (its counts as tracing stopped) is a record of the stream like the others.
TEST(RecordDispatch, TheEndRecordCarriesTheCapturesCounts)
{
    Seen s;
    model::RecordEnd e{model::kRecordEnd, 1, 1, 0, 5, 1000, 7};
    EXPECT_FALSE(model::dispatch(&e, sizeof(e) - 8, s)); // without its lost count: refused
    EXPECT_TRUE(model::dispatch(&e, sizeof(e), s));
    EXPECT_EQ(s.calls, (std::vector<int>{model::kRecordEnd}));
    EXPECT_EQ(s.end_read.submitted, 1000u);
    EXPECT_EQ(s.end_read.lost, 7u);
}

TEST(RecordDispatch, ACgroupRecordReachesItsHandlerWhole)
{
    struct Cg : model::RecordHandler {
        int seen = 0;
        model::RecordCgroup r{};
        void cgroup(const model::RecordCgroup& c) override
        {
            seen++;
            r = c;
        }
    } h;
    model::RecordCgroup r{};
    r.type = model::kRecordCgroup;
    r.quota_us = 50000;
    r.throttled_periods = 7;
    EXPECT_TRUE(model::dispatch(&r, sizeof(r), h));
    EXPECT_EQ(h.seen, 1);
    EXPECT_EQ(h.r.quota_us, 50000);
    EXPECT_EQ(h.r.throttled_periods, 7u);
    EXPECT_FALSE(model::dispatch(&r, sizeof(r) - 1, h)); // cut short: refused
    EXPECT_EQ(h.seen, 1);
}

TEST(RecordDispatch, AnOpensReturnGoesToItsHandler)
{
    struct Done : model::RecordHandler {
        int64_t ret = 0;
        uint64_t size = 0;
        void open_done(const lotus_open_done& o) override { ret = o.ret, size = o.size; }
    } d;
    lotus_open_done o{};
    o.h.type = LOTUS_EV_OPEN_DONE;
    o.ret = 5;
    o.size = 4096;
    EXPECT_TRUE(model::dispatch(&o, sizeof(o), d));
    EXPECT_EQ(d.ret, 5);
    EXPECT_EQ(d.size, 4096u);
    EXPECT_FALSE(model::dispatch(&o, sizeof(o) - 1, d));
}
