// Engine::open_work: where a process is at work now, for the live stuck-process watch (model/stuck.h).
#include "model/engine.h"

namespace lotus::model {

std::optional<OpenWork> Engine::open_work(uint32_t pid) const
{
    std::optional<OpenWork> w;
    auto at = [&](uint64_t start) {
        if (!w)
            w = OpenWork{start, -1, -1};
        else
            w->since_ns = std::min(w->since_ns, start);
    };
    for (const auto& [tid, stack] : stacks_) {
        auto owner = thread_owner_.find(tid);
        if (owner == thread_owner_.end() || owner->second != pid)
            continue;
        for (const auto& o : stack) {
            if (o.kind != OpenKind::Sample && o.kind != OpenKind::Op && o.kind != OpenKind::Inner &&
                o.kind != OpenKind::Py)
                continue; // next() and a DataLoader's __iter__: waiting for data, not work of its own
            at(o.start_ns);
            if (o.kind == OpenKind::Sample && o.sample >= 0)
                w->sample = o.sample;
            if (o.kind == OpenKind::Op) { // named as its return will name it (op_name), from the descriptions so far
                const CodeInfo* info = nullptr;
                if (auto* slot = slot_code(o.code))
                    info = &slot->info;
                else if (auto* d = spaces_.code(pid, o.code, o.code_own))
                    info = &d->info;
                auto* type = spaces_.type(pid, o.self_type, o.type_own);
                std::string type_name = type ? type->name : std::string();
                w->op = rules_.op_name(info ? *info : CodeInfo{}, type_name.empty() ? nullptr : &type_name);
            }
        }
    }
    if (auto b = batches_.open_batch(pid)) {
        at(b->first);
        w->batch = b->second;
    }
    return w;
}

std::optional<std::pair<uint64_t, int64_t>> BatchTracker::open_batch(uint32_t pid) const
{
    std::optional<std::pair<uint64_t, int64_t>> out;
    for (const auto& [key, t] : threads_)
        if (static_cast<uint32_t>(key >> 32) == pid && t.in_batch && (!out || t.start < out->first))
            out = std::make_pair(t.start, t.idx);
    return out;
}

} // namespace lotus::model
