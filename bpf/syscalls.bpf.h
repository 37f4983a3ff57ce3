/* SPDX-License-Identifier: GPL-2.0 */
/* Syscalls of traced threads: multiprocessing pickles read and written on pipes (DataLoader queues). */
#ifndef __LOTUS_SYSCALLS_BPF_H
#define __LOTUS_SYSCALLS_BPF_H

/* multiprocessing sends an object as a 4-byte big-endian length and its pickle (in one write when it is small);
 * ForkingPickler's protocol 4 and 5 pickles begin with PROTO and a FRAME opcode: \x80 4|5 \x95. Where the pickle
 * starts in a traced thread's buffer (0, or, when `header` may precede it, 4), or -1. */
static __always_inline int traced_pickle(__u64 buf, bool header)
{
    /* Traced threads only, found from the task (cheaper than a lookup for every read and write on the machine):
     * every thread of a traced process has its state from its start (adopt_thread). A task with no BPF task
     * storage at all, as any process never traced, is told apart by a load, without the helper call. */
    struct task_struct *task = bpf_get_current_task_btf();
    if (!task->bpf_storage || !bpf_task_storage_get(&lotus_threads, task, 0, 0))
        return -1;
    __u8 b[8] = {};
    if (bpf_probe_read_user(b, sizeof(b), (void *)buf))
        return -1;
    if (b[0] == 0x80 && (b[1] == 4 || b[1] == 5) && b[2] == 0x95)
        return 0;
    if (header && b[4] == 0x80 && (b[5] == 4 || b[5] == 5) && b[6] == 0x95)
        return 4;
    return -1;
}

/* The pickle at buf + at (n bytes on the user side), if fd is a pipe: a DataLoader's queues are pipes on Linux
 * (multiprocessing's Pipe(duplex=False)); sockets carry other conversations (torch's file-descriptor sharing
 * answers two pickles per shared tensor), which would only cost records. */
#define LOTUS_S_IFMT 0170000
#define LOTUS_S_IFIFO 0010000

/* The current task's open file fd, or 0. */
static __always_inline struct file *task_file(int fd)
{
    struct task_struct *t = bpf_get_current_task_btf();
    struct file **fds = BPF_CORE_READ(t, files, fdt, fd);
    struct file *f = 0;
    if (fds && fd >= 0 && fd < 65536)
        bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
    return f;
}

/* The mode of a file's inode (0 for none). */
static __always_inline __u16 file_mode(struct file *f)
{
    return f ? BPF_CORE_READ(f, f_inode, i_mode) : 0;
}

static __always_inline bool is_pipe_mode(__u16 mode)
{
    return (mode & LOTUS_S_IFMT) == LOTUS_S_IFIFO;
}

static __always_inline void emit_msg(int fd, __u64 buf, long n, int at, __u8 dir)
{
    struct file *f = task_file(fd);
    __u16 mode = file_mode(f);
    if (!is_pipe_mode(mode))
        return;
    struct lotus_msg *e = reserve(sizeof(*e));
    if (!e)
        return;
    fill_header(&e->h, LOTUS_EV_MSG);
    e->fd = fd;
    e->len = n;
    e->dir = dir;
    e->_pad = 0;
    e->file = BPF_CORE_READ(f, f_inode, i_ino);
    e->mode = mode;
    long avail = n - at;
    __u32 k = avail > LOTUS_MSG_BYTES ? LOTUS_MSG_BYTES : (avail > 0 ? avail : 0);
    e->nbytes = k;
    if (k && bpf_probe_read_user(e->data, k, (void *)(buf + at)))
        e->nbytes = 0;
    bpf_ringbuf_submit(e, submit_flags());
}

/* A read or write of at least this many bytes may carry a message: 11 bytes of PROTO + FRAME, then an opcode. */
#define MSG_MIN 12

#endif /* __LOTUS_SYSCALLS_BPF_H */
