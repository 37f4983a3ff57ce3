// What the BPF programs could not record, by failure path (lotus_abi.h's LOTUS_FAIL_* slots of lotus_counters):
// each slot's name in otherData.bpf_failures and what it means for the outputs, said in the summary when non-zero.
#pragma once
#include <string_view>

#include "lotus_abi.h"

namespace lotus::capture {

struct BpfFailure {
    unsigned slot;
    std::string_view name, meaning;
};

inline constexpr BpfFailure kBpfFailures[] = {
    {LOTUS_FAIL_DEPTH, "depth_over_64", "call(s) nested deeper than 64 seen calls, not recorded (nor their returns)"},
    {LOTUS_FAIL_THREAD_STATE, "thread_state", "call(s) of traced threads whose state could not be made, not "
                                              "recorded"},
    {LOTUS_FAIL_NET_FULL, "net_map_full", "network send(s) or receive(s) of processes not kept in lotus_net (full), "
                                          "not counted"},
    {LOTUS_FAIL_STACK_COPY, "stack_copy", "native-map sample(s) whose stack was not copied (the ring buffer was "
                                          "filling): their leaf alone, [unknown] where it has no symbol"},
};

} // namespace lotus::capture
