// The sampling map (LotusMap, online): every perf-event sample of a traced thread belongs to the innermost
// span that was open on that thread when it was taken: an op, a sample's loader, a batch's collation, a
// main-process wait, a --span call; else its sample or batch as a whole. Spans are emitted when they end,
// so samples wait per thread until the spans around them are known. Pure: fed by the engine.
#pragma once
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "spans.h"

namespace lotus::model {

struct NativeHit {
    std::string function; // "[unknown]" when no symbol covers the address
    std::string library;
    uint64_t samples = 0;
};

// What claimed a sample, in the order the summary lists them.
enum class Claim : uint8_t { Op, Loader, Collate, SampleBetweenOps, BatchOutsideSamples, Wait, Outside };

struct OpNativeMap {
    std::string op; // an op's class or a --span name (op_row_name), "loader", "collate", "wait", ...
    Claim claim = Claim::Op;
    uint64_t samples = 0;
    uint64_t named = 0;     // samples attributed to a named function
    uint64_t in_kernel = 0; // samples that hit kernel code (attributed to the user function that entered it)
    std::vector<NativeHit> functions; // most samples first
};

class NativeMap {
public:
    // Keeps a thread's samples this long after the latest span end seen on it before settling them.
    explicit NativeMap(uint64_t horizon_ns = 10'000'000'000ull) : horizon_ns_(horizon_ns) {}
    // The number of a (function, library) pair, for sample(): the engine takes it once per symbol, not per sample.
    uint32_t function_id(const std::string& function, const std::string& library);
    void sample(uint32_t tid, uint64_t ts_ns, uint32_t function, bool named, bool in_kernel);
    void sample(uint32_t tid, uint64_t ts_ns, const std::string& function, const std::string& library, bool named,
                bool in_kernel)
    {
        sample(tid, ts_ns, function_id(function, library), named, in_kernel);
    }
    void span(const Span& s);
    void finish(); // settles every sample still waiting
    std::vector<OpNativeMap> table() const; // ops with most samples first
    uint64_t total() const { return total_; }

private:
    struct Pending {
        uint64_t ts;
        uint32_t fn;
        bool named, kernel;
        uint8_t priority = 0; // 0: unclaimed, 1: by a sample or batch, 2: by an op-like span
        uint32_t owner = 0;   // owners_[owner] (with priority)
    };
    uint32_t owner_id(const std::string& owner, Claim claim);
    void settle(std::deque<Pending>& q, uint64_t before_ns);
    uint64_t horizon_ns_;
    struct PairHash {
        size_t operator()(const std::pair<std::string, std::string>& p) const
        {
            return std::hash<std::string>()(p.first) * 31 + std::hash<std::string>()(p.second);
        }
    };
    std::unordered_map<std::pair<std::string, std::string>, uint32_t, PairHash> fn_ids_;
    std::vector<std::pair<std::string, std::string>> fns_;
    std::unordered_map<uint32_t, std::deque<Pending>> pending_; // per thread, in time order
    struct Agg {
        uint64_t samples = 0, named = 0, kernel = 0;
        std::unordered_map<uint32_t, uint64_t> by_fn;
    };
    std::unordered_map<std::string, uint32_t> owner_ids_; // (the names of different claims differ: op_row_name)
    std::vector<std::pair<std::string, Claim>> owners_;
    std::unordered_map<uint32_t, Agg> agg_; // by owner; "outside any span" is an owner too
    int64_t outside_ = -1;                  // its number, once taken
    uint64_t total_ = 0;
};

} // namespace lotus::model
