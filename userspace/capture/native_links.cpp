// Probe: the native map's sampling events and its probes on native functions.
#include "probe.h"

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

void Probe::attach_sampling(const CounterSpec& event, uint64_t freq)
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

size_t Probe::threads_unsampled() const { return sampling_ ? sampling_->unknown() : 0; }

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

std::vector<bool> Probe::attach_native(const std::string& path, const std::vector<NativePoints>& fns)
{
    std::vector<bool> ok(fns.size(), false);
    std::vector<uint64_t> offsets, cookies;
    for (const auto& f : fns)
        flatten(f, offsets, cookies);
    if (offsets.empty())
        return ok;
    if (hold_ && !perf_links_) { // (a perf event per point and process would hold each new worker too long)
        // Per traced process: those traced now (held children get theirs in attach_python_to). A process that
        // exits meanwhile (ESRCH) needs none; any other refusal falls back to probing every process.
        std::vector<std::pair<uint32_t, std::vector<common::UniqueFd>>> made;
        bool refused = false;
        for (uint32_t tgid : process_links_.tgids()) {
            auto fds = native_multi(path, offsets, cookies, tgid);
            if (fds.empty() && errno != ESRCH) {
                refused = true;
                break;
            }
            made.emplace_back(tgid, std::move(fds));
        }
        if (!refused) {
            for (auto& [tgid, fds] : made)
                process_links_.append(tgid, std::move(fds));
            per_process_natives_.push_back({path, offsets, cookies});
            pin(path);
            native_links_++;
            return std::vector<bool>(fns.size(), true);
        }
    }
    // One link for the whole library where the kernel takes all its points; else one function at a time, so that
    // one it refuses does not cost the others.
    if (multi_type_ >= 0) {
        if (auto fd = multi_link(skel_->progs.native_call, multi_type_, path, offsets, cookies)) {
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

std::vector<common::UniqueFd> Probe::native_multi(const std::string& path, const std::vector<uint64_t>& offsets,
                                                  const std::vector<uint64_t>& cookies, uint32_t pid)
{
    return probe_links(skel_->progs.native_call, path, offsets, cookies, false, pid);
}

} // namespace lotus::capture
