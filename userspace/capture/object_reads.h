// What the engine asks to know of a DataLoader or of a pass's iterator (its dataset and
// sampler, its dataset's class and root), read from the target's memory when asked, as RecordObject records for
// the stream: the engine and the record file see the same readings.
#pragma once
#include <cstdint>
#include <vector>

#include "cpython/cpython_layouts.h"
#include "lotus_abi.h"
#include "model/user_records.h"

namespace lotus::capture {

class ObjectReads {
public:
    ObjectReads(const lotus_py_layout& layout, const cpython::ObjectLayout& objects) : layout_(layout), objects_(objects)
    {
    }
    // kind: model::kObjectLoader or kObjectIterator; read now (the object is alive while the call that named it
    // runs: the engine checks that the reading came before that call ended).
    void read(uint32_t tgid, uint64_t object, uint32_t kind);
    // The records to put in the stream now, in order (each taken once).
    std::vector<model::RecordObject> take();

private:
    lotus_py_layout layout_;
    cpython::ObjectLayout objects_;
    std::vector<model::RecordObject> done_;
};

} // namespace lotus::capture
