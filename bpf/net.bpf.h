/* SPDX-License-Identifier: GPL-2.0 */
/* Network bytes per traced process: the payload its internet sockets (AF_INET, AF_INET6: TCP, UDP, ...) sent
 * and received, as sendmsg/recvmsg returned it (tracepoints sock_send_length, sock_recv_length, Linux 6.3+).
 * Unix sockets and pipes (DataLoader queues) are not network. User space reads the map at each resource sweep;
 * a process's exit record carries its totals. Loaded with --net only: the tracepoints run at every socket call of
 * the machine (docs/limits.md). */
#ifndef __LOTUS_NET_BPF_H
#define __LOTUS_NET_BPF_H

#define LOTUS_AF_INET 2
#define LOTUS_AF_INET6 10
#define LOTUS_MSG_PEEK 2

const volatile __u32 count_net = 0; /* the tracepoints are attached */

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, struct lotus_net_bytes);
} lotus_net SEC(".maps");

static __always_inline void count_net_bytes(struct sock *sk, int ret, bool sent)
{
    /* Every socket call of the machine comes here: a task with no BPF task storage (a process never traced:
     * each traced thread has its state from its start, adopt_thread) is told apart by a load. */
    if (ret <= 0 || !bpf_get_current_task_btf()->bpf_storage)
        return;
    __u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
    if (family != LOTUS_AF_INET && family != LOTUS_AF_INET6)
        return;
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (!bpf_map_lookup_elem(&lotus_traced, &tgid))
        return;
    struct lotus_net_bytes *b = bpf_map_lookup_elem(&lotus_net, &tgid);
    if (!b) {
        struct lotus_net_bytes zero = {};
        bpf_map_update_elem(&lotus_net, &tgid, &zero, BPF_NOEXIST);
        b = bpf_map_lookup_elem(&lotus_net, &tgid);
        if (!b) {
            count(LOTUS_FAIL_NET_FULL);
            return;
        }
    }
    __sync_fetch_and_add(sent ? &b->sent : &b->recv, (__u64)ret);
}

/* Its totals into its exit record, and its entry gone (the pid may be reused). */
static __always_inline void net_totals(struct lotus_usage *u, __u32 tgid)
{
    u->net_counted = count_net;
    u->net_sent = u->net_recv = 0;
    u->_pad = 0;
    struct lotus_net_bytes *b = bpf_map_lookup_elem(&lotus_net, &tgid);
    if (b) {
        u->net_sent = b->sent;
        u->net_recv = b->recv;
        bpf_map_delete_elem(&lotus_net, &tgid);
    }
}

#endif /* __LOTUS_NET_BPF_H */
