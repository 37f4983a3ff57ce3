// The one place that knows where each CPython version keeps what lotus-bpf reads: a table of rows.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lotus_abi.h"

namespace lotus::cpython {

struct PyVersion {
    int major = 0, minor = 0, micro = 0; // micro -1: unknown
    std::string str() const;
};

// Where an instance keeps its attributes, for user space's reads of a few (instance_attrs.h); BPF never reads
// them. Offsets in bytes; flags as tp_flags bits (0: the version has none); -1: the version has no such field.
struct ObjectLayout {
    int32_t type_basicsize, type_dictoffset, heaptype_cached_keys; // PyTypeObject, PyHeapTypeObject
    int32_t flag_managed_dict, flag_inline_values;                 // Py_TPFLAGS_MANAGED_DICT, _INLINE_VALUES
    int32_t managed_dict;   // from the object: its dict pointer (3.11+; 0 where the dict is at tp_dictoffset)
    int32_t managed_values; // from the object: its values pointer (3.11; 0 none)
    int32_t managed_tagged; // 1: managed_dict holds the values' address - 1 when its low bit is set (3.12)
    int32_t values_items;   // PyDictValues.values
    int32_t values_valid;   // PyDictValues.valid (3.13+: 0 once the values moved into a dict), or -1
    int32_t dict_keys, dict_values; // PyDictObject.ma_keys, ma_values
    int32_t keys_size;      // PyDictKeysObject.dk_size (3.10), or -1
    int32_t keys_log2_size, keys_log2_index_bytes, keys_kind; // (3.11+), or -1
    int32_t keys_nentries, keys_indices;
    int32_t entry_size, entry_key, entry_value;                 // PyDictKeyEntry
    int32_t unicode_entry_size, unicode_entry_key, unicode_entry_value; // PyDictUnicodeEntry (3.11+), or -1
};

// What `lotus-bpf dump` reads beside the frames BPF walks (user space only): every thread state of the runtime,
// and where a frame is in its code, to name its line. Offsets in bytes; -1: the version has no such field.
struct StackLayout {
    int32_t runtime_interpreters_head; // _PyRuntimeState.interpreters.head
    int32_t interp_threads_head;       // PyInterpreterState.threads.head (3.10: tstate_head)
    int32_t tstate_next, tstate_thread_id, tstate_native_thread_id; // PyThreadState (native_thread_id: 3.11+)
    int32_t frame_instr;    // _PyInterpreterFrame.prev_instr (3.11, 3.12) / instr_ptr (3.13+): a pointer
    int32_t frame_lasti;    // PyFrameObject.f_lasti (3.10): an int, in code units
    int32_t code_linetable; // co_linetable (a bytes object)
    int32_t code_adaptive;  // co_code_adaptive: the instructions frame_instr points into (3.11+)
    int32_t linetable_format; // 310: 3.10's (start delta, line delta) pairs; 311: PEP 657's location table
    int32_t code_argcount;    // co_argcount (an int): its first locals are the positional arguments
};

// The layout for a version, or nullopt when that version is not supported.
std::optional<lotus_py_layout> layout_for(const PyVersion& v);
std::optional<ObjectLayout> object_layout_for(const PyVersion& v);
std::optional<StackLayout> stack_layout_for(const PyVersion& v);
// Opcodes whose handlers --all-calls probes where calls are inlined and no trampoline exists (3.11): the
// instructions every frame starts with, and the one a normal return runs.
struct InlineCallOpcodes {
    std::vector<int> resume; // RESUME and its quickened form
    int return_value = -1;
};
// What a version does that decides how lotus-bpf sees it, beside its layout: the one place for what differs by
// version (no code elsewhere compares version numbers).
struct VersionCaps {
    bool inlines_calls = true;    // a call from Python code runs in the same evaluator call, past every probe (3.11+)
    bool perf_trampoline = false; // PYTHONPERFSUPPORT=1 (set at start) runs every call through a C trampoline (3.12+)
    bool debug_offsets = false;   // the interpreter describes its own structures (_Py_DebugOffsets, 3.13+)
    InlineCallOpcodes inline_calls; // --all-calls's probes where calls are inlined without a trampoline (3.11)
};
// The capabilities of a supported version, or nullopt.
std::optional<VersionCaps> caps_for(const PyVersion& v);
// "3.11.2" or "3.11" (a record file's "python"), or nullopt.
std::optional<PyVersion> parse_version(const std::string& text);
// "3.11" style list of supported versions, for error messages.
std::string supported_versions();
// The newest version the table has a row for.
PyVersion newest_supported();

} // namespace lotus::cpython
