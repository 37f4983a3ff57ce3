// The probe plan applied to the skeleton before its load: which programs load (ProbePlan::load; the exit
// tracepoint's variant this kernel's arguments match; the syscall programs where the syscalls are seen) and the
// attach types that uprobe_multi links and uprobe sessions need. Opening the skeleton needs no privilege: the
// unit tests apply plans to it.
#pragma once
#include "probe_plan.h"

struct lotus_bpf;

namespace lotus::capture {

// syscall_events: the watched syscalls are seen on their own tracepoints (their ids were read); else, without
// libc's wrappers (plan.libc), on the raw sys_enter/sys_exit pair.
void choose_programs(lotus_bpf* skel, const ProbePlan& plan, const KernelFeatures& kernel, bool syscall_events);

} // namespace lotus::capture
