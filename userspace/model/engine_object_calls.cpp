// --trainer-calls: when a training process's object calls need probing (Engine::CallsSink), and what the stream
// says of the changes (RecordObjectCalls).
#include "engine.h"

namespace lotus::model {

void Engine::loader_iterated(uint32_t tgid, uint64_t ts, bool single_process)
{
    ProcessInfo& p = process(tgid);
    if (p.calls_off_ns && !p.calls_on_ns && single_process)
        p.batches_unprobed++; // (its samples' calls, made in this next(), may be unseen)
    if (trainer_calls_ == TrainerCalls::On)
        return;
    auto& asked = calls_asked_[tgid];
    if (!single_process || trainer_calls_ == TrainerCalls::Off) {
        // Its pipeline runs in the workers: nothing of it passes through this process's object calls.
        if (asked != CallsAsked::None)
            return;
        asked = CallsAsked::Off;
        if (calls_sink_)
            calls_sink_(tgid, false);
        else if (!p.calls_kept_ns)
            p.calls_kept_ns = ts;
        return;
    }
    // A loader without workers: its pipeline runs here, in next().
    if (asked == CallsAsked::Off && calls_sink_)
        calls_sink_(tgid, true);
    asked = CallsAsked::OnForGood;
}

void Engine::object_calls(const RecordObjectCalls& r)
{
    ProcessInfo& p = process(r.tgid);
    if (r.on) {
        if (p.calls_off_ns && !p.calls_on_ns)
            p.calls_on_ns = r.ts_ns;
        return;
    }
    if (!p.calls_off_ns)
        p.calls_off_ns = r.ts_ns;
    // Its object calls still open will never return (the record follows everything the probe wrote): they go,
    // with what they opened above them.
    for (auto& [tid, stack] : stacks_) {
        auto owner = thread_owner_.find(tid);
        if (owner == thread_owner_.end() || owner->second != r.tgid)
            continue;
        size_t cut = stack.size();
        for (size_t i = 0; i < stack.size() && cut == stack.size(); i++)
            if (stack[i].code == LOTUS_SLOT_CALL)
                cut = i;
        while (stack.size() > cut) {
            p.calls_cut++;
            discard(stack);
        }
    }
}

} // namespace lotus::model
