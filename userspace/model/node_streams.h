// Several record streams, one per node, into one reconstruction (report/export of several record files): each
// stream after the first whose processes' ids collide with an earlier one's moves its ids (pids, tids, role
// spaces, pipes, native function numbers) into a range of its own, and every stream's timestamps move onto one
// clock. The engine then sees one stream of processes that never share an id, as on one big machine.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace lotus::model {

// Ids of node k (when moved) are id + k * kNodeIdStride: above every pid (PID_MAX_LIMIT is 1 << 22) and every
// role space begun by exec (LOTUS_SPACE_EXEC_BASE + n); the role spaces' LOTUS_SPACE_OWN bit (1 << 31) is kept.
constexpr uint32_t kNodeIdStride = 1u << 24;
constexpr uint32_t kMaxNodes = 127;

// A process id as its own node knew it.
inline uint32_t node_local_id(uint32_t id) { return id % kNodeIdStride; }

struct StreamShift {
    uint32_t node = 0;      // ids moved by node * kNodeIdStride (0: kept)
    int64_t clock_ns = 0;   // added to every timestamp
};

// Rewrites one record (any type record_dispatch.h reads) in place. A record too short for its type is left as it
// is (dispatch refuses it anyway).
void shift_record(uint8_t* data, size_t len, const StreamShift& s);

} // namespace lotus::model
