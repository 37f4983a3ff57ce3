// A process's resource use as /proc says it now (read-only): CPU time (all threads), memory, storage I/O and
// context switches; what `docker stats` shows per container, here per process.
#pragma once
#include <cstdint>
#include <memory>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

namespace lotus::proc {

struct ProcUsage {
    uint64_t user_ns = 0, system_ns = 0; // /proc/PID/stat utime, stime (clock ticks, so 10 ms steps)
    uint64_t rss_kb = 0, hwm_kb = 0;     // VmRSS, VmHWM (the peak RSS over its life)
    std::optional<uint64_t> pss_kb;      // smaps_rollup's Pss (shared pages split between their users), when asked
    std::optional<uint64_t> private_kb;  // the same walk's Private_Clean + Private_Dirty (USS: pages only it maps)
    std::optional<uint64_t> shared_dirty_kb; // and Shared_Dirty: written pages it shares (a forked child's heap)
    std::optional<uint64_t> anon_kb;         // and Anonymous: its resident anonymous pages, shared or not
    uint64_t read_bytes = 0, write_bytes = 0; // /proc/PID/io: storage I/O it caused
    uint64_t nvcsw = 0, nivcsw = 0;      // context switches, summed over its threads
    uint32_t threads = 0;
};

// Reads processes again and again (every traced process every 100 ms) through files it keeps open: procfs makes
// a file's text anew at every read from offset 0, so a reading is one pread per file instead of an open, two
// reads and a close, and the thread list is read again only when the thread count or a thread changed.
class ProcUsageReader {
public:
    ProcUsageReader();
    ~ProcUsageReader();
    ProcUsageReader(const ProcUsageReader&) = delete;
    ProcUsageReader& operator=(const ProcUsageReader&) = delete;

    // nullopt when the process is gone (or became a zombie, whose memory is gone).
    std::optional<ProcUsage> read(int pid, bool with_pss);
    // Closes the files of the processes not in pids (those that ended).
    void keep_only(const std::vector<uint32_t>& pids);

private:
    struct Files;
    void forget(int pid);
    std::unordered_map<int, std::unique_ptr<Files>> files_;
    size_t thread_fds_ = 0; // thread files kept open, all processes together (bounded: see kMaxThreadFds)
};

// When the readings include PSS: every `interval_ms`, or (auto, interval_ms < 0) every 2 s or less often, so that
// the walks' CPU time stays within kPssBudget of the CPUs' (what a walk costs for a process that mapped torch,
// and the intervals that makes: docs/performance.md, "What costs what"). 0: never.
// In auto mode a process that appeared after the first sweep (a child forked while traced: a DataLoader worker)
// also has its PSS read on its own for its first kYoungNs, every kYoungMinNs or less often, so that those walks stay
// within kYoungBudget of the CPUs: a worker copies the pages it reads from its parent in its first seconds, and the
// summary needs readings then to tell it (export/worker_memory.h). Its first walk comes kYoungFirstNs after it was
// first seen, not at once: a worker that lives less (forked anew for each pass of a short epoch) costs no walk.
// A young process that ends before kJudgedWalks walks (it could not be judged: 4 readings are needed) doubles
// that delay for those after it, up to kYoungFirstMaxNs; one judged, or young no more, halves it back: a job whose
// workers are forked anew each short epoch stops paying for walks that would tell nothing (a walk costs 5-15 ms:
// walked at birth and every 0.5 s, the example's workers, forked each 0.8-1.5 s epoch, cost the tracer ~25 ms of
// CPU a second).
class PssSchedule {
public:
    static constexpr double kPssBudget = 0.001;
    static constexpr uint64_t kMinNs = 2'000'000'000ull;
    static constexpr double kYoungBudget = 0.01;
    static constexpr uint64_t kYoungNs = 30'000'000'000ull, kYoungMinNs = 500'000'000ull;
    static constexpr uint64_t kYoungFirstNs = 1'000'000'000ull, kYoungFirstMaxNs = 8'000'000'000ull;
    static constexpr unsigned kJudgedWalks = 4;
    PssSchedule(int interval_ms, unsigned cpus, uint64_t start_ns);
    bool due(uint64_t now_ns) const { return interval_ms_ != 0 && now_ns >= next_ns_; }
    // A reading with PSS was made at now_ns; its walks took cpu_ns of the tracer's CPU time.
    void done(uint64_t now_ns, uint64_t cpu_ns);
    uint64_t next_ns() const { return next_ns_; }
    // The processes of this sweep (once per sweep, first): those new since the first sweep are young.
    void seen(const std::vector<uint32_t>& live, uint64_t now_ns);
    bool young_due(uint32_t pid, uint64_t now_ns) const;
    // A young process's walk at now_ns took cpu_ns.
    void young_done(uint32_t pid, uint64_t now_ns, uint64_t cpu_ns);

private:
    int interval_ms_;
    unsigned cpus_;
    uint64_t next_ns_;
    bool swept_ = false;
    std::set<uint32_t> known_;
    struct Young {
        uint64_t since = 0, next = 0;
        unsigned walks = 0;
    };
    std::map<uint32_t, Young> young_;
    uint64_t first_ns_ = kYoungFirstNs; // a new young process's first walk, after it was first seen
};

} // namespace lotus::proc
