/* SPDX-License-Identifier: GPL-2.0 */
/* Syscalls of traced threads: multiprocessing pickles read and written on pipes (DataLoader queues). */
#ifndef __LOTUS_SYSCALLS_BPF_H
#define __LOTUS_SYSCALLS_BPF_H

/* A read or write of at least this many bytes may carry a message: 11 bytes of PROTO + FRAME, then an opcode. */
#define MSG_MIN 12

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

/* A read's result: the buffer holds its bytes now. multiprocessing reads the length header and the pickle
 * apart: the pickle is at the buffer's start. */
static __always_inline void sys_read_done(int fd, __u64 buf, long ret)
{
    if (ret >= MSG_MIN && traced_pickle(buf, false) == 0)
        emit_msg(fd, buf, ret, 0, LOTUS_MSG_IN);
}

/* os.read(fd, length) in a traced thread: the interpreter's os_read(module, args, nargs), in py_slot's session
 * (LOTUS_PY_OS_READ). Its entry asks for the return of a read from a pipe long enough to hold a pickle; at the
 * return the bytes are in the object os.read made (its size and data: layout.tuple_size, bytes_data). */
static __always_inline int os_read_call(struct pt_regs *ctx)
{
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0);
    if (!ts)
        return 1;
    if (bpf_session_is_return()) {
        if (ts->read_buf != 1)
            return 0;
        ts->read_buf = 0;
        __u64 bytes = PT_REGS_RC(ctx);
        __s64 n = 0;
        if (bytes && !bpf_probe_read_user(&n, sizeof(n), (void *)(bytes + layout.tuple_size)))
            sys_read_done(ts->read_fd, bytes + layout.bytes_data, n);
        return 0;
    }
    __u64 args[2];
    if (PT_REGS_PARM3(ctx) != 2 || bpf_probe_read_user(args, sizeof(args), (void *)PT_REGS_PARM2(ctx)))
        return 1;
    __s64 fd = int_value(ts, args[0]), len = int_value(ts, args[1]);
    if (fd < 0 || fd >= 65536 || len < MSG_MIN || !is_pipe_mode(file_mode(task_file(fd))))
        return 1;
    ts->read_buf = 1;
    ts->read_fd = fd;
    return 0;
}

/* Syscalls of traced threads, by number: the bodies both attachments (lotus.bpf.c) share. */
static __always_inline void sys_write(int fd, __u64 buf, long n)
{
    int at = n >= MSG_MIN ? traced_pickle(buf, true) : -1;
    if (at >= 0 && n > at + MSG_MIN - 1)
        emit_msg(fd, buf, n, at, LOTUS_MSG_OUT);
}

static __always_inline void sys_getppid(void)
{
    __u64 id = bpf_get_current_pid_tgid();
    struct thread_state *ts = id >> 32 == (__u32)id ? traced_thread() : 0;
    if (!ts)
        return;
    if (tstate_vaddr)
        walk_at_getppid(ts, id >> 32);
    struct lotus_event_header *e = reserve(sizeof(*e));
    if (e) {
        fill_header(e, LOTUS_EV_GETPPID);
        bpf_ringbuf_submit(e, submit_flags());
    }
}

/* An open of a traced thread: its path now, its file at the return (sys_openat_done). Whether it was written. */
static __always_inline bool sys_openat(const char *path)
{
    __u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (!bpf_map_lookup_elem(&lotus_traced, &tgid))
        return false;
    struct lotus_open *e = reserve(sizeof(*e));
    if (!e)
        return false;
    fill_header(&e->h, LOTUS_EV_OPEN);
    long n = bpf_probe_read_user_str(e->path, sizeof(e->path), path);
    if (n < 0)
        e->path[0] = 0;
    for (int i = 0; i + 3 < LOTUS_PATH_LEN && i + 3 < n; i++) {
        if (e->path[i] == '.' && e->path[i + 1] == 's' && e->path[i + 2] == 'o') {
            bpf_ringbuf_output(&lotus_lib_opens, e, sizeof(*e), BPF_RB_FORCE_WAKEUP);
            break;
        }
    }
    bpf_ringbuf_submit(e, submit_flags());
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, bpf_get_current_task_btf(), 0, 0);
    if (ts)
        ts->open_pending = 1;
    return true;
}

/* The return of an open whose OPEN record was written: the file it opened, with its size as the inode has it
 * then (a sample's bytes where the file is its image). Other threads' opens stop at the task-storage test. */
static __always_inline void sys_openat_done(long ret)
{
    struct task_struct *task = bpf_get_current_task_btf();
    if (!task->bpf_storage)
        return;
    struct thread_state *ts = bpf_task_storage_get(&lotus_threads, task, 0, 0);
    if (!ts || !ts->open_pending)
        return;
    ts->open_pending = 0;
    struct lotus_open_done *e = reserve(sizeof(*e));
    if (!e)
        return;
    fill_header(&e->h, LOTUS_EV_OPEN_DONE);
    e->ret = ret;
    e->size = 0;
    e->mode = 0;
    e->_pad = 0;
    if (ret >= 0) {
        struct file *f = task_file(ret);
        if (f) {
            e->mode = BPF_CORE_READ(f, f_inode, i_mode);
            e->size = BPF_CORE_READ(f, f_inode, i_size);
        }
    }
    bpf_ringbuf_submit(e, submit_flags());
}

#endif /* __LOTUS_SYSCALLS_BPF_H */
