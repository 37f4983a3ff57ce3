// Exited processes folded into their role's row, so that the tracer's memory is bounded by the job's shape (its
// roles: DataLoader worker ids, helper children) and not by its length (non-persistent workers are new processes
// every epoch; a job may run a subprocess per sample). Each role keeps its first kKeptPerRole exited processes one
// by one; the later ones, once they exited cleanly at least kFoldAfterNs ago (nothing of theirs is still in
// flight), are added into the last kept one and forgotten. A process that ended otherwise (killed, a non-zero
// status) is never folded: its fate is reported by its pid.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "spans.h"

namespace lotus::model {

constexpr size_t kKeptPerRole = 16;
constexpr uint64_t kFoldAfterNs = 2'000'000'000;

// (pid, into) pairs to fold now, at stream time now_ns: into is a kept exited process of pid's role.
// keep: pids that other tables name (notes about them): never folded.
std::vector<std::pair<uint32_t, uint32_t>> folds_due(const std::map<uint32_t, ProcessInfo>& processes,
                                                     uint64_t now_ns, const std::set<uint32_t>& keep = {});

// Adds `from`'s figures into `into` (the role's row).
void absorb(ProcessInfo& into, const ProcessInfo& from);

} // namespace lotus::model
