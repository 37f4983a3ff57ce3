// The one switch on a record's type. Each record of the stream (lotus_abi.h's kernel records and
// user_records.h's), checked once against its type's size, is handed to the handler's function for that type; a
// handler overrides the ones it wants. Engine, usage tracker, native capture, the stream's completion, the
// session and the replay all read the stream through it. (The capture's ring-buffer callback looks at a raw
// record's type once before the stream: a held child's release and libc links cannot wait for completion.)
#pragma once
#include <cstddef>

#include "lotus_abi.h"
#include "model/user_records.h"

namespace lotus::model {

class RecordHandler {
public:
    virtual ~RecordHandler() = default;
    virtual void py_entry(const lotus_py_entry&) {}
    virtual void py_return(const lotus_py_return&) {}
    virtual void code(const lotus_code_info&) {}
    virtual void type(const lotus_type_info&) {}
    virtual void process_event(const lotus_proc_event&) {} // FORK, EXIT and EXEC (its h.type says which)
    virtual void open(const lotus_open&) {}
    virtual void open_done(const lotus_open_done&) {} // ABI 12: older files have none (sizes unknown)
    virtual void native(const lotus_native&) {} // a native function's entry or return
    virtual void sample(const lotus_sample&) {}
    virtual void msg(const lotus_msg&) {}
    virtual void getppid(const lotus_event_header&) {}
    virtual void thread_name(const lotus_thread_name&) {}
    virtual void exit_usage(const lotus_usage&) {} // older files' end before the network fields: zero there
    virtual void capture(const lotus_py_entry&) {}
    virtual void slots(const RecordSlots&) {}
    virtual void known_process(const RecordProcess&) {}
    virtual void end(const RecordEnd&) {} // the session's own counts as tracing stopped
    virtual void native_func(const RecordNativeFunc&) {}
    virtual void symbol(const RecordSymbol&) {}
    virtual void symbol_range(const RecordSymbolRange&) {}
    virtual void rank(const RecordRank&) {}
    virtual void usage(const RecordUsage&) {} // older files' end before the network fields: flags 0, zero there;
                                              // or before private_kb: kNoPss there
    virtual void native_late(const RecordNativeLate&) {}
    virtual void other_interpreter(const RecordOtherInterpreter&) {}
    virtual void untraced_python(const RecordUntracedPython&) {}
    virtual void object(const RecordObject&) {}
    virtual void command(const RecordCommand&) {}
    virtual void object_calls(const RecordObjectCalls&) {}
    virtual void cgroup(const RecordCgroup&) {}
    virtual void stuck(const RecordStuck&) {}
    virtual void host_cpu(const RecordHostCpu&) {}
};

// False when the record is too short for its type or of no known type (nothing is called then).
bool dispatch(const void* data, size_t len, RecordHandler& handler);

} // namespace lotus::model
