// The one place that knows where each CPython version keeps what lotus-bpf reads: a table of rows.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "lotus_abi.h"

namespace lotus::cpython {

struct PyVersion {
    int major = 0, minor = 0, micro = 0; // micro -1: unknown
    std::string str() const;
};

// The layout for a version, or nullopt when that version is not supported.
std::optional<lotus_py_layout> layout_for(const PyVersion& v);
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

} // namespace lotus::cpython
