// Each traced process's parent as capture learns it (from /proc at attach, then from FORK records): the one place
// capture keeps it. (The engine keeps its own from the record stream: a replay has no capture.)
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace lotus::proc {

class ProcessTree {
public:
    void add(uint32_t pid, uint32_t parent) { parents_[pid] = parent; }
    // 0: unknown (the root, or a process whose parent was never seen).
    uint32_t parent(uint32_t pid) const
    {
        auto it = parents_.find(pid);
        return it == parents_.end() ? 0 : it->second;
    }
    // pid, then its known ancestors (at most 64): whose memory holds what it inherited at fork, once it is gone.
    std::vector<uint32_t> lineage(uint32_t pid) const
    {
        std::vector<uint32_t> pids;
        for (; pid && pids.size() < 64; pid = parent(pid))
            pids.push_back(pid);
        return pids;
    }

private:
    std::unordered_map<uint32_t, uint32_t> parents_;
};

} // namespace lotus::proc
