#include "process_links.h"

#include <chrono>
#include <system_error>
#include <thread>

namespace lotus::capture {

void close_in_parallel(std::vector<common::UniqueFd> fds)
{
    std::vector<std::thread> threads;
    for (auto& fd : fds) {
        if (!fd)
            continue;
        int raw = fd.release();
        try {
            threads.emplace_back([raw] { ::close(raw); });
        } catch (const std::system_error&) {
            ::close(raw); // no thread to spare: this one waits here
        }
    }
    for (auto& t : threads)
        t.join();
}

void ProcessLinks::add(uint32_t tgid, std::vector<common::UniqueFd> fds)
{
    auto it = links_.find(tgid);
    if (it != links_.end()) {
        close_later(std::move(it->second));
        stale_exits_[tgid]++;
        it->second = std::move(fds);
        return;
    }
    links_.emplace(tgid, std::move(fds));
}

void ProcessLinks::append(uint32_t tgid, std::vector<common::UniqueFd> fds)
{
    auto& v = links_[tgid];
    for (auto& fd : fds)
        v.push_back(std::move(fd));
}

std::vector<uint32_t> ProcessLinks::tgids() const
{
    std::vector<uint32_t> out;
    for (const auto& [tgid, fds] : links_)
        out.push_back(tgid);
    return out;
}

common::UniqueFd ProcessLinks::take(uint32_t tgid, int fd)
{
    auto it = links_.find(tgid);
    if (it == links_.end())
        return {};
    for (auto l = it->second.begin(); l != it->second.end(); ++l)
        if (l->get() == fd) {
            common::UniqueFd out = std::move(*l);
            it->second.erase(l);
            return out;
        }
    return {};
}

void ProcessLinks::exited(uint32_t tgid)
{
    if (auto s = stale_exits_.find(tgid); s != stale_exits_.end()) {
        if (--s->second == 0)
            stale_exits_.erase(s);
        return;
    }
    auto it = links_.find(tgid);
    if (it == links_.end())
        return;
    close_later(std::move(it->second));
    links_.erase(it);
}

void ProcessLinks::close_later(std::vector<common::UniqueFd> fds)
{
    // Forget the closings that are done.
    std::erase_if(closing_, [](std::future<void>& f) {
        return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    });
    try {
        // One thread for the process's links, closing them one after the other: a thread per link cost the tracer
        // a clone and a stack's unmapping each, per worker per epoch (close_in_parallel is for the stop, whose
        // latency counts).
        closing_.push_back(std::async(std::launch::async, [v = std::move(fds)]() mutable { v.clear(); }));
    } catch (const std::system_error&) {
        // no thread to spare: the descriptors were closed here, with the task that was not started
    }
}

std::vector<common::UniqueFd> ProcessLinks::release_all()
{
    std::vector<common::UniqueFd> all;
    for (auto& [tgid, fds] : links_)
        for (auto& fd : fds)
            all.push_back(std::move(fd));
    links_.clear();
    stale_exits_.clear();
    return all;
}

void ProcessLinks::clear()
{
    close_in_parallel(release_all());
    for (auto& f : closing_)
        f.wait();
    closing_.clear();
}

} // namespace lotus::capture
