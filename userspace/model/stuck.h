// Stuck processes. The live rule (StuckWatch): a traced process inside work (a batch it prepares, or a sample, op or
// --span call) that has ended no span for its threshold is stuck, from the later of its last span's end and the
// start of that work; it resumes when it ends a span again. The threshold is --stuck-after where given, else
// max(kFloorNs, kFactor x the median of its own steps: a worker's batch preparation, a training loop's time from
// one batch to the next). A process idle between tasks (a worker whose batches wait to be consumed), or a loop
// waiting in next(), is in no work of its own and is never named. What the watch said enters the stream as
// RecordStuck, so the summary's episodes (StuckEpisodes) come from the stream and a replay gives the same.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/record_dispatch.h"
#include "model/spans.h"
#include "model/user_records.h"

namespace lotus::model {

// Where a process is at work now (Engine::open_work): since when, and the sample and batch it is in.
struct OpenWork {
    uint64_t since_ns = 0;
    int64_t sample = -1, batch = -1;
    std::string op; // the innermost open op's name ("" none)
};

class StuckWatch {
public:
    static constexpr uint64_t kFloorNs = 10'000'000'000ull;
    static constexpr uint64_t kFactor = 10;
    static constexpr size_t kSteps = 64; // the latest steps kept per process, for their median

    explicit StuckWatch(uint64_t fixed_ns = 0) : fixed_ns_(fixed_ns) {}
    void span(const Span& s);
    uint64_t threshold_ns(uint32_t pid) const;
    // How the threshold of pid was found, for the line that names it ("--stuck-after", or the median and floor).
    std::string threshold_why(uint32_t pid) const;
    struct Change {
        uint32_t pid;
        bool stuck;            // true: became stuck; false: resumed
        uint64_t since_ns, at_ns, threshold_ns;
        OpenWork work;         // (became stuck) where it is
    };
    // At `now`, for the live processes `live`: who became stuck and who resumed. work(pid): where it is at work.
    std::vector<Change> check(uint64_t now, const std::vector<uint32_t>& live,
                              const std::function<std::optional<OpenWork>(uint32_t)>& work);
    size_t stuck_count() const;
    void forget(uint32_t pid) { procs_.erase(pid); }

private:
    struct Proc {
        uint64_t last_end = 0, last_wait_end = 0;
        std::vector<uint64_t> steps;
        size_t next = 0;
        bool stuck = false;
        uint64_t since = 0;
    };
    static void add_step(Proc& p, uint64_t ns);
    static uint64_t median(const Proc& p);
    uint64_t fixed_ns_;
    std::map<uint32_t, Proc> procs_;
};

// The episodes the stream's RecordStuck tell, for the summary: each process's time stuck, in order.
class StuckEpisodes : public RecordHandler {
public:
    struct Episode {
        uint32_t pid = 0;
        uint64_t since_ns = 0, said_ns = 0, end_ns = 0; // end_ns 0: still stuck when tracing stopped
        uint64_t threshold_ns = 0;
        int64_t sample = -1, batch = -1;
        std::string op, stack;
    };
    void consume(const void* data, size_t len) { dispatch(data, len, *this); }
    void stuck(const RecordStuck& r) override;
    const std::vector<Episode>& episodes() const { return episodes_; }

private:
    std::vector<Episode> episodes_;
};

} // namespace lotus::model
