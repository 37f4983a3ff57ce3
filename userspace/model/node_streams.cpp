#include "model/node_streams.h"

#include <cstring>

#include "lotus_abi.h"
#include "model/user_records.h"

namespace lotus::model {

namespace {

// A field of a record at a byte offset, read and written without alignment assumptions.
template <typename T>
void update(uint8_t* data, size_t len, size_t offset, T (*f)(T, const StreamShift&), const StreamShift& s)
{
    if (offset + sizeof(T) > len)
        return;
    T v;
    memcpy(&v, data + offset, sizeof(T));
    v = f(v, s);
    memcpy(data + offset, &v, sizeof(T));
}

uint32_t moved_id(uint32_t id, const StreamShift& s)
{
    if (!id || !s.node)
        return id;
    return (id & LOTUS_SPACE_OWN) | ((id & ~LOTUS_SPACE_OWN) + s.node * kNodeIdStride);
}

uint64_t moved_ns(uint64_t ns, const StreamShift& s)
{
    return ns ? static_cast<uint64_t>(static_cast<int64_t>(ns) + s.clock_ns) : ns;
}

// Pipes' inode numbers are per machine: node k's get k in their top byte.
uint64_t moved_pipe(uint64_t file, const StreamShift& s) { return file ^ (static_cast<uint64_t>(s.node) << 56); }

// Native functions are numbered per capture.
uint32_t moved_func(uint32_t func, const StreamShift& s) { return func + s.node * (1u << 20); }

} // namespace

void shift_record(uint8_t* data, size_t len, const StreamShift& s)
{
    if (len < sizeof(lotus_event_header))
        return;
    uint32_t type;
    memcpy(&type, data, sizeof(type));
    update<uint32_t>(data, len, offsetof(lotus_event_header, tgid), moved_id, s);
    update<uint32_t>(data, len, offsetof(lotus_event_header, tid), moved_id, s);
    update<uint64_t>(data, len, offsetof(lotus_event_header, ts_ns), moved_ns, s);
    switch (type) {
    case LOTUS_EV_FORK:
        update<uint32_t>(data, len, offsetof(lotus_proc_event, parent_tgid), moved_id, s);
        [[fallthrough]];
    case LOTUS_EV_EXEC:
        update<uint32_t>(data, len, offsetof(lotus_proc_event, space), moved_id, s);
        break;
    case LOTUS_EV_MSG:
        update<uint64_t>(data, len, offsetof(lotus_msg, file), moved_pipe, s);
        break;
    case LOTUS_EV_NATIVE_ENTRY:
    case LOTUS_EV_NATIVE_RETURN:
        update<uint32_t>(data, len, offsetof(lotus_native, func), moved_func, s);
        break;
    case kRecordNativeFunc:
        update<uint32_t>(data, len, offsetof(RecordNativeFunc, func), moved_func, s);
        break;
    case kRecordProcess:
        update<uint32_t>(data, len, offsetof(RecordProcess, parent), moved_id, s);
        break;
    case kRecordNativeLate:
        update<uint64_t>(data, len, offsetof(RecordNativeLate, loaded_ns), moved_ns, s);
        break;
    default:
        break; // the header's ids and time are all the record has of either
    }
}

} // namespace lotus::model
