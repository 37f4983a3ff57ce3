// Names a CODE or TYPE record left for user space: BPF's reads cannot fault a page in, so a name on a page its
// process never touched (a static type's tp_name in the binary's read-only data, a deep-frozen code object's
// str) arrives unread. process_vm_readv can, and capture fills them in before the record goes to the record
// file and the engine: both see the same, complete stream.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "lotus_abi.h"

namespace lotus::capture {

// Whether the record is a description with a name BPF could not read.
bool incomplete_description(const void* data, size_t len);

// A copy of the record with those names read from the first of `pids` that can be read (the process that
// described the object, then its parents: a fork child that already exited shares the object with them).
// Names still unread stay marked (lotus_type_info.unread, lotus_code_info's 0xff kinds).
std::vector<char> complete_description(const void* data, size_t len, const std::vector<uint32_t>& pids,
                                       const lotus_py_layout& layout);

} // namespace lotus::capture
