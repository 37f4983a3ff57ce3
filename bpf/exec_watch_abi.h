/* The agent's exec watch (exec_watch.bpf.c): what one exec reports. */
#pragma once

struct lotus_exec_event {
    __u32 pid;   /* the process (tgid) that exec'd */
    __u32 pad;
    __u64 ts_ns; /* CLOCK_MONOTONIC */
};
