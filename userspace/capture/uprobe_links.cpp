#include "uprobe_links.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <cerrno>
#include <fmt/format.h>
#include <vector>

#include "perf_uprobe.h"

namespace lotus::capture {

// BPF_LINK_CREATE's attributes for a uprobe_multi link, as the kernel lays them out (the uapi header of
// this distribution predates them).
struct UprobeMultiLinkAttr {
    uint32_t prog_fd, target_fd, attach_type, flags;
    uint64_t path, offsets, ref_ctr_offsets, cookies;
    uint32_t cnt, multi_flags, pid, pad;
};
constexpr uint32_t kUprobeMultiReturn = 1; // BPF_F_UPROBE_MULTI_RETURN

common::UniqueFd UprobeLinks::multi_link(bpf_program* prog, int attach_type, const std::string& path,
                                   const std::vector<uint64_t>& offsets, const std::vector<uint64_t>& cookies, bool ret,
                                   uint32_t pid)
{
    UprobeMultiLinkAttr attr{};
    attr.prog_fd = static_cast<uint32_t>(bpf_program__fd(prog));
    attr.attach_type = static_cast<uint32_t>(attach_type);
    attr.path = reinterpret_cast<uint64_t>(path.c_str());
    attr.offsets = reinterpret_cast<uint64_t>(offsets.data());
    attr.cookies = cookies.empty() ? 0 : reinterpret_cast<uint64_t>(cookies.data());
    attr.cnt = static_cast<uint32_t>(offsets.size());
    attr.multi_flags = ret ? kUprobeMultiReturn : 0;
    // pid 0: every process mapping the file (BPF drops the events of processes outside the traced set). Else
    // the kernel installs the probes in that process only (and in what it maps after an exec) and runs the
    // program only for its threads.
    attr.pid = pid;
    return common::UniqueFd(static_cast<int>(syscall(SYS_bpf, BPF_LINK_CREATE, &attr, sizeof(attr))));
}

std::vector<common::UniqueFd> UprobeLinks::multi_pair(bpf_program* entry, bpf_program* ret, const std::string& path,
                                                      const std::vector<uint64_t>& offsets,
                                                      const std::vector<uint64_t>& cookies, uint32_t pid) const
{
    // The return probe goes first: the kernel hooks a call's return when the call begins, so a call whose
    // entry is seen must begin with the return probe in place (returns without a seen entry are ignored in
    // BPF). The other order loses the return of a call that begins between the two attachments, which left
    // every later span of that thread nested in it.
    std::vector<common::UniqueFd> fds = probe_links(ret, path, offsets, cookies, true, pid);
    if (fds.empty())
        return fds;
    std::vector<common::UniqueFd> entries = probe_links(entry, path, offsets, cookies, false, pid);
    if (entries.empty()) {
        int err = errno;
        fds.clear();
        errno = err;
        return fds;
    }
    for (auto& fd : entries)
        fds.push_back(std::move(fd));
    return fds;
}

std::vector<common::UniqueFd> UprobeLinks::probe_links(bpf_program* prog, const std::string& path,
                                                       const std::vector<uint64_t>& offsets,
                                                       const std::vector<uint64_t>& cookies, bool ret,
                                                       uint32_t pid) const
{
    std::vector<common::UniqueFd> fds;
    if (!perf_links_ || !pid) {
        fds.push_back(multi_link(prog, multi_type_, path, offsets, cookies, ret, pid));
    } else {
        // A return's cookie also names its process: older kernels run it for every process's returns (py_return).
        uint64_t owner = ret ? static_cast<uint64_t>(pid) << 32 : 0;
        for (size_t i = 0; i < offsets.size() && (fds.empty() || fds.back()); i++)
            fds.push_back(perf_uprobe_link(bpf_program__fd(prog), path, offsets[i],
                                           owner | (cookies.empty() ? 0 : cookies[i]), ret, static_cast<int>(pid)));
    }
    if (!fds.empty() && !fds.back()) {
        int err = errno;
        fds.clear();
        errno = err;
    }
    return fds;
}

std::string UprobeLinks::pin(const std::string& path)
{
    auto it = pinned_.find(path);
    if (it == pinned_.end()) {
        common::UniqueFd fd(::open(path.c_str(), O_PATH | O_CLOEXEC));
        if (!fd)
            return path; // the attach then fails with the reason
        it = pinned_.emplace(path, std::move(fd)).first;
    }
    return fmt::format("/proc/self/fd/{}", it->second.get());
}

} // namespace lotus::capture
