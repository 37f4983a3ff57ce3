// Records user space adds to the event stream (live, and in record files), numbered after the kernel's
// (1..99, lotus_abi.h). Like those, they start with a lotus_event_header. The engine reads every one that
// carries knowledge only user space has (processes alive at attach, capture slots and ranks read from the
// target, symbol names), so that a live run and its replay feed it the same stream; RecordEnd is the
// session's.
#pragma once
#include <cstdint>

namespace lotus::model {

enum : uint32_t {
    kRecordSlots = 100,      // resolved capture slots of a code object (they came from the target's memory)
    kRecordProcess = 101,    // a process known at attach time
    kRecordEnd = 102,        // the capture's own counts, written when tracing stopped
    kRecordNativeFunc = 103, // a probed native function: the name its events' func number stands for
    kRecordSymbol = 104,     // the function and library at a sampled address of a process
    kRecordRank = 105,       // a process's RANK (torchrun and other launchers set it in its environment)
    kRecordUsage = 106,      // a process's resource use as /proc said it (--resources-interval)
    kRecordNativeLate = 107, // a library's native probes went live after a traced process had loaded it
    kRecordOtherInterpreter = 108, // a traced process runs a CPython interpreter other than the probed one
    kRecordUntracedPython = 109,   // a process of the launched command ran CPython outside the traced tree
    kRecordSymbolRange = 110,      // the function and library at a range of addresses of a process (104's successor)
    kRecordObject = 111,           // what a DataLoader or its iterator holds, read from the target
    kRecordCommand = 112,          // a process's command line (a helper's role: multiprocessing's forkserver)
    kRecordObjectCalls = 113,      // a process's object calls stopped, or began again, being probed (--trainer-calls)
    kRecordCgroup = 114,           // a process's cgroup: its CPU and memory limits and its CPU throttling so far
    kRecordStuck = 118,            // a process of the job ended no span for its threshold, or resumed (model/stuck.h)
    kRecordHostCpu = 119,          // the CPU time of the CPUs the job may run on, all processes' (a usage sweep's)
};

// The slots of the locals a code object's role captures (its CODE record's code), as read from the target's
// co_localsplusnames; written right after that CODE record. 0xff: absent.
struct RecordSlots {
    uint32_t type, tgid, tid, cpu;
    uint64_t ts_ns;
    uint64_t code;
    uint8_t slots[8];
};

// A process alive when tracing began (its fork was not seen).
struct RecordProcess {
    uint32_t type, pid, tid, cpu;
    uint64_t ts_ns;
    uint32_t parent, root;
};

// The capture's own counts, written when tracing stopped (absent where the tracer was killed or the file cut).
struct RecordEnd {
    uint32_t type, pid, tid, cpu;
    uint64_t ts_ns;
    uint64_t submitted, lost; // records the BPF programs wrote / could not write (ring buffer full)
};

struct RecordRank {
    uint32_t type, tgid, tid, cpu; // tgid: the process
    uint64_t ts_ns;
    int32_t rank, local_rank; // -1: not set
    int32_t world_size, pad;  // -1: not set (a record file before it ends at world_size: read as -1)
};

// One process's reading in a sweep over the traced processes; every record of one sweep has the sweep's ts_ns.
struct RecordUsage {
    uint32_t type, tgid, tid, cpu; // tgid: the process
    uint64_t ts_ns;
    uint64_t user_ns, system_ns; // CPU time so far, all threads (clock-tick steps)
    uint64_t rss_kb, hwm_kb;     // resident now, and its peak so far
    uint64_t pss_kb;             // proportional set size; kNoPss when not read in this sweep
    uint64_t read_bytes, write_bytes; // storage I/O so far
    uint64_t nvcsw, nivcsw;      // context switches so far, all threads
    uint32_t threads, flags;     // flags: kUsageNet
    uint64_t net_sent, net_recv; // internet sockets' payload bytes since it was traced (records of files made
                                 // before these fields end at net_sent: their flags are 0)
    uint64_t private_kb;         // USS (smaps_rollup's Private_Clean + Private_Dirty), read with pss_kb; kNoPss
                                 // when not read (and in records of files made before it: they end at net_recv)
    uint64_t shared_dirty_kb;    // smaps_rollup's Shared_Dirty (written pages it shares: a forked child's
                                 // inherited heap, what reading it can still copy); kNoPss as private_kb
    uint64_t anon_kb;            // smaps_rollup's Anonymous (resident anonymous pages, shared or not: a page
                                 // copied on write leaves it as it was, memory allocated anew grows it); the same
};
constexpr uint64_t kNoPss = UINT64_MAX;

// The host's CPU time so far on the CPUs the job's first process may run on (/proc/stat: every process's and the
// kernel's, this tracer's included), read in a usage sweep with that sweep's ts_ns. Files before it have none.
struct RecordHostCpu {
    uint32_t type, tgid, tid, cpu; // tgid: the process whose affinity chose the CPUs
    uint64_t ts_ns;
    uint64_t busy_ns, total_ns; // busy (user, nice, system, irq, softirq, steal); total adds idle and iowait
    uint64_t nice_ns;           // of busy: processes at a lower priority (nice > 0), which yield to others
    uint32_t cpus, pad;         // CPUs summed
};
constexpr uint32_t kUsageNet = 1; // net_sent and net_recv were counted

constexpr unsigned kSymbolNameLen = 160, kLibraryNameLen = 64;

struct RecordNativeFunc {
    uint32_t type, tgid, tid, cpu;
    uint64_t ts_ns;
    uint32_t func, _pad;
    char name[kSymbolNameLen];
    char library[kLibraryNameLen];
};

// tgid loaded `library` (its dlopen returned, or the loader opened it) at loaded_ns, before lotus-bpf had probed
// it; its probes were in place at ts_ns: the calls it made in between are not seen.
struct RecordNativeLate {
    uint32_t type, tgid, tid, cpu;
    uint64_t ts_ns;
    uint64_t loaded_ns;
    char library[kLibraryNameLen];
};

constexpr unsigned kInterpreterPathLen = 256;

// tgid runs `path` (its executable or libpython, as it names it), a CPython interpreter other than the file
// lotus-bpf probes: none of its Python calls reach a probe. Once per process and exec, when that was told.
struct RecordOtherInterpreter {
    uint32_t type, tgid, tid, cpu;
    uint64_t ts_ns;
    char path[kInterpreterPathLen];
};

// Launch mode: tgid, a process of the launched command outside the traced process's tree (the first of the
// command's processes to run CPython, and its children), runs CPython `path`: it is not traced. Once per process.
struct RecordUntracedPython {
    uint32_t type, tgid, tid, cpu;
    uint64_t ts_ns;
    char comm[16];
    char path[kInterpreterPathLen];
};

// Written by lotus-bpf before 110; still read from record files.
struct RecordSymbol {
    uint32_t type, tgid, tid, cpu; // tgid: the process the address belongs to
    uint64_t ts_ns;
    uint64_t ip;
    char name[kSymbolNameLen];      // empty: no symbol covers it
    char library[kLibraryNameLen];  // empty: in no file mapping
};

// Every address in [ip_lo, ip_hi) of the process resolves to this function and library, as its maps and the
// file's symbols stood (the function's extent, cut where another symbol starts or ends, to the mapping and to
// one loadable segment; or the gap between symbols, where none covers). Ranges of one process never overlap.
struct RecordSymbolRange {
    uint32_t type, tgid, tid, cpu; // tgid: the process the addresses belong to
    uint64_t ts_ns;
    uint64_t ip_lo, ip_hi;
    char name[kSymbolNameLen];     // empty: no symbol covers them
    char library[kLibraryNameLen]; // empty: in no file mapping
};

constexpr unsigned kClassNameLen = 64, kDatasetRootLen = 192;

// What a DataLoader (at its __iter__) or an iterator (at its pass's first next(): BatchTracker::next_started) holds,
// read from the target's memory by capture when the engine asked (CaptureRequests::describe_object), at ts_ns. The
// dataset and sampler are object addresses: a DataLoader's `dataset` and its index sampler (`batch_sampler`, else
// `sampler`), an iterator's `_dataset` and `_index_sampler`; 0 where unread. An address names the object only
// while the holder lives: the engine trusts a reading taken before a call of the holder ended.
struct RecordObject {
    uint32_t type, tgid, tid, cpu; // tgid: the process whose object it is
    uint64_t ts_ns;                // when it was read
    uint64_t object;
    uint32_t kind, _pad;           // kObjectLoader, kObjectIterator
    uint64_t dataset, sampler;
    char dataset_class[kClassNameLen]; // the dataset's class (tp_name); "" unread
    char dataset_root[kDatasetRootLen]; // its `root` where that is a str (torchvision's datasets), else ""
    char sampler_class[kClassNameLen];  // the index sampler's class, with its own `sampler`'s: "BatchSampler of
                                        // RandomSampler"; "" unread
};
constexpr uint32_t kObjectLoader = 1, kObjectIterator = 2;

constexpr unsigned kCommandLen = 256;

// A process's command line (its arguments joined by spaces, cut at kCommandLen - 1 bytes), read when it was met
// or exec'd: what names a helper process's role (framework::HelperRow).
struct RecordCommand {
    uint32_t type, tgid, tid, cpu; // tgid: the process
    uint64_t ts_ns;
    char command[kCommandLen];
};

// A training process's object calls (slot_tp_call) stopped (on = 0) or began again (on = 1) being probed, at
// ts_ns (--trainer-calls, CaptureRequests::object_calls): a stop at when its probe's link began to close, put in the stream
// after every record the ring held when the close ended (no call of the process can come after it); a start at
// when its link was attached (every call of the process after it is probed).
struct RecordObjectCalls {
    uint32_t type, tgid, tid, cpu; // tgid: the process
    uint64_t ts_ns;
    uint32_t on;
    uint32_t mode; // why (--trainer-calls): kCallsAuto (it iterated a loader with workers), kCallsOff (a loader)
};
constexpr uint32_t kCallsAuto = 1, kCallsOff = 2;

constexpr unsigned kCgroupPathLen = 128, kCpusetLen = 64;

// A process's cgroup as its files said at ts_ns (launch/cgroup.h, read_process_cgroup): the limits that hold for
// it (the tightest of its cgroup and every ancestor's) and its cgroup's CPU throttling so far (cpu.stat: the
// kernel throttles every thread of a cgroup at once, so it is the cgroup's, not the process's). Written with
// each --resources-interval sweep, when tracing began and ended, and after a process's exit; a figure whose file
// could not be read has its flag clear (never a guess). cgroup v1 (cpu, cpuset, memory hierarchies) or v2.
struct RecordCgroup {
    uint32_t type, tgid, tid, cpu; // tgid: the process
    uint64_t ts_ns;
    uint32_t flags;                // kCgroup*: which figures were read
    uint32_t cpuset_cpus;          // CPUs in its effective cpuset (kCgroupCpuset)
    int64_t quota_us;              // CPU time per period (kCgroupQuota); -1: no quota ("max", v1 -1)
    uint64_t period_us;            // the quota's period (kCgroupQuota)
    uint64_t memory_limit;         // bytes (kCgroupMemory); UINT64_MAX: no limit
    uint64_t periods, throttled_periods, throttled_ns; // cpu.stat of its cgroup (kCgroupThrottle)
    char path[kCgroupPathLen];     // its cgroup (the cpu hierarchy's where read, else the first one's)
    char cpuset[kCpusetLen];       // the effective cpuset as the kernel lists it ("0-3,8"), cut to fit
};
constexpr uint32_t kCgroupQuota = 1, kCgroupCpuset = 2, kCgroupMemory = 4, kCgroupThrottle = 8;
constexpr uint32_t kCgroupV1 = 16, kCgroupV2 = 32; // which hierarchies its figures came from
constexpr uint64_t kNoMemoryLimit = UINT64_MAX;

// A traced process inside work (a batch or a sample) ended no span for threshold_ns since since_ns (resumed 0,
// said at ts_ns), or ended one again at ts_ns (resumed 1): the live stuck-process watch (model/stuck.h). The
// stack is its main thread's Python stack as read from outside when it was said stuck ("" where unread or on
// resuming): innermost frame first, one "function (file:line)" a line, cut to fit.
constexpr size_t kStuckStackLen = 1024;
struct RecordStuck {
    uint32_t type, tgid, tid, cpu; // tgid: the process
    uint64_t ts_ns;
    uint64_t since_ns, threshold_ns;
    int64_t sample, batch;         // the open sample's dataset index and its batch's index (-1: unknown)
    uint32_t resumed, _pad;
    char op[64];                   // the open op's name ("" none), cut
    char stack[kStuckStackLen];
};

} // namespace lotus::model
