// Builds synthetic lotus_abi.h records for engine tests, as the BPF programs would write them.
#pragma once
#include <cstdint>
#include <string>
#include <map>

#include <gtest/gtest.h>
#include <tuple>
#include <vector>

#include "lotus_abi.h"
#include "export/summary.h"
#include "model/engine.h"

namespace lotus::test {

class EventBuilder {
public:
    explicit EventBuilder(model::Engine& engine) : engine_(engine) {}
    // own: described in the process's own space (lotus_abi.h), not its role space's.
    void code(uint32_t tgid, uint64_t code, const std::string& name, const std::string& file = "x.py",
              bool own = false);
    // bases: tp_names of its tp_base chain, nearest first.
    void type(uint32_t tgid, uint64_t type, const std::string& name, std::vector<std::string> bases = {},
              bool own = false);
    // chain: caller code objects, innermost first, with their localsplus[1] ints.
    void entry(uint32_t tgid, uint32_t tid, uint64_t ts, uint32_t depth, uint64_t code, uint64_t self_type = 0,
               std::vector<std::pair<uint64_t, int64_t>> chain = {},
               std::vector<std::tuple<uint64_t, uint8_t, int64_t>> captures = {}, uint64_t self_obj = 0,
               uint64_t arg1_obj = 0, uint16_t own = 0);
    // ret_obj: what the frame returned (0: NULL, an exception left it).
    void ret(uint32_t tgid, uint32_t tid, uint64_t ts, uint32_t depth, uint64_t ret_obj = 1);
    // A pickled multiprocessing message read (LOTUS_MSG_IN) or written (LOTUS_MSG_OUT) on a pipe.
    void msg(uint32_t tgid, uint32_t tid, uint64_t ts, uint8_t dir, const std::string& pickle, uint64_t file = 7,
             uint16_t mode = 0010000 /* S_IFIFO */);
    void getppid(uint32_t tgid, uint32_t tid, uint64_t ts);
    // A thread's name (comm), at first sight or renamed; longer names are cut as the kernel does (15 bytes).
    void thread_name(uint32_t tgid, uint32_t tid, uint64_t ts, const std::string& name);
    // FORK/EXEC: space is the role space BPF names (0: none, as in ABI 2 files).
    void proc(uint32_t type, uint32_t tgid, uint32_t parent, uint32_t space = 0);
    // Capture slots of a code object (RecordSlots), as the session writes them after its CODE record.
    void slots(uint32_t tgid, uint64_t code, const std::vector<uint8_t>& slots);
    // What a test's role sink resolved while a CODE record was consumed: code() puts them in the stream
    // right after it, as the session does.
    std::vector<std::tuple<uint32_t, uint64_t, std::vector<uint8_t>>> resolved;

private:
    model::Engine& engine_;
};

// A role sink (FakeRequests' roles) that gives each captured local of a code object a slot (10, 11, ...) into
// ev.resolved, as the session does. (ev is used only as records come: it may be built after the sink.)
inline auto slot_resolver(EventBuilder& ev)
{
    return [&ev](uint32_t tgid, uint32_t, uint64_t code, uint64_t, const model::CodeRole& role) {
        std::vector<uint8_t> slots;
        for (size_t i = 0; i < role.capture_locals.size(); i++)
            slots.push_back(static_cast<uint8_t>(10 + i));
        if (!slots.empty())
            ev.resolved.emplace_back(tgid, code, slots);
    };
}

// A training process P with DataLoader workers W0 and W1: the batch tracker and the summary a test feeds by hand.
struct JobFixture : ::testing::Test {
    static constexpr uint32_t P = 10, W0 = 11, W1 = 12;
    std::vector<model::Span> sunk;
    model::BatchTracker::SpanSink sink = [this](const model::Span& s) { sunk.push_back(s); };
    std::map<uint32_t, model::ProcessInfo> processes;
    model::BatchTracker tracker{sink, processes};
    exporter::Summary summary;
};

// DataLoader workers of `owner` (ids 0, 1... in the order given), seen for 1 s from 0 with `busy_ns` in batches.
void add_workers(std::map<uint32_t, model::ProcessInfo>& processes, uint32_t owner, std::vector<uint32_t> pids,
                 uint64_t batches, uint64_t busy_ns, int loader = -1);

// The first bytes of the pickles a DataLoader's queues carry (protocol 4, as ForkingPickler writes them).
std::string pickled_indexed(int64_t index, bool stop = false); // (index, [...]) or (index, stop marker)
std::string pickled_resume();                                  // _ResumeIteration(seed)

// A span's arg as text: integers and booleans as written, durations in ms with 3 decimals; "" when absent.
std::string arg_text(const model::Span& s, const std::string& key);
// A duration arg in ns; -1 when absent.
int64_t arg_ns(const model::Span& s, const std::string& key);

// The spans of one kind, in emission order.
std::vector<model::Span> spans_of(const std::vector<model::Span>& spans, model::SpanKind kind);

} // namespace lotus::test
