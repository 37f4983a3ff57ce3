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
    {LOTUS_FAIL_THREAD_STATE, "thread_state", "time(s) a traced thread's state could not be made: its calls then "
                                              "were not recorded"},
    {LOTUS_FAIL_ROLES_FULL, "roles_map_full", "code object(s) not kept (lotus_roles full): described again at "
                                              "later calls, at a cost"},
    {LOTUS_FAIL_TYPES_FULL, "types_map_full", "type(s) not kept (lotus_types full): described again at later calls"},
    {LOTUS_FAIL_FRAMES_FULL, "frames_map_full", "call(s) of threads not kept in lotus_frames (full; 3.11's inlined "
                                                "calls), not recorded"},
    {LOTUS_FAIL_NET_FULL, "net_map_full", "network send(s) or receive(s) of processes not kept in lotus_net (full), "
                                          "not counted"},
};

} // namespace lotus::capture
