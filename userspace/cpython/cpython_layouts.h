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
// instructions every frame starts with, and the one a normal return runs. Empty for other versions.
struct InlineCallOpcodes {
    std::vector<int> resume; // RESUME and its quickened form
    int return_value = -1;
};
InlineCallOpcodes inline_call_opcodes(const PyVersion& v);
// "3.11" style list of supported versions, for error messages.
std::string supported_versions();

} // namespace lotus::cpython
