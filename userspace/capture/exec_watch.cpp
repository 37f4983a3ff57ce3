#include "exec_watch.h"

#include <cerrno>
#include <cstring>

#include <bpf/libbpf.h>
#include <fmt/format.h>

#include "exec_watch.skel.h"
#include "exec_watch_abi.h"

namespace lotus::capture {

void ExecWatch::SkeletonFree::operator()(exec_watch_bpf* s) const { exec_watch_bpf__destroy(s); }
void ExecWatch::RingFree::operator()(ring_buffer* r) const { ring_buffer__free(r); }

std::unique_ptr<ExecWatch> ExecWatch::open(std::string& why)
{
    std::unique_ptr<ExecWatch> w(new ExecWatch());
    w->skel_.reset(exec_watch_bpf__open_and_load());
    if (!w->skel_) {
        why = fmt::format("cannot load the exec watch: {}", strerror(errno));
        return nullptr;
    }
    if (exec_watch_bpf__attach(w->skel_.get()) != 0) {
        why = fmt::format("cannot attach the exec watch: {}", strerror(errno));
        return nullptr;
    }
    auto on_event = [](void* ctx, void* data, size_t len) -> int {
        if (len >= sizeof(lotus_exec_event))
            static_cast<ExecWatch*>(ctx)->pending_.push_back(static_cast<int>(static_cast<lotus_exec_event*>(data)->pid));
        return 0;
    };
    w->rb_.reset(ring_buffer__new(bpf_map__fd(w->skel_->maps.exec_events), on_event, w.get(), nullptr));
    if (!w->rb_) {
        why = fmt::format("cannot read the exec watch's ring: {}", strerror(errno));
        return nullptr;
    }
    return w;
}

ExecWatch::~ExecWatch() = default;

std::vector<int> ExecWatch::poll(int timeout_ms)
{
    pending_.clear();
    ring_buffer__poll(rb_.get(), timeout_ms); // (EINTR: a signal, the caller's loop looks at it)
    return std::move(pending_);
}

} // namespace lotus::capture
