#include "object_calls_switch.h"

#include <chrono>
#include <system_error>

#include "common/clock.h"
#include "model/user_records.h"

namespace lotus::capture {

void ObjectCallsSwitch::record(uint32_t tgid, bool on, uint64_t ts_ns)
{
    while (probe_.poll(0) > 0) { // every record the probes wrote before the change, first
    }
    model::RecordObjectCalls r{model::kRecordObjectCalls, tgid, tgid, 0, ts_ns, on ? 1u : 0u, 0};
    feed_(&r, sizeof(r));
}

void ObjectCallsSwitch::closed(Closing& c)
{
    c.done.wait();
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
    for (const auto& a : asked) {
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
        // Its link's close, if under way, ends first.
        for (size_t i = 0; i < closing_.size(); i++)
            if (closing_[i].tgid == a.tgid) {
                Closing c = std::move(closing_[i]);
                closing_.erase(closing_.begin() + static_cast<std::ptrdiff_t>(i));
                closed(c);
                break;
            }
        if (probe_.attach_object_calls(a.tgid))
            record(a.tgid, true, common::monotonic_ns());
    }
}

} // namespace lotus::capture
