#include "object_calls_switch.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "common/clock.h"
#include "model/user_records.h"

namespace lotus::capture {

void ObjectCallsSwitch::record(uint32_t tgid, bool on, uint64_t ts_ns)
{
    while (probe_.poll(0) > 0) { // every record the probes wrote before the change, first
    }
    model::RecordObjectCalls r{model::kRecordObjectCalls, tgid, tgid, 0, ts_ns, on ? 1u : 0u, mode_};
    feed_(&r, sizeof(r));
}

void ObjectCallsSwitch::closed(Closing& c)
{
    c.done.wait();
    // A process that exited meanwhile, its pid taken by a new one with every probe: the stop is not the new one's.
    if (!probe_.has_object_calls(c.tgid))
        record(c.tgid, false, c.began_ns);
}

void ObjectCallsSwitch::apply(bool ending)
{
    for (size_t i = 0; i < closing_.size();) {
        if (!ending && closing_[i].done.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
            i++;
            continue;
        }
        Closing c = std::move(closing_[i]);
        closing_.erase(closing_.begin() + static_cast<std::ptrdiff_t>(i));
        closed(c);
    }
    auto asked = std::move(asked_);
    asked_.clear();
    if (ending)
        return;
    auto closing = [this](uint32_t tgid) {
        return std::any_of(closing_.begin(), closing_.end(), [tgid](const Closing& c) { return c.tgid == tgid; });
    };
    for (const auto& a : asked) {
        if (closing(a.tgid)) {
            asked_.push_back(a); // after its close (pending() keeps the loop coming back)
            continue;
        }
        if (!a.on) {
            common::UniqueFd fd = probe_.detach_object_calls(a.tgid);
            if (!fd)
                continue; // (gone, or never had one)
            uint64_t began = common::monotonic_ns();
            std::future<void> done;
            try {
                done = std::async(std::launch::async, [f = std::move(fd)]() mutable { f.reset(); });
            } catch (const std::system_error&) {
                // no thread to spare: closed here, with the task that did not start
            }
            if (done.valid())
                closing_.push_back({a.tgid, began, std::move(done)});
            else
                record(a.tgid, false, began);
            continue;
        }
        if (probe_.attach_object_calls(a.tgid))
            record(a.tgid, true, common::monotonic_ns());
    }
}

} // namespace lotus::capture
