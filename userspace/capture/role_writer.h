// What the engine learns of a code object or a type, written back where capture needs it: the role into BPF's
// maps (its next calls are told at once) and, for a role that reads named locals, their slots, read from the
// target's code object, as a record the stream carries right after the record that taught it (the engine and
// the record file see the same stream).
#pragma once
#include <cstdint>
#include <vector>

#include "lotus_abi.h"
#include "model/engine.h"
#include "model/user_records.h"
#include "proc/process_tree.h"

namespace lotus::capture {

class Probe;

class RoleWriter {
public:
    RoleWriter(Probe& probe, const lotus_py_layout& layout, const proc::ProcessTree& tree)
        : probe_(probe), layout_(layout), tree_(tree)
    {
    }
    void code_role(uint32_t tgid, uint32_t space, uint64_t code, uint64_t fingerprint, const model::CodeRole& r);
    void type_role(uint32_t space, uint64_t type, uint64_t fingerprint, uint32_t flags);
    // The records to put in the stream now, in order (each taken once).
    std::vector<model::RecordSlots> take();

private:
    Probe& probe_;
    lotus_py_layout layout_;
    const proc::ProcessTree& tree_;
    std::vector<model::RecordSlots> slots_;
};

} // namespace lotus::capture
