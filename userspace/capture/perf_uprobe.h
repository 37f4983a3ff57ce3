// A uprobe opened as a perf event on one process (the kernel's uprobe PMU), with a BPF program linked to it: what
// per-process probes are made of where the kernel has no uprobe_multi links (before 6.6). The kernel makes each
// such event a probe of its own with that process's filter, so a process never runs another's programs.
#pragma once
#include <cstdint>
#include <string>

#include "common/unique_fd.h"

namespace lotus::capture {

// The link (it holds the event) running program prog_fd at file offset `offset` of `path` in process `pid` (-1: every
// process) and in what it execs, at the function's entry or (ret) return, with `cookie`; empty with errno set if refused.
common::UniqueFd perf_uprobe_link(int prog_fd, const std::string& path, uint64_t offset, uint64_t cookie, bool ret,
                                  int pid);

} // namespace lotus::capture
