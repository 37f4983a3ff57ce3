// The reconstruction engine: a pure function of the event stream (lotus_abi.h records) to spans. It knows
// nothing of BPF or files; capture feeds it, exporters consume what it emits.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "lotus_abi.h"
#include "batches.h"
#include "capture_requests.h"
#include "native_map.h"
#include "record_dispatch.h"
#include "role_spaces.h"
#include "rules.h"
#include "spans.h"
#include "stuck.h"
#include "user_records.h"
#include "wait_causes.h"

namespace lotus::model {

struct EngineCounters {
    uint64_t events = 0;
    uint64_t entries = 0, returns = 0;
    uint64_t malformed = 0;       // records too short or of unknown type
    uint64_t lost_returns = 0;    // open spans closed by a shallower event: their return never arrived
    uint64_t incomplete = 0;      // spans still open when their thread or the stream ended
    uint64_t unknown_code = 0;    // entries whose code object was never described
    uint64_t native_calls = 0;    // native function spans emitted
    uint64_t native_unmatched = 0; // native returns without their entry (lost, or entered before attach)
    uint64_t native_unended = 0;   // native calls left without their return instruction (an exception, a tail call)
    uint64_t samples = 0;         // perf-event samples
};

class Engine : private RecordHandler {
public:
    using SpanSink = std::function<void(const Span&)>;
    // requests: capture's side of the live session (capture_requests.h), not owned; none on replay.
    Engine(const Rules& rules, SpanSink spans, CaptureRequests* requests = nullptr);
    // Told before an exited process is folded into its role's row (process_fold.h) and forgotten: processes()
    // still holds both, so that what keeps figures by pid can fold its own and name the process.
    using FoldSink = std::function<void(uint32_t pid, uint32_t into)>;
    void set_fold_sink(FoldSink f) { fold_sink_ = std::move(f); }
    // Several nodes' streams: each process learns its node's name (ProcessInfo::node) when it is first met.
    void set_node_of(std::function<std::string(uint32_t)> f) { node_of_ = std::move(f); }

    // Processes known before the stream starts (the traced root and its live descendants); also what a
    // RecordProcess in the stream does.
    void add_process(uint32_t pid, uint32_t parent, bool root);
    // One record from the ring buffer or a record file.
    void consume(const void* data, size_t len);
    // End of stream: spans still open are counted as incomplete, never emitted.
    void finish();

    const std::map<uint32_t, ProcessInfo>& processes() const { return processes_; }
    const EngineCounters& counters() const { return counters_; }
    const BatchTracker& batches() const { return batches_; }
    uint64_t samples() const { return sample_seq_; }
    const NativeMap& native_map() const { return native_map_; }
    const WaitCauses& wait_causes() const { return wait_causes_; }
    bool pipeline_seen() const { return pipeline_seen_; }
    // Calls seen of each --span pattern (Rules::spans() order).
    const std::vector<uint64_t>& span_calls() const { return span_calls_; }
    // Libraries whose native probes went live after a traced process had loaded them (RecordNativeLate).
    struct NativeLate {
        uint32_t pid = 0;
        std::string library;
        uint64_t loaded_ns = 0, live_ns = 0;
    };
    const std::vector<NativeLate>& native_late() const { return native_late_; }
    // Traced processes that ran another CPython interpreter than the probed one (RecordOtherInterpreter).
    struct OtherInterpreter {
        uint32_t pid = 0;
        std::string path;
    };
    const std::vector<OtherInterpreter>& other_interpreters() const { return other_interpreters_; }
    // Launch mode: processes of the command that ran CPython outside the traced tree (RecordUntracedPython).
    struct UntracedPython {
        uint32_t pid = 0;
        std::string comm, path;
    };
    const std::vector<UntracedPython>& untraced_pythons() const { return untraced_pythons_; }
    // Ops whose call was seen running other objects' calls in turn (two or more, one level below its own frames):
    // a class of the user's that plays a pipeline's role (a Compose of its own) and is one op because no --pipeline
    // names it. Its inner calls reach the stream only while their classes (or its own) are new to BPF, so they are
    // seen in its first calls, not in every one. By op name, in the order first seen.
    struct ContainerSeen {
        std::string op;
        std::vector<std::string> callees; // the classes its first call so seen called, in order (repeats kept)
        uint64_t calls = 0;               // its calls seen running two or more
        uint32_t pid = 0;                 // the process of the first
        bool in_pipeline = false;         // an op of a pipeline's sample (else of a __getitem__'s own calls)
    };
    const std::vector<ContainerSeen>& containers() const { return containers_; }
    // Where process pid is at work now (the stuck-process watch, model/stuck.h): its earliest open batch, sample,
    // op or --span call (a training loop waiting in next() is not at work of its own), the innermost open sample's
    // index and its open batch's; nullopt when it is in none.
    std::optional<OpenWork> open_work(uint32_t pid) const;

private:
    bool reads_objects() const { return requests_ && requests_->reads_objects(); }
    // Open calls of a thread. A sample or a container op is a level: the calls made from its frames (at the
    // depth just below the level's innermost frame) are its ops; calls of the same object below it (nn.Module's
    // _wrapped_call_impl -> _call_impl -> forward) are Inner: the level's own frames.
    enum class OpenKind { Sample, Op, Inner, Next, IterInit, IterCall, Py };
    struct Open {
        OpenKind kind = OpenKind::Op;
        uint32_t depth = 0;
        uint64_t start_ns = 0;
        uint64_t code = 0;      // ops are named at their return, when the TYPE record of self has surely arrived
        uint64_t self_type = 0;
        uint64_t self_obj = 0;  // the pipeline or container object of a level; next(): the iterator
        int span_rule = -1;     // Py: its --span pattern
        bool code_own = false, type_own = false; // which descriptions of code and self_type BPF went by
        int64_t sample = -1;
        uint64_t sample_id = 0;
        bool level = false;          // a sample, or an op of a container class
        std::string container;       // an op inside a container op: the container's class
        uint32_t owner = 0;          // a sample: the training process and DataLoader it is for
        int loader = -1;
        std::vector<Span> ops; // a sample's finished ops, emitted with it so no op outlives an unfinished sample
        lotus_counters counters{};   // at entry
        // A sample: the pipeline objects it called, and its item (the callers' code objects and first arguments,
        // as its first pipeline call described them; none unless a __getitem__ is among them): what another call
        // must match to be of the same item.
        std::vector<uint64_t> pipelines;
        std::vector<std::pair<uint64_t, int64_t>> item;
        // An op that is no level: the depth of its own frames (its __call__'s, where the evaluator is probed) and the
        // objects called just below them (self type, described in the process's own space).
        uint32_t own_depth = 0;
        std::vector<std::pair<uint64_t, bool>> callees;
        // A sample opened inside another open call (enclosing()): that call's start and depth.
        bool enclosed = false;
        uint64_t enclosing_start = 0;
        uint32_t enclosing_depth = 0;
    };
    struct Symbol {
        uint64_t hi;     // the range's end (its start is its key)
        uint32_t map_id; // the native map's number of the function, or of "[unknown]" in its library
        bool named;      // a symbol covers the addresses
        bool anchor;     // its function is a sample anchor (Framework::sample_anchors)
    };
    using Symbols = std::map<uint64_t, Symbol>; // by the start of the address range, ranges not overlapping
    struct OpenNative {
        uint32_t func;
        uint64_t start_ns;
        uint64_t sp; // at its entry: the return address's slot (0: a record from before ABI 11)
    };
    // The calls open on a thread whose frames are gone by stack pointer `sp` (theirs below it, or at it when
    // `at` too): left by an exception or a tail call, they end no span; counted.
    void drop_left_natives(std::vector<OpenNative>& stack, uint64_t sp, bool at);
    struct NativeFunc {
        std::string name, library;
        uint32_t map_id; // the native map's number of (name, library)
    };

    // The stream's records (record_dispatch.h), each to the part that reads it.
    void py_entry(const lotus_py_entry& e) override { on_entry(e); }
    void py_return(const lotus_py_return& r) override { on_return(r); }
    void code(const lotus_code_info& c) override { on_code(c); }
    void type(const lotus_type_info& t) override { on_type(t); }
    void process_event(const lotus_proc_event& p) override { on_process(p); }
    void open(const lotus_open& o) override;
    void open_done(const lotus_open_done& o) override;
    void native(const lotus_native& n) override { on_native(n); }
    void sample(const lotus_sample& s) override { on_sample(s); }
    void msg(const lotus_msg& m) override;
    void getppid(const lotus_event_header& h) override;
    void thread_name(const lotus_thread_name& t) override;
    void capture(const lotus_py_entry& e) override { captured(e); }
    void slots(const RecordSlots& r) override { on_slots(r); }
    void known_process(const RecordProcess& r) override { add_process(r.pid, r.parent, r.root != 0); }
    void native_func(const RecordNativeFunc& f) override;
    void symbol(const RecordSymbol& r) override { on_symbol(r.tgid, r.ip, r.ip + 1, r.name, r.library); }
    void symbol_range(const RecordSymbolRange& r) override { on_symbol(r.tgid, r.ip_lo, r.ip_hi, r.name, r.library); }
    void rank(const RecordRank& r) override;
    void native_late(const RecordNativeLate& r) override;
    void other_interpreter(const RecordOtherInterpreter& r) override;
    void untraced_python(const RecordUntracedPython& r) override;
    void object(const RecordObject& r) override { batches_.described(r); }
    void command(const RecordCommand& r) override;
    void object_calls(const RecordObjectCalls& r) override;
    // A process began next() of a DataLoader iterator: whether its object calls should be probed (--trainer-calls).
    void loader_iterated(uint32_t tgid, uint64_t ts, bool single_process);
    // A new program in the process: its object calls are probed again (its loaders are yet to come).
    void execed_calls(uint32_t tgid);
    void on_entry(const lotus_py_entry& e);
    void on_return(const lotus_py_return& r);
    void on_code(const lotus_code_info& c);
    void on_slots(const RecordSlots& r);
    void on_process(const lotus_proc_event& p);
    void on_native(const lotus_native& n);
    void on_sample(const lotus_sample& s);
    // [lo, hi) of process tgid resolve to this function (empty: none) and library.
    void on_symbol(uint32_t tgid, uint64_t lo, uint64_t hi, const char (&name)[kSymbolNameLen],
                   const char (&library)[kLibraryNameLen]);
    void close_thread(uint32_t tid);
    // A dataset without a pipeline call: the Python calls its __getitem__ makes (its own transforms) are the
    // ops of an implicit sample, which spans the first call's start to the last call's end.
    struct Implicit {
        bool open = false;
        uint32_t pid = 0;
        int64_t index = -1;
        uint64_t sample_id = 0, start_ns = 0, end_ns = 0;
        std::vector<Span> ops;
    };
    void close_implicit(uint32_t tid);
    // A sample whose pipeline call returned waits here until its thread goes on to another item (or its batch or
    // the stream ends): the same __getitem__ may call more pipelines (a transform and a target_transform) and
    // objects of its own, which are that one sample's, not samples of their own.
    struct Returned {
        bool open = false;
        uint32_t pid = 0;
        Open sample;
        uint64_t end_ns = 0;
        lotus_counters end{}; // at its last call's return
        bool raised = false;  // its last pipeline call raised
    };
    // Whether entry e is a call of the item sample `o` describes.
    bool same_item(const Open& o, const lotus_py_entry& e);
    // Whether entry e is a retry of that item's pipeline after its call raised: made by a __getitem__ that called
    // the failed one (one of the item's callers, with the same first argument), under another __getitem__ call.
    bool retry_of(const Open& o, const lotus_py_entry& e);
    static const Open* enclosing(const std::vector<Open>& stack);
    void close_returned(uint32_t tid);
    void close_samples(uint32_t tid)
    {
        close_returned(tid);
        close_implicit(tid);
    }
    // Emits a sample with its ops; a worker's whose training process is not known yet (tracing began while it
    // ran) waits for it, in held_, so that it is counted with its DataLoader.
    void emit_sample(uint32_t pid, uint32_t tid, std::vector<Span> ops, Span sample);
    void release_held(uint32_t tid, bool force);
    void discard(std::vector<Open>& stack); // pops the top span, whose end was lost
    // own: the process's own description of the object (lotus_py_entry.own), else its role space's.
    const CodeInfo* code_info(uint32_t tgid, uint64_t code, bool own);
    const CodeRole* role(uint32_t tgid, uint64_t code, bool own);
    const TypeDesc* type_desc(uint32_t tgid, uint64_t type, bool own) const;
    std::string type_name(uint32_t tgid, uint64_t type, bool own);
    static Open opened(OpenKind kind, const lotus_py_entry& e);
    void on_type(const lotus_type_info& t);
    void captured(const lotus_py_entry& e);
    bool enter_level(std::vector<Open>& stack, const lotus_py_entry& e, const CodeRole& r);
    void open_sample(std::vector<Open>& stack, const lotus_py_entry& e);
    void finish_span(const lotus_py_return& r, Open o, std::vector<Open>& stack);
    // The span of a sample or an op from its entry's state to its end.
    Span closed_span(uint32_t pid, uint32_t tid, Open& o, uint64_t end_ns, const lotus_counters& end);
    std::string op_name(uint32_t tgid, const Open& o);
    ProcessInfo& process(uint32_t pid);
    void fold_exited(uint64_t now_ns);

    const Rules& rules_;
    NativeMap native_map_;
    WaitCauses wait_causes_;
    uint32_t anonymous_id_, no_stack_id_; // the native map's "[unknown]" without a symbol or without a user stack
    SpanSink span_sink_;
    CaptureRequests* requests_;
    struct LastCode {
        uint32_t tgid = 0;
        uint64_t code = 0;
        bool own = false;
    } last_code_; // the code object of the latest CODE record: a RecordSlots follows it
    FoldSink fold_sink_;
    enum class CallsAsked : uint8_t { None, Off, OnForGood };
    std::unordered_map<uint32_t, CallsAsked> calls_asked_; // per process
    // Per process whose object calls are not probed: when each next() of its loaders without workers began (those
    // begun after the probe was back, but read before its record, are not counted at that record).
    std::unordered_map<uint32_t, std::vector<uint64_t>> unprobed_nexts_;
    // Per process, when its single-process next() calls began while no stop of its object calls was recorded
    // yet (the last kMaxNextsBeforeOff): a stop's record comes once its close has ended, stamped with when the
    // close began, after the next() calls begun meanwhile; those count as unprobed too.
    std::unordered_map<uint32_t, std::vector<uint64_t>> nexts_before_off_;
    static constexpr size_t kMaxNextsBeforeOff = 256;
    std::function<std::string(uint32_t)> node_of_;
    std::map<uint32_t, ProcessInfo> processes_;
    RoleSpaces spaces_;                             // code objects and types
    std::unordered_map<uint32_t, Symbols> symbols_; // per process
    std::unordered_map<uint32_t, std::vector<Open>> stacks_; // per thread id
    std::unordered_map<uint32_t, uint32_t> thread_owner_;    // tid -> tgid
    std::unordered_map<uint32_t, Implicit> implicit_;        // per thread id
    std::unordered_map<uint32_t, Returned> returned_;        // per thread id
    std::unordered_map<uint32_t, std::vector<Span>> held_;   // per thread id: samples (after their ops) waiting
    static constexpr size_t kMaxHeld = 1 << 14;
    std::unordered_map<uint32_t, std::vector<OpenNative>> natives_; // per thread id
    std::unordered_map<uint32_t, NativeFunc> native_funcs_;  // by func number (RecordNativeFunc)
    std::vector<NativeLate> native_late_;
    std::vector<OtherInterpreter> other_interpreters_;
    std::vector<UntracedPython> untraced_pythons_;
    std::vector<ContainerSeen> containers_;
    // An op's call that ran other objects' calls in turn, into containers_.
    void note_container(uint32_t tgid, const Open& o, const std::string& name, bool in_pipeline);
    EngineCounters counters_;
    uint64_t sample_seq_ = 0;
    bool pipeline_seen_ = false;
    std::vector<uint64_t> span_calls_;
    BatchTracker batches_{span_sink_, processes_, rules_.framework()};
};

} // namespace lotus::model
