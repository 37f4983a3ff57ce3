#include "thread_sampling.h"

#include <sys/resource.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <set>

#include "capture_error.h"
#include "lotus_abi.h"

namespace lotus::capture {

namespace {

// Two descriptors a thread while attaching (the event, then its link): a job with many threads must not run
// out of them at the usual soft limit of 1024.
void raise_fd_limit()
{
    rlimit r{};
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
        r.rlim_cur = r.rlim_max;
        setrlimit(RLIMIT_NOFILE, &r);
    }
}

std::vector<lotus_unsampled> list_unsampled(int iter_link)
{
    common::UniqueFd it(bpf_iter_create(iter_link));
    if (!it)
        throw CaptureError(fmt::format("cannot list the traced threads: {}", strerror(errno)));
    std::vector<lotus_unsampled> out;
    lotus_unsampled buf[256];
    size_t have = 0; // bytes of a record split across reads
    for (;;) {
        ssize_t n = read(it.get(), reinterpret_cast<char*>(buf) + have, sizeof(buf) - have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            throw CaptureError(fmt::format("cannot list the traced threads: {}", strerror(errno)));
        if (n == 0)
            break;
        have += static_cast<size_t>(n);
        size_t whole = have / sizeof(lotus_unsampled);
        out.insert(out.end(), buf, buf + whole);
        have -= whole * sizeof(lotus_unsampled);
        memmove(buf, reinterpret_cast<char*>(buf) + whole * sizeof(lotus_unsampled), have);
    }
    return out;
}

} // namespace

ThreadSampling::ThreadSampling(bpf_program* sampler, bpf_program* unsampled, const CounterSpec& event, uint64_t freq)
{
    raise_fd_limit();
    bpf_link* raw = bpf_program__attach_iter(unsampled, nullptr);
    if (!raw)
        throw CaptureError(fmt::format("cannot list the traced threads: {}", strerror(errno)));
    std::unique_ptr<bpf_link, int (*)(bpf_link*)> iter(raw, bpf_link__destroy);
    std::set<uint32_t> unknown, opened_on;
    // Each round opens events on threads that exist; one started after its creator's event was opened has
    // that event's copy. A thread that starts threads faster than this loop opens events keeps it going.
    for (int round = 0;; round++) {
        bool opened = false;
        for (const lotus_unsampled& u : list_unsampled(bpf_link__fd(iter.get()))) {
            if (u.state == LOTUS_SAMPLER_UNKNOWN) {
                unknown.insert(u.tid);
                continue;
            }
            // Listed again after its event was opened: BPF cannot see lotus-bpf's events in this kernel's perf
            // contexts, so it could not tell an inherited event either; opening more would sample threads twice.
            if (opened_on.count(u.tid))
                throw CaptureError(fmt::format("cannot tell which threads carry a sampling event (thread {} still "
                                               "shows none after one was opened)", u.tid));
            common::UniqueFd pfd = open_inherited(event, static_cast<int>(u.tid), freq);
            if (!pfd && errno == ESRCH)
                continue; // it exited
            if (!pfd)
                throw CaptureError(fmt::format("cannot open the sampling event {} on thread {}: {}", event.name, u.tid,
                                               strerror(errno)));
            // The link holds the event: its descriptor can go.
            common::UniqueFd link(bpf_link_create(bpf_program__fd(sampler), pfd.get(), BPF_PERF_EVENT, nullptr));
            if (!link)
                throw CaptureError(fmt::format("cannot attach the sampling program: {}", strerror(errno)));
            links_.push_back(std::move(link));
            opened_on.insert(u.tid);
            opened = true;
        }
        if (!opened)
            break;
        if (round == 100)
            throw CaptureError("the traced processes started threads faster than lotus-bpf could sample them");
    }
    unknown_ = unknown.size();
}

} // namespace lotus::capture
