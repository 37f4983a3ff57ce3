// Names a CODE or TYPE record left for user space: BPF's reads cannot fault a page in, so a name on a page its
// process never touched (a static type's tp_name in the binary's read-only data, a deep-frozen code object's
// str) arrives unread. Reading /proc/PID/mem can, and capture fills them in before the record goes to the record
// file and the engine: both see the same, complete stream.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "lotus_abi.h"
#include "model/record_dispatch.h"
#include "proc/process_tree.h"

namespace lotus::capture {

// Whether the record is a description with a name BPF could not read.
bool incomplete_description(const void* data, size_t len);

// A copy of the record with those names read from the first of `pids` that can be read (the process that
// described the object, then its parents: a fork child that already exited shares the object with them).
// Names still unread stay marked (lotus_type_info.unread, lotus_code_info's 0xff kinds).
std::vector<char> complete_description(const void* data, size_t len, const std::vector<uint32_t>& pids,
                                       const lotus_py_layout& layout);

// The stream's first stage: each record as BPF wrote it, completed with the names only user space can read, the
// process tree kept from its FORK records.
class Completion : private model::RecordHandler {
public:
    Completion(const lotus_py_layout& layout, proc::ProcessTree& tree) : layout_(layout), tree_(tree) {}
    // The record to pass on: `data` itself, or a completed copy (valid until the next call).
    std::pair<const void*, size_t> complete(const void* data, size_t len);

private:
    void process_event(const lotus_proc_event& p) override;
    void code(const lotus_code_info& c) override { complete_one(&c, sizeof(c)); }
    void type(const lotus_type_info& t) override { complete_one(&t, sizeof(t)); }
    void complete_one(const void* data, size_t len);
    lotus_py_layout layout_;
    proc::ProcessTree& tree_;
    std::vector<char> completed_;
};

} // namespace lotus::capture
