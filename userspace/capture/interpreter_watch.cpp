#include "interpreter_watch.h"

#include <algorithm>
#include <cstring>

#include "model/user_records.h"

namespace lotus::capture {

void InterpreterWatch::check(uint64_t now_ns)
{
    constexpr uint64_t kLoaderWaitNs = 10'000'000'000ull; // a loader maps its libraries within milliseconds
    for (auto it = pending_.begin(); it != pending_.end();) {
        auto other = target::other_interpreter(static_cast<int>(it->first), probed_);
        if (!other && now_ns - it->second < kLoaderWaitNs) {
            ++it;
            continue;
        }
        if (other && !other->empty()) {
            model::RecordOtherInterpreter r{};
            r.type = model::kRecordOtherInterpreter;
            r.tgid = r.tid = it->first;
            r.ts_ns = now_ns;
            std::memcpy(r.path, other->data(), std::min(other->size(), sizeof(r.path) - 1));
            emit_(&r, sizeof(r));
        }
        it = pending_.erase(it);
    }
}

} // namespace lotus::capture
