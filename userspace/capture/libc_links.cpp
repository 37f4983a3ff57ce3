#include "libc_links.h"

#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <vector>

#include "common/clock.h"
#include "elf/elf_file.h"
#include "lotus_abi.h"
#include "proc/proc_maps.h"

namespace lotus::capture {

bool LibcLinks::attach_to(uint32_t tgid, std::vector<common::UniqueFd>& fds, uint32_t forked_from)
{
    // A child just forked maps what its parent mapped: the parent's libc, without reading the child's maps
    // (long for a process that loaded torch, while the child is held: docs/performance.md, "What costs what").
    std::optional<elf::LibcMapping> libc;
    if (auto parent = linked_.find(forked_from); forked_from && parent != linked_.end() &&
                                                        parent->second.size() == 1) {
        const auto& [major, minor, inode] = *parent->second.begin();
        libc = elf::LibcMapping{paths_.at(*parent->second.begin()), inode, major, minor};
        borrowed_[tgid] = forked_from;
    } else {
        libc = elf::mapped_libc(static_cast<int>(tgid));
    }
    if (!libc)
        return false;
    auto file = std::make_tuple(libc->dev_major, libc->dev_minor, libc->inode);
    auto& linked = linked_[tgid];
    if (linked.count(file))
        return true; // an exec that mapped the same libc again: its links hold for the new image
    auto it = files_.find(file);
    if (it == files_.end())
        it = files_.emplace(file, elf::libc_wrappers(libc->path)).first;
    if (!it->second) {
        if (attach_error_.empty())
            attach_error_ = fmt::format("process {} maps {}, where read, write, open, openat or getppid is not found "
                                        "(LOTUS_SYSCALL_EVENTS=1 watches their syscalls instead)",
                                        tgid, libc->path);
        return true;
    }
    const auto& w = *it->second;
    if (native_ && !w.dlopen) {
        if (attach_error_.empty())
            attach_error_ = fmt::format("process {} maps {}, which has no dlopen (glibc before 2.34): the libraries "
                                        "it loads cannot be seen at libc's wrappers (LOTUS_SYSCALL_EVENTS=1 sees "
                                        "them at the open syscalls)",
                                        tgid, libc->path);
        return true;
    }
    std::vector<uint64_t> offsets, cookies;
    for (size_t i = 0; i < w.offsets.size(); i++)
        if (!os_read_ || w.cookies[i] != LOTUS_LIBC_READ) {
            offsets.push_back(w.offsets[i]);
            cookies.push_back(w.cookies[i]);
        }
    if (native_) { // the libraries it loads later, for the native map
        offsets.push_back(*w.dlopen);
        cookies.push_back(LOTUS_LIBC_DLOPEN);
    }
    // One pinned name per file: the path differs by process (/proc/PID/root/...), and a pin per worker would
    // hold a descriptor for every process the job ever ran.
    std::string path = pin_(paths_.emplace(file, libc->path).first->second);
    common::UniqueFd link = make_link_(path, offsets, cookies, tgid);
    if (!link) {
        if (errno != ESRCH && attach_error_.empty())
            attach_error_ = fmt::format("cannot attach the libc probes of {} to process {}: {}", libc->path, tgid,
                                        strerror(errno));
        return true;
    }
    fds.push_back(std::move(link));
    linked.insert(file);
    return true;
}

void LibcLinks::retry(ProcessLinks& links, const Sink& lib_sink)
{
    // A process maps its libc within milliseconds of its exec; one that maps none by then has no wrapper to see.
    constexpr uint64_t kLibcWaitNs = 10'000'000'000ull;
    uint64_t now = common::monotonic_ns();
    for (auto it = pending_.begin(); it != pending_.end();) {
        std::vector<common::UniqueFd> fds;
        bool gone = !proc::process_exists(static_cast<int>(it->first));
        bool done = gone || attach_to(it->first, fds);
        if (!fds.empty())
            links.append(it->first, std::move(fds));
        // It has run its dynamic loader since its exec (the same libc again, or another): the native map probes
        // what that mapped.
        if (done && !gone && native_ && lib_sink) {
            lotus_event_header loaded{};
            loaded.type = LOTUS_EV_LOADED;
            loaded.tgid = loaded.tid = it->first;
            lib_sink(&loaded, sizeof(loaded));
        }
        if (done || now - it->second > kLibcWaitNs)
            it = pending_.erase(it);
        else
            ++it;
    }
}

void LibcLinks::exited(uint32_t tgid)
{
    linked_.erase(tgid);
    pending_.erase(tgid);
    borrowed_.erase(tgid);
}

// A new image may map another libc (an exec into another root): looked at once it has mapped one. So may the
// children that took this process's libc as theirs: one forked after this exec, held and attached before
// this record was read, took the old image's.
void LibcLinks::exec(uint32_t tgid, uint64_t now)
{
    pending_.emplace(tgid, now);
    for (auto it = borrowed_.begin(); it != borrowed_.end();) {
        if (it->second == tgid) {
            pending_.emplace(it->first, now);
            it = borrowed_.erase(it);
        } else {
            ++it;
        }
    }
}

} // namespace lotus::capture
