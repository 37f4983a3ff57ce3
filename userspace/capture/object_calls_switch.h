// --trainer-calls: takes a training process's object-calls probe away and puts it back, as the engine asks
// (model::CaptureRequests::object_calls), and says in the record stream when each change took effect (RecordObjectCalls).
#pragma once
#include <cstdint>
#include <functional>
#include <future>
#include <vector>

#include "probe.h"

namespace lotus::capture {

class ObjectCallsSwitch {
public:
    using Sink = std::function<void(const void* data, size_t len)>; // a record into the stream
    // mode: what the records say asked for the stops (model::kCallsAuto, kCallsOff).
    ObjectCallsSwitch(Probe& probe, Sink feed, uint32_t mode) : probe_(probe), feed_(std::move(feed)), mode_(mode) {}
    ~ObjectCallsSwitch() // (apply(true) before the probe closes puts their records in)
    {
        for (auto& c : closing_)
            c.done.wait();
    }
    ObjectCallsSwitch(const ObjectCallsSwitch&) = delete;
    ObjectCallsSwitch& operator=(const ObjectCallsSwitch&) = delete;

    // Asked while the engine reads a record: done at the next apply(), outside the record's delivery.
    void ask(uint32_t tgid, bool on) { asked_.push_back({tgid, on}); }
    // Does what was asked. A link's close waits for grace periods (~100 ms here), so it runs on a thread of its
    // own; once it ended, the ring is drained (no call of the process can come after) and the stop's record goes
    // in, stamped with when the close began. A link put back: the ring drained, then its record, stamped with
    // when the attach returned; asked while its close is still under way, after that close (the loop never waits
    // for one). ending: waits for every close and does nothing more that was asked.
    void apply(bool ending = false);
    // A close under way: the loop should come back soon to put its record in.
    bool pending() const { return !closing_.empty(); }

private:
    struct Ask {
        uint32_t tgid;
        bool on;
    };
    struct Closing {
        uint32_t tgid;
        uint64_t began_ns;
        std::future<void> done;
    };
    void closed(Closing& c);  // the close ended: the stop into the stream
    void record(uint32_t tgid, bool on, uint64_t ts_ns);

    Probe& probe_;
    Sink feed_;
    uint32_t mode_;
    std::vector<Ask> asked_;
    std::vector<Closing> closing_;
};

} // namespace lotus::capture
