// What the reconstruction engine produces: spans and what it learned about processes.
#pragma once
#include <cstdint>
#include <string>

namespace lotus::model {

enum class SpanKind { Sample, Op };

struct Span {
    SpanKind kind = SpanKind::Op;
    std::string name;     // "sample" for samples; the op's class for ops
    uint32_t pid = 0, tid = 0;
    uint64_t start_ns = 0, end_ns = 0; // CLOCK_MONOTONIC, from the events
    int64_t sample = -1;  // dataset index when known
    uint64_t sample_id = 0; // engine-wide number of the sample this span belongs to (1-based)
    uint32_t depth = 0;   // evaluation depth of the entry event, to trace a span back to its events
};

struct ProcessInfo {
    uint32_t pid = 0;
    uint32_t parent = 0;
    bool root = false;
    int worker_id = -1;   // DataLoader worker id, when recovered
    uint64_t samples = 0; // completed sample spans
    bool exited = false;
    std::string label() const; // "main", "worker 0", "child"
};

} // namespace lotus::model
