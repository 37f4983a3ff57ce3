// --trainer-calls: when a training process's object calls need probing (CaptureRequests::object_calls), and what the stream
// says of the changes (RecordObjectCalls).
#include "engine.h"

#include <algorithm>

namespace lotus::model {

void Engine::loader_iterated(uint32_t tgid, uint64_t ts, bool single_process)
{
    ProcessInfo& p = process(tgid);
    auto& asked = calls_asked_[tgid];
    if (p.calls_off_ns && !p.calls_on_ns && single_process) {
        p.batches_unprobed++; // (its samples' calls, made in this next(), may be unseen)
        if (asked == CallsAsked::OnForGood) // (asked back: those read before the record may have been probed)
            unprobed_nexts_[tgid].push_back(ts);
    } else if (!p.calls_off_ns && single_process) {
        auto& before = nexts_before_off_[tgid];
        if (before.size() == kMaxNextsBeforeOff)
            before.erase(before.begin());
        before.push_back(ts);
    }
    TrainerCalls mode = requests_ ? requests_->trainer_calls() : TrainerCalls::Auto;
    bool switches = requests_ && requests_->switches_object_calls();
    if (mode == TrainerCalls::On)
        return;
    if (!single_process || mode == TrainerCalls::Off) {
        // Its pipeline runs in the workers: nothing of it passes through this process's object calls.
        if (asked != CallsAsked::None)
            return;
        asked = CallsAsked::Off;
        if (switches)
            requests_->object_calls(tgid, false);
        else if (!p.calls_kept_ns)
            p.calls_kept_ns = ts;
        return;
    }
    // A loader without workers, once the probe went: its pipeline runs here, in next(). Back for good (a
    // validation pass each epoch would otherwise lose its first batch's ops every time).
    if (asked == CallsAsked::Off) {
        if (switches)
            requests_->object_calls(tgid, true);
        asked = CallsAsked::OnForGood;
        if (p.calls_off_ns && !p.calls_on_ns)
            unprobed_nexts_[tgid].push_back(ts); // (this one: counted above, begun before the probe is back)
    }
}

void Engine::execed_calls(uint32_t tgid)
{
    auto it = calls_asked_.find(tgid);
    if (it == calls_asked_.end())
        return;
    if (it->second == CallsAsked::Off && requests_ && requests_->switches_object_calls())
        requests_->object_calls(tgid, true);
    calls_asked_.erase(it);
}

void Engine::object_calls(const RecordObjectCalls& r)
{
    ProcessInfo& p = process(r.tgid);
    if (r.on) {
        if (p.calls_off_ns && !p.calls_on_ns) {
            p.calls_on_ns = r.ts_ns;
            // next() calls that began after the probe was back (delivered before this record) were probed.
            auto& nexts = unprobed_nexts_[r.tgid];
            p.batches_unprobed -= static_cast<uint64_t>(
                std::count_if(nexts.begin(), nexts.end(), [&](uint64_t ts) { return ts >= r.ts_ns; }));
        }
        unprobed_nexts_.erase(r.tgid);
        return;
    }
    if (!p.calls_off_ns) {
        p.calls_off_ns = r.ts_ns;
        p.calls_off_mode = r.mode;
        // next() calls begun after the close began, read before its record (the loop went on while it closed)
        if (auto b = nexts_before_off_.find(r.tgid); b != nexts_before_off_.end())
            p.batches_unprobed += static_cast<uint64_t>(
                std::count_if(b->second.begin(), b->second.end(), [&](uint64_t ts) { return ts >= r.ts_ns; }));
    }
    nexts_before_off_.erase(r.tgid);
    // Its object calls still open will never return (the record follows everything the probe wrote): they go.
    // Other calls above them (a next() a pipeline made) are probed by other links: they stay, to return.
    for (auto& [tid, stack] : stacks_) {
        auto owner = thread_owner_.find(tid);
        if (owner == thread_owner_.end() || owner->second != r.tgid)
            continue;
        auto cut = std::remove_if(stack.begin(), stack.end(), [&](const Open& o) {
            if (o.code != LOTUS_SLOT_CALL)
                return false;
            p.calls_cut++;
            counters_.incomplete += o.ops.size();
            return true;
        });
        stack.erase(cut, stack.end());
    }
}

} // namespace lotus::model
