// The native side of a live session (--native-map, --native): puts entry/return probes on the chosen native
// functions of the libraries the traced processes map (now, and when they open one later), and turns sampled
// addresses into symbol records for the engine and the record file, while the processes still exist.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/unique_fd.h"
#include "probe.h"
#include "elf/native_functions.h"
#include "model/record_dispatch.h"
#include "elf/symbolizer.h"

namespace lotus::capture {

class NativeCapture : private model::RecordHandler {
public:
    using Emit = std::function<void(const void* data, size_t len)>; // a user record into the stream
    // tree: the traced processes' parents, kept by the stream's completion (capture::Completion).
    NativeCapture(Probe& probe, std::vector<elf::NativeSpec> specs, const proc::ProcessTree& tree, Emit emit);

    // Probes the wanted functions of every library the process maps now.
    // loaded_ns: when the process loaded what is new (a dlopen's return), 0 at attach
    void scan_process(uint32_t pid, uint64_t loaded_ns = 0);
    // Sees every kernel record before the engine: opens of wanted libraries, forks, samples.
    void on_event(const void* data, size_t len);
    // A library open seen ahead of the stream (Probe::set_library_sink).
    void on_library_open(const void* data, size_t len);
    // A sample with a copy of its stack (--sample-unwind cfi), as the sample the stream gets: the leaf, then, where
    // the leaf has no symbol, the callers the stack's CFI gives that have one, up to `frames` in all.
    lotus_sample unwound(const lotus_sample_stack& s, uint32_t frames);
    size_t unwound_samples() const { return unwound_; }   // samples whose callers were looked for
    size_t unwound_callers() const { return callers_; }  // callers found for them, named or not

    size_t functions() const { return functions_; }
    size_t refused() const { return refused_; }
    // "library:function" of each selected function left unprobed because its return instructions were not found.
    const std::vector<std::string>& without_returns() const { return without_returns_; }
    // Per spec (in the order given): how many functions it selected in the libraries seen.
    const std::vector<size_t>& matched() const { return matched_; }
    double attach_seconds() const { return attach_s_; }

private:
    void process_event(const lotus_proc_event& p) override;
    void open(const lotus_open& o) override;
    void sample(const lotus_sample& s) override;
    struct Probed {
        uint64_t live_ns = 0; // when its probes were in place
        std::string library;  // its basename
    };
    // Whether ip of pid is in a function with a symbol.
    bool named(uint32_t pid, uint64_t ip);
    // The probes of the file open at fd (known by `name`), once, with when they went live; nullptr where none is
    // (not a regular file, not wanted, none refused).
    const Probed* attach_library(common::UniqueFd fd, const std::string& name);
    // pid had loaded the library at loaded_ns, before its probes went live: its calls in between are not seen.
    void probed_late(uint32_t pid, uint64_t loaded_ns, const Probed& p);
    Probe& probe_;
    std::vector<elf::NativeSpec> specs_;
    Emit emit_;
    elf::Symbolizer symbolizer_;
    elf::CfiUnwinder unwinder_;
    size_t unwound_ = 0, callers_ = 0;
    std::set<std::pair<uint64_t, uint64_t>> libraries_; // (dev, inode) already resolved (attached or found empty)
    std::set<std::tuple<uint32_t, uint32_t, uint64_t>> examined_; // mapped files scan_process has looked at
    std::map<std::pair<uint64_t, uint64_t>, Probed> probed_;       // (dev, inode): libraries with live probes
    std::set<std::pair<uint32_t, std::string>> said_late_;         // (pid, library) told once (until it execs)
    // Per process, the address ranges whose symbol records are written, by start: [start, hi), named (with a
    // function name); they never overlap. Forgotten when it execs or exits, as the engine forgets the names: a
    // reused pid gets its records again; and when its maps are read again (a library came, or went): each address
    // sampled after that is resolved again, and its new range replaces what it overlaps in the engine.
    struct Written {
        uint64_t hi;
        bool named;
    };
    struct WrittenRanges {
        uint64_t generation = 0; // the reading of the process's maps they were resolved through
        std::map<uint64_t, Written> ranges;
    };
    std::unordered_map<uint32_t, WrittenRanges> written_;
    std::unordered_map<uint32_t, WrittenRanges> looked_up_; // the same for callers looked up, not written
    std::vector<size_t> matched_;
    uint32_t functions_ = 0, refused_ = 0, next_id_ = 0;
    std::vector<std::string> without_returns_;
    std::vector<common::UniqueFd> held_; // the libraries probed, open for the session (their /proc/self/fd names)
    double attach_s_ = 0;
};

} // namespace lotus::capture
