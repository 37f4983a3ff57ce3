// The live stuck-process watch of a traced run: model::StuckWatch's rule applied at the session's ticks; a process
// that becomes stuck is named on stderr in one line with its Python stack (and native stack where it is blocked in
// a system call), read from outside (process_dump.h), and one line when it resumes; each into the stream as a
// RecordStuck (the record file keeps them; the summary's notes come from them).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "model/engine.h"
#include "model/stuck.h"

namespace lotus::cli {

class LiveStuck {
public:
    using Feed = std::function<void(const void*, size_t)>;
    // stuck_after_s: --stuck-after (0: each process's own threshold); t0: tracing's start (times are said from it).
    LiveStuck(double stuck_after_s, uint64_t t0, Feed feed) : watch_(static_cast<uint64_t>(stuck_after_s * 1e9)),
                                                              t0_(t0), feed_(std::move(feed)) {}
    void span(const model::Span& s) { watch_.span(s); }
    // At most every kIntervalNs: who became stuck and who resumed, said (on stderr unless `silent`) and recorded.
    // `clear_line`: stderr holds a status line to clear first.
    // `force`: now, however recent the last check (the run's end, once every record is in).
    void check(uint64_t now, const model::Engine& engine, bool silent, bool clear_line, bool force = false);
    size_t stuck() const { return watch_.stuck_count(); }
    static constexpr uint64_t kIntervalNs = 500'000'000ull;

private:
    model::StuckWatch watch_;
    uint64_t t0_, last_ = 0;
    Feed feed_;
};

} // namespace lotus::cli
