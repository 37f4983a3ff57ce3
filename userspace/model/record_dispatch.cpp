#include "model/record_dispatch.h"

#include <algorithm>
#include <cstring>

namespace lotus::model {

namespace {

template <typename T>
const T* as(const void* data, size_t len)
{
    return len >= sizeof(T) ? static_cast<const T*>(data) : nullptr;
}

// A record whose older form ends at `min`: a full one, the missing tail zeroed.
template <typename T>
bool widened(const void* data, size_t len, size_t min, T& out)
{
    if (len < min)
        return false;
    out = T{};
    memcpy(&out, data, std::min(len, sizeof(out)));
    return true;
}

} // namespace

bool dispatch(const void* data, size_t len, RecordHandler& h)
{
    auto* hd = as<lotus_event_header>(data, len);
    if (!hd)
        return false;
    // Calls `f` on the record as a T when it is long enough.
    auto call = [&](auto* typed, auto f) {
        if (!typed)
            return false;
        (h.*f)(*typed);
        return true;
    };
    switch (hd->type) {
    case LOTUS_EV_PY_ENTRY:
        return call(as<lotus_py_entry>(data, len), &RecordHandler::py_entry);
    case LOTUS_EV_PY_RETURN:
        return call(as<lotus_py_return>(data, len), &RecordHandler::py_return);
    case LOTUS_EV_CODE: { // (no fingerprint before ABI 10: a replay needs none)
        lotus_code_info c;
        return widened(data, len, offsetof(lotus_code_info, fingerprint), c) && call(&c, &RecordHandler::code);
    }
    case LOTUS_EV_TYPE: {
        lotus_type_info t;
        return widened(data, len, offsetof(lotus_type_info, fingerprint), t) && call(&t, &RecordHandler::type);
    }
    case LOTUS_EV_FORK:
    case LOTUS_EV_EXIT:
    case LOTUS_EV_EXEC:
        return call(as<lotus_proc_event>(data, len), &RecordHandler::process_event);
    case LOTUS_EV_OPEN:
        return call(as<lotus_open>(data, len), &RecordHandler::open);
    case LOTUS_EV_OPEN_DONE:
        return call(as<lotus_open_done>(data, len), &RecordHandler::open_done);
    case LOTUS_EV_NATIVE_ENTRY:
    case LOTUS_EV_NATIVE_RETURN: { // (no sp before ABI 11: paired by function, as return probes made them)
        lotus_native n;
        return widened(data, len, offsetof(lotus_native, sp), n) && call(&n, &RecordHandler::native);
    }
    case LOTUS_EV_SAMPLE: {
        lotus_sample smp;
        return widened(data, len, offsetof(lotus_sample, sp), smp) && call(&smp, &RecordHandler::sample);
    }
    case LOTUS_EV_MSG:
        return call(as<lotus_msg>(data, len), &RecordHandler::msg);
    case LOTUS_EV_GETPPID:
        return call(hd, &RecordHandler::getppid);
    case LOTUS_EV_THREAD:
        return call(as<lotus_thread_name>(data, len), &RecordHandler::thread_name);
    case LOTUS_EV_USAGE: {
        lotus_usage u;
        return widened(data, len, offsetof(lotus_usage, net_sent), u) && call(&u, &RecordHandler::exit_usage);
    }
    case LOTUS_EV_CAPTURE:
        return call(as<lotus_py_entry>(data, len), &RecordHandler::capture);
    case kRecordSlots:
        return call(as<RecordSlots>(data, len), &RecordHandler::slots);
    case kRecordProcess:
        return call(as<RecordProcess>(data, len), &RecordHandler::known_process);
    case kRecordEnd:
        return call(as<RecordEnd>(data, len), &RecordHandler::end);
    case kRecordNativeFunc:
        return call(as<RecordNativeFunc>(data, len), &RecordHandler::native_func);
    case kRecordSymbol:
        return call(as<RecordSymbol>(data, len), &RecordHandler::symbol);
    case kRecordSymbolRange:
        return call(as<RecordSymbolRange>(data, len), &RecordHandler::symbol_range);
    case kRecordRank: {
        RecordRank r;
        if (!widened(data, len, offsetof(RecordRank, world_size), r))
            return false;
        if (len < offsetof(RecordRank, pad)) // (written before world_size was)
            r.world_size = -1;
        return call(&r, &RecordHandler::rank);
    }
    case kRecordUsage: {
        RecordUsage r;
        if (!widened(data, len, offsetof(RecordUsage, net_sent), r))
            return false;
        if (len < offsetof(RecordUsage, private_kb))
            r.flags = 0;
        if (len < offsetof(RecordUsage, anon_kb) + sizeof(r.anon_kb))
            r.private_kb = r.shared_dirty_kb = r.anon_kb = kNoPss;
        return call(&r, &RecordHandler::usage);
    }
    case kRecordNativeLate:
        return call(as<RecordNativeLate>(data, len), &RecordHandler::native_late);
    case kRecordOtherInterpreter:
        return call(as<RecordOtherInterpreter>(data, len), &RecordHandler::other_interpreter);
    case kRecordUntracedPython:
        return call(as<RecordUntracedPython>(data, len), &RecordHandler::untraced_python);
    case kRecordObject:
        return call(as<RecordObject>(data, len), &RecordHandler::object);
    case kRecordCommand:
        return call(as<RecordCommand>(data, len), &RecordHandler::command);
    case kRecordObjectCalls:
        return call(as<RecordObjectCalls>(data, len), &RecordHandler::object_calls);
    case kRecordCgroup:
        return call(as<RecordCgroup>(data, len), &RecordHandler::cgroup);
    case kRecordStuck:
        return call(as<RecordStuck>(data, len), &RecordHandler::stuck);
    case kRecordHostCpu:
        return call(as<RecordHostCpu>(data, len), &RecordHandler::host_cpu);
    }
    return false;
}

} // namespace lotus::model
