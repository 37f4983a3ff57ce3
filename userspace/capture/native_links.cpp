#include "native_links.h"

#include <linux/perf_event.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <vector>

#include "lotus_abi.h"
#include "thread_sampling.h"
#include "lotus.skel.h"
#include "probe_internal.h"

namespace lotus::capture {

NativeLinks::NativeLinks(lotus_bpf* skel, bool thread_sampling, bool per_process, UprobeLinks& uprobes,
                         ProcessLinks& processes)
    : skel_(skel), thread_sampling_(thread_sampling), per_process_mode_(per_process), uprobes_(uprobes),
      processes_(processes)
{
}

NativeLinks::~NativeLinks() = default;

void NativeLinks::attach_sampling(const CounterSpec& event, uint64_t freq)
{
    if (thread_sampling_) {
        sampling_ = std::make_unique<ThreadSampling>(skel_->progs.on_sample, skel_->progs.unsampled_threads, event,
                                                     freq);
        sampling_scope_ = "threads";
        return;
    }
    sampling_scope_ = "cpus";
    for (auto& fd : open_per_cpu(event, freq)) {
        if (!fd)
            continue;
        Link l(bpf_program__attach_perf_event(skel_->progs.on_sample, fd.get()));
        if (!l)
            throw CaptureError(fmt::format("cannot attach the sampling program: {}", strerror(errno)));
        fd.release(); // the link closes it
        links_.push_back(std::move(l));
    }
}

size_t NativeLinks::threads_unsampled() const { return sampling_ ? sampling_->unknown() : 0; }

// A function's points as the kernel takes them: its return instructions, then its entry (a return seen without
// its entry, as one probe after the other goes live, is dropped; an entry without its return would stay open).
static void flatten(const NativePoints& f, std::vector<uint64_t>& offsets, std::vector<uint64_t>& cookies)
{
    for (uint64_t r : f.returns) {
        offsets.push_back(r);
        cookies.push_back(LOTUS_NATIVE_RETURN_POINT | f.id);
    }
    offsets.push_back(f.entry);
    cookies.push_back(f.id);
}

std::vector<bool> NativeLinks::attach(const std::string& path, const std::vector<NativePoints>& fns)
{
    std::vector<bool> ok(fns.size(), false);
    std::vector<uint64_t> offsets, cookies;
    for (const auto& f : fns)
        flatten(f, offsets, cookies);
    if (offsets.empty())
        return ok;
    if (per_process_mode_) {
        // Per traced process: those traced now (held children get theirs in Probe::attach_to). A process that
        // exits meanwhile (ESRCH) needs none; any other refusal falls back to probing every process.
        std::vector<std::pair<uint32_t, std::vector<common::UniqueFd>>> made;
        bool refused = false;
        for (uint32_t tgid : processes_.tgids()) {
            auto fds = links_on(path, offsets, cookies, tgid);
            if (fds.empty() && errno != ESRCH) {
                refused = true;
                break;
            }
            made.emplace_back(tgid, std::move(fds));
        }
        if (!refused) {
            for (auto& [tgid, fds] : made)
                processes_.append(tgid, std::move(fds));
            per_process_.push_back({path, offsets, cookies});
            uprobes_.pin(path);
            native_links_++;
            return std::vector<bool>(fns.size(), true);
        }
    }
    // One link for the whole library where the kernel takes all its points; else one function at a time, so that
    // one it refuses does not cost the others.
    if (uprobes_.multi_type() >= 0) {
        if (auto fd = UprobeLinks::multi_link(skel_->progs.native_call, uprobes_.multi_type(), path, offsets, cookies)) {
            multi_links_.push_back(std::move(fd));
            native_links_++;
            return std::vector<bool>(fns.size(), true);
        }
    }
    for (size_t i = 0; i < fns.size(); i++) {
        std::vector<uint64_t> o, k;
        flatten(fns[i], o, k);
        std::vector<Link> mine;
        for (size_t j = 0; j < o.size() && (mine.empty() || mine.back()); j++) {
            LIBBPF_OPTS(bpf_uprobe_opts, opts, .bpf_cookie = k[j], .retprobe = false);
            mine.emplace_back(bpf_program__attach_uprobe_opts(skel_->progs.native_call, -1, path.c_str(), o[j], &opts));
        }
        if (!mine.back())
            continue; // (its links made so far go: a function is probed whole or not at all)
        ok[i] = true;
        native_links_ += mine.size();
        for (auto& l : mine)
            links_.push_back(std::move(l));
    }
    return ok;
}

std::vector<common::UniqueFd> NativeLinks::process_links(const Library& lib, uint32_t tgid)
{
    return links_on(uprobes_.pin(lib.path), lib.offsets, lib.cookies, tgid);
}

std::vector<common::UniqueFd> NativeLinks::links_on(const std::string& path, const std::vector<uint64_t>& offsets,
                                                    const std::vector<uint64_t>& cookies, uint32_t pid)
{
    return uprobes_.probe_links(skel_->progs.native_call, path, offsets, cookies, false, pid);
}

void NativeLinks::release(std::vector<common::UniqueFd>& batch)
{
    for (auto& l : multi_links_)
        batch.push_back(std::move(l));
    multi_links_.clear();
}

void NativeLinks::close_sampling() { sampling_.reset(); }

} // namespace lotus::capture
