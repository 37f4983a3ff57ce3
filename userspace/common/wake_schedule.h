// How long the tracer's loop sleeps when nothing wakes it: until the next thing it must do on its own time (a
// resource reading, the status line, a redraw, the end of --duration), at most a cap. Records (BPF's batched
// wake-ups), held children and the target's exit wake it otherwise. Each wake-up costs the tracer CPU
// (docs/performance.md, "What costs what": resource readings), so it does not wake on a fixed tick.
#pragma once

#include <cstdint>

namespace lotus::common {

class WakeSchedule {
public:
    WakeSchedule(uint64_t now_ns, int cap_ms) : now_(now_ns), cap_ms_(cap_ms) {}
    // Something is due at this time (monotonic ns; already past: wake at once).
    void due_at(uint64_t ns)
    {
        if (ns < earliest_)
            earliest_ = ns;
    }
    // The sleep in ms: rounded up, so that what is due is due when the loop wakes.
    int sleep_ms() const
    {
        if (earliest_ <= now_)
            return 0;
        uint64_t ns = earliest_ - now_;
        if (ns >= static_cast<uint64_t>(cap_ms_) * 1'000'000)
            return cap_ms_;
        return static_cast<int>((ns + 999'999) / 1'000'000);
    }

private:
    uint64_t now_;
    int cap_ms_;
    uint64_t earliest_ = UINT64_MAX;
};

} // namespace lotus::common
