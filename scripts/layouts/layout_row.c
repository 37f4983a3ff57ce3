/* One row of userspace/cpython/cpython_layout_rows.inc, measured with offsetof() against one CPython version's
 * own headers (compiled by scripts/cpython-layouts.sh with that version's include directory). Prints the row
 * as C++ source. x86_64. */
#define Py_BUILD_CORE 1 /* _PyInterpreterFrame and _PyRuntimeState live in the internal headers */
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#if PY_VERSION_HEX < 0x030B0000
#include <frameobject.h>
#include <longintrepr.h>
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
/* 3.10 does not install the dict's keys (Objects/dict-common.h): its fields as that file declares them */
typedef struct {
    Py_hash_t me_hash;
    PyObject *me_key;
    PyObject *me_value;
} PyDictKeyEntry;
struct _dictkeysobject {
    Py_ssize_t dk_refcnt;
    Py_ssize_t dk_size;
    void *dk_lookup;
    Py_ssize_t dk_usable;
    Py_ssize_t dk_nentries;
    char dk_indices[];
};
#else
#include "internal/pycore_dict.h"
#include "internal/pycore_object.h"
#include "internal/pycore_frame.h"
#include "internal/pycore_runtime.h"
#include "internal/pycore_interp.h"
#if PY_VERSION_HEX >= 0x030E0000
#include "internal/pycore_interpframe.h"
#include "internal/pycore_stackref.h"
#endif
#if PY_VERSION_HEX < 0x030C0000
#include "cpython/longintrepr.h"
#endif
#endif

#define OFF(type, field) ((long)offsetof(type, field))

/* The bit at which a 1 written into a bitfield of PyASCIIObject.state appears. */
static int state_bit(int kind)
{
    PyASCIIObject o;
    uint32_t bits = 0;
    memset(&o, 0, sizeof(o));
    if (kind)
        o.state.kind = 1;
    else
        o.state.ascii = 1;
    memcpy(&bits, &o.state, sizeof(bits) < sizeof(o.state) ? sizeof(bits) : sizeof(o.state));
    for (int b = 0; b < 32; b++)
        if (bits & (1u << b))
            return b;
    return -1;
}

int main(void)
{
    long tstate_cframe = -1, cframe_current_frame = -1, tstate_current_frame = -1;
    long frame_code, frame_previous, frame_owner = -1, frame_localsplus, owner_cstack = -1, frame_is_entry = -1;
    unsigned long stackref_tag_mask = 0;
    long code_name, code_localsplusnames, code_nlocals = -1, code_cellvars = -1, code_cell2arg = -1;
    long long_size, long_digits;
    int long_tagged = 0;
    long runtime_tstate;
#if PY_VERSION_HEX < 0x030C0000
    /* what _PyThreadState_GET() reads: the thread state of the thread that holds the GIL */
    runtime_tstate = OFF(_PyRuntimeState, gilstate.tstate_current);
#else
    /* 3.12+ keep the current thread state in a thread-local; the main interpreter's GIL names its holder */
    runtime_tstate = OFF(_PyRuntimeState, _main_interpreter) + OFF(PyInterpreterState, _gil.last_holder);
#endif
#if PY_VERSION_HEX < 0x030B0000
    /* 3.10: frames are PyFrameObjects; tstate->frame; no co_qualname; arguments moved into cells */
    tstate_current_frame = OFF(PyThreadState, frame);
    frame_code = OFF(PyFrameObject, f_code);
    frame_previous = OFF(PyFrameObject, f_back);
    frame_localsplus = OFF(PyFrameObject, f_localsplus);
    code_name = OFF(PyCodeObject, co_name);
    code_localsplusnames = OFF(PyCodeObject, co_varnames);
    code_nlocals = OFF(PyCodeObject, co_nlocals);
    code_cellvars = OFF(PyCodeObject, co_cellvars);
    code_cell2arg = OFF(PyCodeObject, co_cell2arg);
#else
#if PY_VERSION_HEX < 0x030D0000
    tstate_cframe = OFF(PyThreadState, cframe);
    cframe_current_frame = OFF(_PyCFrame, current_frame);
#else
    tstate_current_frame = OFF(PyThreadState, current_frame);
#endif
#if PY_VERSION_HEX < 0x030D0000
    frame_code = OFF(_PyInterpreterFrame, f_code);
#else
    frame_code = OFF(_PyInterpreterFrame, f_executable);
#endif
    frame_previous = OFF(_PyInterpreterFrame, previous);
    frame_owner = OFF(_PyInterpreterFrame, owner);
    frame_localsplus = OFF(_PyInterpreterFrame, localsplus);
#if PY_VERSION_HEX < 0x030C0000
    frame_is_entry = OFF(_PyInterpreterFrame, is_entry); /* 3.11: --all-calls tells inlined frames by it */
#elif PY_VERSION_HEX < 0x030E0000
    owner_cstack = FRAME_OWNED_BY_CSTACK; /* _PyEval_EvalFrameDefault's entry (shim) frame */
#else
    owner_cstack = FRAME_OWNED_BY_INTERPRETER; /* the entry frame's owner, renamed in 3.14 */
#endif
#if PY_VERSION_HEX >= 0x030E0000
    stackref_tag_mask = Py_TAG_BITS; /* a _PyStackRef's tag bits (the default, GIL build) */
#endif
    code_name = OFF(PyCodeObject, co_qualname);
    code_localsplusnames = OFF(PyCodeObject, co_localsplusnames);
#endif
#if PY_VERSION_HEX < 0x030C0000
    long_size = OFF(PyVarObject, ob_size);
    long_digits = OFF(PyLongObject, ob_digit);
#else
    long_size = OFF(PyLongObject, long_value.lv_tag); /* ndigits << 3 | sign */
    long_digits = OFF(PyLongObject, long_value.ob_digit);
    long_tagged = 1;
#endif
    printf("    {%d, %d, lotus_py_layout{\n", PY_MAJOR_VERSION, PY_MINOR_VERSION);
    printf("        .tstate_cframe = %ld, .cframe_current_frame = %ld, .tstate_current_frame = %ld,\n", tstate_cframe,
           cframe_current_frame, tstate_current_frame);
    printf("        .frame_code = %ld, .frame_previous = %ld, .frame_owner = %ld, .frame_localsplus = %ld,\n",
           frame_code, frame_previous, frame_owner, frame_localsplus);
    printf("        .owner_cstack = %ld, .stackref_tag_mask = %lu,\n", owner_cstack, stackref_tag_mask);
    printf("        .code_name = %ld, .code_filename = %ld, .code_firstlineno = %ld,\n", code_name,
           OFF(PyCodeObject, co_filename), OFF(PyCodeObject, co_firstlineno));
    printf("        .object_type = %ld, .type_name = %ld, .type_flags = %ld,\n", OFF(PyObject, ob_type),
           OFF(PyTypeObject, tp_name), OFF(PyTypeObject, tp_flags));
    printf("        .unicode_state = %ld, .unicode_length = %ld, .unicode_ascii_data = %ld, "
           ".unicode_compact_data = %ld,\n",
           OFF(PyASCIIObject, state), OFF(PyASCIIObject, length), (long)sizeof(PyASCIIObject),
           (long)sizeof(PyCompactUnicodeObject));
    printf("        .unicode_kind_shift = %d, .unicode_ascii_bit = %d,\n", state_bit(1), state_bit(0));
    printf("        .long_size = %ld, .long_digits = %ld, .long_tagged = %d,\n", long_size, long_digits, long_tagged);
    printf("        .code_localsplusnames = %ld, .tuple_size = %ld, .tuple_items = %ld, .frame_is_entry = %ld,\n",
           code_localsplusnames, OFF(PyVarObject, ob_size), OFF(PyTupleObject, ob_item), frame_is_entry);
    printf("        .code_nlocals = %ld, .code_cellvars = %ld, .code_cell2arg = %ld, .cell_ref = %ld, "
           ".type_base = %ld,\n",
           code_nlocals, code_cellvars, code_cell2arg, OFF(PyCellObject, ob_ref), OFF(PyTypeObject, tp_base));
    printf("        .runtime_tstate = %ld, .bytes_data = %ld},\n", runtime_tstate, OFF(PyBytesObject, ob_sval));

    /* Where an instance keeps its attributes (user space reads a few: cpython/instance_attrs.h) */
    long managed_dict = 0, managed_values = 0, values_items = 0, values_valid = -1, keys_size = -1, keys_log2_size = -1;
    long keys_log2_index_bytes = -1, keys_kind = -1, unicode_entry = -1, unicode_key = -1, unicode_value = -1;
    unsigned long flag_managed_dict = 0, flag_inline_values = 0, managed_tagged = 0;
#if PY_VERSION_HEX < 0x030B0000
    keys_size = OFF(struct _dictkeysobject, dk_size); /* 3.10: the instance's dict at tp_dictoffset */
#else
    flag_managed_dict = Py_TPFLAGS_MANAGED_DICT;
#ifdef MANAGED_DICT_OFFSET
    managed_dict = MANAGED_DICT_OFFSET;
#else
    managed_dict = -3 * (long)sizeof(PyDictOrValues); /* 3.12: as _PyObject_DictOrValuesPointer computes it */
#endif
    keys_log2_size = OFF(struct _dictkeysobject, dk_log2_size);
    keys_log2_index_bytes = OFF(struct _dictkeysobject, dk_log2_index_bytes);
    keys_kind = OFF(struct _dictkeysobject, dk_kind);
    unicode_entry = (long)sizeof(PyDictUnicodeEntry);
    unicode_key = OFF(PyDictUnicodeEntry, me_key);
    unicode_value = OFF(PyDictUnicodeEntry, me_value);
#if PY_VERSION_HEX < 0x030C0000
    managed_values = managed_dict - (long)sizeof(PyObject *); /* _PyObject_ValuesPointer: the slot below */
#elif PY_VERSION_HEX < 0x030D0000
    managed_tagged = 1; /* PyDictOrValues: the values' address - 1, or the dict */
#else
    flag_inline_values = Py_TPFLAGS_INLINE_VALUES; /* the values right after the object (tp_basicsize) */
#endif
#endif
#if PY_VERSION_HEX >= 0x030D0000
    values_items = OFF(PyDictValues, values);
    values_valid = OFF(PyDictValues, valid); /* 0: the values moved into a dict */
#endif
    printf("        ObjectLayout{.type_basicsize = %ld, .type_dictoffset = %ld, .heaptype_cached_keys = %ld,\n",
           OFF(PyTypeObject, tp_basicsize), OFF(PyTypeObject, tp_dictoffset), OFF(PyHeapTypeObject, ht_cached_keys));
    printf("        .flag_managed_dict = %lu, .flag_inline_values = %lu, .managed_dict = %ld, .managed_values = %ld,\n",
           flag_managed_dict, flag_inline_values, managed_dict, managed_values);
    printf("        .managed_tagged = %lu, .values_items = %ld, .values_valid = %ld, .dict_keys = %ld, "
           ".dict_values = %ld,\n",
           managed_tagged, values_items, values_valid, OFF(PyDictObject, ma_keys), OFF(PyDictObject, ma_values));
    printf("        .keys_size = %ld, .keys_log2_size = %ld, .keys_log2_index_bytes = %ld, .keys_kind = %ld,\n",
           keys_size, keys_log2_size, keys_log2_index_bytes, keys_kind);
    printf("        .keys_nentries = %ld, .keys_indices = %ld,\n", OFF(struct _dictkeysobject, dk_nentries),
           OFF(struct _dictkeysobject, dk_indices));
    printf("        .entry_size = %ld, .entry_key = %ld, .entry_value = %ld,\n", (long)sizeof(PyDictKeyEntry),
           OFF(PyDictKeyEntry, me_key), OFF(PyDictKeyEntry, me_value));
    printf("        .unicode_entry_size = %ld, .unicode_entry_key = %ld, .unicode_entry_value = %ld},\n",
           unicode_entry, unicode_key, unicode_value);

    /* What `lotus-bpf dump` reads beside the frames: every thread of the runtime, and a frame's line */
    long native_thread_id = -1, frame_instr = -1, frame_lasti = -1, code_adaptive = -1, linetable_format = 310;
#if PY_VERSION_HEX < 0x030B0000
    long threads_head = OFF(PyInterpreterState, tstate_head);
    frame_lasti = OFF(PyFrameObject, f_lasti); /* an int, in code units */
#else
    long threads_head = OFF(PyInterpreterState, threads.head);
    native_thread_id = OFF(PyThreadState, native_thread_id);
    code_adaptive = OFF(PyCodeObject, co_code_adaptive);
    linetable_format = 311; /* PEP 657's location table */
#if PY_VERSION_HEX < 0x030D0000
    frame_instr = OFF(_PyInterpreterFrame, prev_instr);
#else
    frame_instr = OFF(_PyInterpreterFrame, instr_ptr);
#endif
#endif
    printf("        StackLayout{.runtime_interpreters_head = %ld, .interp_threads_head = %ld, .tstate_next = %ld,\n",
           OFF(_PyRuntimeState, interpreters.head), threads_head, OFF(PyThreadState, next));
    printf("        .tstate_thread_id = %ld, .tstate_native_thread_id = %ld, .frame_instr = %ld, .frame_lasti = %ld,\n",
           OFF(PyThreadState, thread_id), native_thread_id, frame_instr, frame_lasti);
    printf("        .code_linetable = %ld, .code_adaptive = %ld, .linetable_format = %ld, .code_argcount = %ld}},\n",
           OFF(PyCodeObject, co_linetable), code_adaptive, linetable_format, OFF(PyCodeObject, co_argcount));
    return 0;
}
