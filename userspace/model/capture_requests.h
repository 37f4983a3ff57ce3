// What the engine asks of capture while it reads the stream, as one interface. A live session answers (capture
// tells BPF, or reads the target, and what it learns enters the stream as records); a replay has none: its file
// holds the answers the live run put in the stream.
#pragma once
#include <cstdint>

namespace lotus::model {

struct CodeRole;

// --trainer-calls: a training process whose pipeline runs in DataLoader workers (it iterates only loaders with
// workers) need not have its object calls probed (every module of a model's forward would trap). Auto: taken
// away when a process iterates a loader with workers, put back for the rest of its life when it iterates one
// without; Off: taken away at any loader; On: never taken away.
enum class TrainerCalls { Auto, On, Off };
inline const char* trainer_calls_name(TrainerCalls m)
{
    return m == TrainerCalls::On ? "on" : m == TrainerCalls::Off ? "off" : "auto";
}

class CaptureRequests {
public:
    virtual ~CaptureRequests() = default;
    // A newly described code object's role under the key space (lotus_abi.h: a role space, or tgid |
    // LOTUS_SPACE_OWN) it was described in, for BPF. Where the role captures locals, capture resolves them to
    // slots and puts a RecordSlots in the stream, right after the CODE record.
    virtual void code_role(uint32_t tgid, uint32_t space, uint64_t code, uint64_t fingerprint,
                           const CodeRole& role) = 0;
    // A newly described type's LOTUS_TYPE_* flags in the role space it was described in, for BPF.
    virtual void type_role(uint32_t space, uint64_t type, uint64_t fingerprint, uint32_t flags) = 0;
    // Whether capture reads objects from the target (this interpreter's layout is known)...
    virtual bool reads_objects() const = 0;
    // ...what a DataLoader (kObjectLoader) or a pass's iterator (kObjectIterator: BatchTracker::next_started) holds,
    // read while the call that named it runs: answered with a RecordObject in the stream, right after the record that
    // asked.
    virtual void describe_object(uint32_t tgid, uint64_t object, uint32_t kind) = 0;
    // --trainer-calls' switch...
    virtual TrainerCalls trainer_calls() const = 0;
    // ...whether capture can take a process's object-calls probe away and put it back (else every call stays
    // probed, and a process that would have been asked is noted: ProcessInfo::calls_kept_ns)...
    virtual bool switches_object_calls() const = 0;
    // ...and the ask: taken away (on = false) or put back (on = true), answered with a RecordObjectCalls once the
    // change took effect.
    virtual void object_calls(uint32_t tgid, bool on) = 0;
};

} // namespace lotus::model
