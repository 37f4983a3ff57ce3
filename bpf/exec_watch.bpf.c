// SPDX-License-Identifier: GPL-2.0
/* The agent's exec watch: each process that execs, as it does (the agent then looks at it at once rather than at
 * its next scan of /proc). Its own small object: the agent loads it once, whatever jobs it traces. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "exec_watch_abi.h"

char LICENSE[] SEC("license") = "GPL";

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 64 * 1024);
} exec_events SEC(".maps");

/* (a raw tracepoint of the stable sched_process_exec: every kernel from 5.5 has tp_btf) */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(agent_execs, struct task_struct *task, pid_t old_pid, struct linux_binprm *bprm)
{
    struct lotus_exec_event *e = bpf_ringbuf_reserve(&exec_events, sizeof(*e), 0);
    if (!e)
        return 0; /* full: the agent's scan finds it */
    e->pid = bpf_get_current_pid_tgid() >> 32;
    e->pad = 0;
    e->ts_ns = bpf_ktime_get_ns();
    bpf_ringbuf_submit(e, 0);
    return 0;
}
