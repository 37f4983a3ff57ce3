// Loads the BPF programs, attaches them, feeds the ring buffer to a callback and detaches everything when
// destroyed. Produces events only; what they mean is the model's business.
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "target/interpreter.h"

struct lotus_bpf;
struct ring_buffer;

namespace lotus::capture {

struct CaptureError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct CaptureStats {
    uint64_t submitted = 0; // records written to the ring buffer
    uint64_t lost = 0;      // records dropped because it was full
};

// Throws CaptureError unless this process may load BPF and open perf events (root, or CAP_BPF+CAP_PERFMON).
void check_privileges();

class Probe {
public:
    using Sink = std::function<void(const void* data, size_t len)>;

    // Opens and loads the programs for this interpreter's layout. Throws CaptureError.
    Probe(const target::Interpreter& interp, Sink sink);
    ~Probe();
    Probe(const Probe&) = delete;
    Probe& operator=(const Probe&) = delete;

    // Follow new processes (fork/exec/exit tracepoints). Call before trace_process so no fork is missed.
    void attach_process_tracking();
    // Add a process to the traced set; its future children join by themselves.
    void trace_process(uint32_t tgid, uint32_t root_tgid);
    bool is_traced(uint32_t tgid) const;
    // Entry and return uprobes on the evaluator, for every process mapping it (filtered in BPF).
    void attach_python();
    // Delivers pending records to the sink. Returns the number delivered, or throws on error.
    int poll(int timeout_ms);
    void set_role(uint32_t tgid, uint64_t code, uint32_t flags, const std::vector<uint8_t>& capture_slots);
    // Forget every role of a process (after exec its addresses mean something else).
    void forget_roles(uint32_t tgid);
    CaptureStats stats() const;
    // Detach and unload now (also done by the destructor).
    void close();

private:
    static int on_record(void* ctx, void* data, size_t len);
    target::Interpreter interp_;
    Sink sink_;
    lotus_bpf* skel_ = nullptr;
    ring_buffer* rb_ = nullptr;
};

} // namespace lotus::capture
