// The live view of `lotus-bpf top`: rates, means and busy shares over the last seconds of spans, taken from the
// spans as they end, and the text frame that shows them. Spans are emitted when they end, so a call still running
// counts once it returns; busy and waiting shares are the time inside spans that ended, clipped to the window.
#pragma once
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/spans.h"

namespace lotus::exporter {

struct LiveHeader {
    uint32_t pid = 0;
    std::string python;
    uint64_t t0_ns = 0; // tracing began (CLOCK_MONOTONIC)
    uint64_t events = 0, lost = 0;
};

class LiveTable {
public:
    static constexpr uint64_t kWindowNs = 2'000'000'000;
    void add(const model::Span& s);
    // The view at now_ns (CLOCK_MONOTONIC), lines cut at `width` columns, at most `height` lines.
    std::string frame(uint64_t now_ns, const LiveHeader& h, const std::map<uint32_t, model::ProcessInfo>& processes,
                      size_t width = 120, size_t height = 50);

private:
    struct Recent {
        uint64_t start, end;
        uint32_t pid, name;
        model::SpanKind kind;
    };
    struct Total {
        uint64_t count = 0;
        double ns = 0;
    };
    uint32_t name_id(const std::string& name);
    std::deque<Recent> recent_; // spans that ended in the window, in the order they ended
    std::vector<std::string> names_;
    std::unordered_map<std::string, uint32_t> ids_;
    std::vector<Total> totals_; // per name, the whole run
    uint64_t samples_ = 0;
};

} // namespace lotus::exporter
