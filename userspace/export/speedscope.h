// The speedscope file (--speedscope FILE; https://www.speedscope.app's file format): a flame graph of the pipeline
// that adds up. One evented profile per role (a DataLoader worker id merges the processes that played it, one
// after another; a training process is a role of its own), with frames by name: ops and --span functions (as the
// summary names their rows), the samples' loading, the batches' collation, native functions and the training
// loop's waits. Samples and batches are not frames, so that an op is one frame at the root of every stack:
// speedscope's Left Heavy and Sandwich views then give each op's total over all samples, the summary's.
// Like the summary it covers the whole run (not --window). Spans of one role that overlap without nesting (two
// processes of one worker id alive at once, two threads of a training process) cannot be one stack: they are
// left out, and the file's name and stderr say how many.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/output_file.h"
#include "model/spans.h"

namespace lotus::exporter {

class SpeedscopeWriter {
public:
    // Spans kept for the file, at most this many (about 32 bytes each); later ones are left out and counted.
    static constexpr size_t kMaxSpans = 4'000'000;

    void add(const model::Span& s);
    // pid was folded into its role's row `into` (model/process_fold.h): its spans are that process's role's.
    void folded(uint32_t pid, uint32_t into) { alias_[pid] = into; }
    // The file, whole: profiles named after the processes' roles, times from t0_ns. Returns how many spans were
    // left out.
    uint64_t write(common::OutputFile& out, const std::map<uint32_t, model::ProcessInfo>& processes, const std::string& tool,
                   uint64_t t0_ns) const;

private:
    struct Item {
        uint64_t start, end;
        uint32_t frame, pid;
        bool main_thread; // a process's main thread (its pid's): other threads' spans go to a profile of their own
    };
    uint32_t frame_id(const std::string& name);
    std::vector<std::string> frames_;
    std::unordered_map<std::string, uint32_t> frame_ids_;
    std::vector<Item> items_;
    uint64_t past_cap_ = 0;
    std::unordered_map<uint32_t, uint32_t> alias_;
};

} // namespace lotus::exporter
