// Probe's libc mode: the watched syscalls seen at libc's wrappers in each traced process. Which libc file each
// process maps (a child just forked takes its parent's), one link per process and file (made through the
// probe; the process's links are kept with its others in ProcessLinks), the processes still to map one, and
// the children that took their parent's libc at their fork.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/unique_fd.h"
#include "elf/libc_wrappers.h"
#include "process_links.h"

namespace lotus::capture {

class LibcLinks {
public:
    // A name for the file at `path` that holds while the tracer runs (UprobeLinks::pin).
    using Pin = std::function<std::string(const std::string& path)>;
    // The libc program's link on `offsets` of the file at `path` for process `tgid`; empty, errno set, if refused.
    using MakeLink = std::function<common::UniqueFd(const std::string& path, const std::vector<uint64_t>& offsets,
                                                    const std::vector<uint64_t>& cookies, uint32_t tgid)>;
    using Sink = std::function<void(const void* data, size_t len)>;

    // os_read: reads are seen at the interpreter's os.read, not at libc's read(). native: libc's dlopen is probed
    // too (the native map). A refusal is noted in attach_error, unless one is there already.
    LibcLinks(bool os_read, bool native, Pin pin, MakeLink make_link, std::string& attach_error)
        : os_read_(os_read), native_(native), pin_(std::move(pin)), make_link_(std::move(make_link)),
          attach_error_(attach_error)
    {
    }

    // A new process under tgid: the files linked under its pid were an earlier process's.
    void new_process(uint32_t tgid) { linked_.erase(tgid); }
    // The process's link on the wrappers of the libc it maps, into fds; false while it maps none yet. forked_from:
    // the traced process it was just forked from (held since: its parent's libc is its own), else 0.
    bool attach_to(uint32_t tgid, std::vector<common::UniqueFd>& fds, uint32_t forked_from = 0);
    // A process to look at again (retry): it maps no libc yet.
    void pend(uint32_t tgid, uint64_t now) { pending_.emplace(tgid, now); }
    bool pending() const { return !pending_.empty(); }
    // The processes still to map their libc (started, or exec'd, since their links were made): their links
    // appended to theirs in `links`; lib_sink told of each that has run its dynamic loader (the native map).
    void retry(ProcessLinks& links, const Sink& lib_sink);
    // From the record stream: a traced process exited, or exec'd (its new image may map another libc, and so
    // may the children that took its libc as theirs).
    void exited(uint32_t tgid);
    void exec(uint32_t tgid, uint64_t now);

private:
    using File = std::tuple<uint32_t, uint32_t, uint64_t>; // device major, minor, inode

    bool os_read_ = false;
    bool native_ = false;
    Pin pin_;
    MakeLink make_link_;
    std::string& attach_error_;
    std::map<File, std::optional<elf::LibcWrappers>> files_; // by file
    std::map<uint32_t, std::set<File>> linked_;               // per process: its files
    std::map<File, std::string> paths_;                       // by file: the path it is pinned by
    std::unordered_map<uint32_t, uint64_t> pending_;  // process -> when it was found without a libc (ns)
    std::unordered_map<uint32_t, uint32_t> borrowed_; // child -> the parent whose libc it took at its fork
};

} // namespace lotus::capture
