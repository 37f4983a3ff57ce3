// The ids of tracepoint events ("syscalls/sys_enter_write"), which perf_event_open needs to attach a program to
// one. Only tracefs says them, and many machines never mount it (minimal VMs, containers): there they are read
// from a tracefs mounted in a private mount namespace of a short-lived child, so the machine's mounts stay as
// they were.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lotus::capture {

// The ids in the order asked; nullopt where tracefs is neither mounted and readable nor mountable privately
// (CAP_BPF + CAP_PERFMON without root, a container without CAP_SYS_ADMIN) or lacks one of the events.
// LOTUS_NO_PRIVATE_TRACEFS=1 skips the private mount (tests).
std::optional<std::vector<uint32_t>> tracepoint_ids(const std::vector<std::string>& events);

// The ids' text as tracefs gives them, one file per event, concatenated: each a decimal number ending in a
// newline; nullopt on anything else (a missing file reads as nothing).
std::optional<std::vector<uint32_t>> parse_ids(const std::string& text, size_t count);

} // namespace lotus::capture
