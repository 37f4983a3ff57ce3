/* The kernel/user event ABI of lotus-bpf: every record the BPF programs write to the ring buffer, the maps
 * user space fills, and the interpreter layout the programs read the target with. Included by bpf/lotus.bpf.c
 * (with vmlinux.h types) and by user space (with <stdint.h>). Fixed-size little-endian structs, no pointers
 * into our own memory; a change here bumps LOTUS_ABI_VERSION. */
#ifndef LOTUS_ABI_H
#define LOTUS_ABI_H

#ifndef __bpf__
#include <linux/types.h>
#endif

#define LOTUS_ABI_VERSION 12

enum lotus_event_type {
    LOTUS_EV_PY_ENTRY = 1,  /* _PyEval_EvalFrameDefault entered (a C->Python transition) */
    LOTUS_EV_PY_RETURN = 2, /* ... and returned; only for entries that were emitted */
    LOTUS_EV_CODE = 3,      /* first sight of a code object in a role space: its names */
    LOTUS_EV_TYPE = 4,      /* first sight of a type object in a role space: its tp_name */
    LOTUS_EV_FORK = 5,      /* a traced process forked a new process, which is now traced */
    LOTUS_EV_EXIT = 6,      /* a traced process (its thread-group leader) exited */
    LOTUS_EV_EXEC = 7,      /* a traced process called exec */
    /* 8 was WAIT_DONE (ABI 3 and before: the end of a blocking wait) */
    LOTUS_EV_OPEN = 9,      /* a traced thread called openat: the path */
    LOTUS_EV_NATIVE_ENTRY = 10,  /* a probed native function was entered (uprobe, cookie = its number) */
    LOTUS_EV_NATIVE_RETURN = 11, /* ... and is returning: a uprobe on one of its return instructions */
    LOTUS_EV_SAMPLE = 12,        /* a perf-event sample of a traced thread: its user stack */
    LOTUS_EV_MSG = 13,           /* a traced thread read or wrote a pickled multiprocessing message */
    LOTUS_EV_GETPPID = 14,       /* a traced process's main thread called getppid (header only): a DataLoader
                                  * worker's loop does, once per task, right after it handed a batch over */
    LOTUS_EV_THREAD = 15,        /* a traced thread's name (comm): at its first probed call, and each time it
                                  * is renamed (prctl PR_SET_NAME, pthread_setname_np); ABI 5 */
    LOTUS_EV_USAGE = 16,         /* a traced process's resource use over its life, as it exits (right before its
                                  * EXIT): exact where sampling /proc would miss its last interval; ABI 5 */
    LOTUS_EV_HOLD = 17,          /* side ring only, never in the record stream: a traced process's new child is
                                  * held (stopped) until user space has attached its probes */
    LOTUS_EV_CAPTURE = 18,       /* locals captured by a walk of a main thread's stack at its getppid (a DataLoader
                                  * worker's id, where no probed call walked for it): a lotus_py_entry of which
                                  * only the header, own and the capture_* fields are meaningful; ABI 8 */
    LOTUS_EV_LOADED = 19,        /* side ring only, never in the record stream: a traced thread's dlopen()
                                  * returned (the native map with libc's wrappers): what it mapped is to be probed */
    LOTUS_EV_SAMPLE_STACK = 20,  /* never in the record stream: a sample with a copy of the thread's user stack
                                  * (--sample-unwind cfi), which capture unwinds through the libraries' CFI into a
                                  * LOTUS_EV_SAMPLE */
    LOTUS_EV_OPEN_DONE = 21,     /* the return of an open whose OPEN record was written, on the same thread: the
                                  * file it opened (its size); ABI 12 */
};

struct lotus_event_header {
    __u32 type;
    __u32 tgid;
    __u32 tid;
    __u32 cpu;
    __u64 ts_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
};

/* Slots of the lotus_counters map (per-CPU u64 each; user space sums the CPUs). */
enum lotus_counter_slot {
    LOTUS_COUNT_LOST = 0,      /* records the ring buffer could not take */
    LOTUS_COUNT_SUBMITTED = 1, /* records written to it */
    LOTUS_COUNT_SAMPLED_ELSEWHERE = 2, /* sampling interrupts of a thread outside the traced processes */
    /* Failure paths, one slot each (user space names them: capture/bpf_failures.h): what BPF could not record. */
    /* (The LRU maps, lotus_roles, lotus_types, their *_classes and lotus_frames, evict rather than fail when full.) */
    LOTUS_FAIL_DEPTH = 3,        /* a call nested deeper than 64 seen calls: neither its entry nor its return */
    LOTUS_FAIL_THREAD_STATE = 4, /* a traced thread's calls while its state could not be made (task storage) */
    LOTUS_FAIL_NET_FULL = 5,     /* --net: a process not kept in the full lotus_net map: its bytes */
    LOTUS_FAIL_STACK_COPY = 6,   /* --sample-unwind cfi: a sample whose stack was not copied (the ring filling) */
    LOTUS_COUNT_SLOTS = 7,
};

/* Exact per-thread software counters at a probe: on-CPU time (accumulated at every context switch of a traced
 * thread) and the kernel's own per-task fault and context-switch counts. Op spans carry their deltas. */
#define LOTUS_MAX_PERF 4 /* perf-event counters (--counters) per thread */
/* Where counter k's counts come from (perf_src[k] in BPF): a per-CPU perf event, or the thread's own accounting,
 * which needs no event (the software set where no PMU counts the hardware counters: per-CPU software events
 * would tax every page fault and switch of the machine, and their values are these). */
enum lotus_counter_source {
    LOTUS_SRC_PERF_EVENT = 0,
    LOTUS_SRC_ON_CPU_NS = 1, /* cpu_ns */
    LOTUS_SRC_FAULTS = 2,    /* min_flt + maj_flt */
    LOTUS_SRC_SWITCHES = 3,  /* nvcsw + nivcsw */
};
struct lotus_counters {
    __u64 cpu_ns;
    __u64 min_flt;
    __u64 maj_flt;
    __u64 nvcsw;  /* voluntary context switches (blocking) */
    __u64 nivcsw; /* involuntary ones (preempted) */
    /* Counters (--counters) of this thread since tracing began: per-CPU events read at every switch of the
     * thread and accumulated (scaled by enabled/running when multiplexed), or the thread's own accounting
     * (lotus_counter_source). 0 when not configured. */
    __u64 perf[LOTUS_MAX_PERF];
};

#define LOTUS_CHAIN_LEN 4      /* caller frames described in every entry event */
#define LOTUS_WALK_MAX 24      /* frames walked looking for capture roles */
#define LOTUS_MAX_CAPTURES 4   /* captured locals per entry event */
#define LOTUS_SLOTS_PER_ROLE 2 /* locals one code object's role can ask for */
#define LOTUS_NO_SLOT 0xff
#define LOTUS_NO_VALUE ((__s64)0x8000000000000000ULL) /* a local that is not a small int */
#define LOTUS_OWN_CODE (1u << 0)                      /* lotus_py_entry.own: code */
#define LOTUS_OWN_SELF_TYPE (1u << 1)                 /* ... self_type */
#define LOTUS_OWN_CHAIN(i) (1u << (2 + (i)))          /* ... chain_code[i] */
#define LOTUS_OWN_CAPTURE(i) (1u << (6 + (i)))        /* ... capture_code[i] */

/* Calls seen at CPython's type-slot functions for classes defined in Python (the default probes, ABI 6): an
 * instance called, iter() or next() of one. Their entries carry no code object (the callee's frame does not
 * exist yet): `code` holds the slot, a value no object address can have, and `frame` is 0. */
#define LOTUS_SLOT_CALL 1 /* slot_tp_call: obj(...), self = obj */
#define LOTUS_SLOT_ITER 2 /* slot_tp_iter: iter(obj) */
#define LOTUS_SLOT_NEXT 3 /* slot_tp_iternext: next(obj) */
#define LOTUS_SLOTS_PROBED 4 /* the slots probed: 1 to 3 */
/* slot_tp_init: Class(...), self = the new object, arg1_obj = the first argument. Probed in event ABI 6 and 7
 * (every construction of a Python class trapped, for a DataLoader iterator's loader, which DataLoader.__iter__
 * gives too: about half of the example's traps per sample, docs/performance.md "The traps a sample takes"); kept
 * so that their record files replay. */
#define LOTUS_SLOT_INIT 4
#define LOTUS_SLOTS 5
/* Not a slot: CPython's os.read, probed in the same uprobe session as the slots (its cookie), in place of libc's
 * read() where found (target/builtin_functions.h): pickles received on pipes, none of a sample's file reads. */
#define LOTUS_PY_OS_READ 8

struct lotus_py_entry {
    struct lotus_event_header h;
    __u64 frame;      /* the _PyInterpreterFrame being evaluated (0: a slot entry) */
    __u64 code;       /* its code object, or LOTUS_SLOT_* */
    __u64 self_obj;   /* localsplus[0] (self for methods): identifies e.g. a DataLoader iterator */
    __u64 self_type;  /* its type, 0 if unreadable */
    __u64 arg1_obj;   /* localsplus[1] if the role is OBJ1 or not known yet, else 0: the DataLoader given to an
                       * iterator's __init__ (an op's image is not wanted: it only cost record bytes) */
    __u32 depth;      /* nesting depth among this thread's seen evaluator calls (0 = outermost seen) */
    __u32 chain_len;  /* valid entries in chain_code */
    __u64 chain_code[LOTUS_CHAIN_LEN];  /* code objects of the caller frames, innermost first */
    __s64 chain_arg1[LOTUS_CHAIN_LEN];  /* their localsplus[1] if an int and their role is ARG1 or not known
                                         * yet, else LOTUS_NO_VALUE */
    __u64 capture_code[LOTUS_MAX_CAPTURES]; /* frames further up whose role asked for a local */
    __s64 capture_value[LOTUS_MAX_CAPTURES];
    __u8 capture_slot[LOTUS_MAX_CAPTURES];  /* which local of that frame */
    __u16 capture_count;
    /* Which description BPF went by for each object this entry names: a bit set means the process's own
     * (tgid | LOTUS_SPACE_OWN), clear its role space's. User space must use the same one (a process's own
     * description of an address may be stale while the object now there is its space's). */
    __u16 own;
    struct lotus_counters counters;
};

struct lotus_py_return {
    struct lotus_event_header h;
    __u32 depth;    /* equals the depth of the matching entry */
    __u32 ret_null; /* 1: the frame returned NULL (an exception, e.g. StopIteration, left it) */
    struct lotus_counters counters;
    __u64 ret_obj;  /* the object returned, for RETURNED code and code not classified yet (else 0): the
                     * iterator DataLoader.__iter__ made; ABI 4 */
};

/* A read or write of a traced thread whose bytes are a pickle with protocol 4+ framing (\x80 proto \x95): how
 * multiprocessing queues carry objects (a DataLoader's tasks and batches among them). The pickle's first bytes
 * are kept; what they mean is the model's business (model/messages.h). */
#define LOTUS_MSG_BYTES 64

/* libc's wrappers of the watched syscalls, probed in the traced processes (the cookie of each libc_call probe). */
#define LOTUS_LIBC_WRITE 0
#define LOTUS_LIBC_GETPPID 1
#define LOTUS_LIBC_OPEN 2   /* open(path, ...), open64 */
#define LOTUS_LIBC_OPENAT 3 /* openat(dirfd, path, ...), openat64 */
#define LOTUS_LIBC_READ 4
#define LOTUS_LIBC_DLOPEN 5 /* probed for the native map: at its return the library and its dependencies are mapped */
#define LOTUS_MSG_IN 0  /* read(): received, the pickle from the buffer's start */
#define LOTUS_MSG_OUT 1 /* write(): sent, the pickle after multiprocessing's 4-byte length header if any */
struct lotus_msg {
    struct lotus_event_header h;
    __u64 file;     /* the fd's inode number: both ends of one pipe name the same */
    __u32 fd;
    __u32 len;      /* bytes read or written */
    __u16 mode;     /* the inode's type and permission bits: always a pipe's (S_IFIFO) */
    __u8 dir;       /* LOTUS_MSG_IN or LOTUS_MSG_OUT */
    __u8 nbytes;    /* valid bytes in data */
    __u32 _pad;
    __u8 data[LOTUS_MSG_BYTES];
};

#define LOTUS_PATH_LEN 256
struct lotus_open {
    struct lotus_event_header h;
    char path[LOTUS_PATH_LEN];
};

/* What the open of the thread's last OPEN record returned: the descriptor (or -errno) and, where it is one, the
 * opened file's inode mode and size (i_size) as they were at the open's return. */
struct lotus_open_done {
    struct lotus_event_header h;
    __s64 ret;
    __u64 size; /* meaningful where ret >= 0 */
    __u32 mode; /* the inode's type and permission bits; 0: no file */
    __u32 _pad;
};

/* Native function probes: func is the number user space gave the function (its points' bpf_cookie, with
 * LOTUS_NATIVE_RETURN_POINT set on its return instructions' points). sp is the stack pointer there: at the entry
 * and at a return instruction of one call it is the same (the return address's slot), so user space pairs them by
 * it, and tells a call left another way (an exception, a tail call) from one still running (ABI 11; 0 before). */
#define LOTUS_NATIVE_RETURN_POINT (1ull << 32)
struct lotus_native {
    struct lotus_event_header h;
    __u32 func;
    __u32 _pad;
    __u64 sp;
};

#define LOTUS_STACK_DEPTH 8
struct lotus_sample {
    struct lotus_event_header h;
    __u32 nr_ips;    /* valid entries in ip */
    __u32 in_kernel; /* 1: the sample hit kernel code; ip[0] is where user space entered it */
    __u64 ip[LOTUS_STACK_DEPTH]; /* user-space stack, leaf first (callers: see --sample-unwind) */
    __u64 sp;                    /* the user stack pointer at the leaf (ABI 11; 0 before, or unknown) */
};

/* A sample whose callers user space finds (--sample-unwind cfi): the user registers the unwinding starts from and
 * the stack above sp, as far as it could be read (whole chunks). s.ip[0] is the leaf, s.nr_ips 0 or 1. */
#define LOTUS_STACK_COPY_CHUNK 1024
#define LOTUS_STACK_COPY_CHUNKS 4
struct lotus_sample_stack {
    struct lotus_sample s; /* s.h.type = LOTUS_EV_SAMPLE_STACK */
    __u64 sp, bp;          /* the user stack pointer and frame pointer (rsp, rbp) */
    __u32 stack_len;       /* bytes copied from sp on */
    __u32 pad;
    __u8 stack[LOTUS_STACK_COPY_CHUNK * LOTUS_STACK_COPY_CHUNKS];
};

/* What the unsampled_threads iterator writes: a traced thread without a sampling event of lotus-bpf's. */
#define LOTUS_SAMPLER_NONE 0
#define LOTUS_SAMPLER_HAS 1
#define LOTUS_SAMPLER_UNKNOWN 2 /* more events on the thread than BPF walks */
struct lotus_unsampled {
    __u32 tid;
    __u32 state; /* LOTUS_SAMPLER_NONE or LOTUS_SAMPLER_UNKNOWN */
};

#define LOTUS_NAME_LEN 128
#define LOTUS_FILE_LEN 192

/* kind: 0 = ASCII/UTF-8 bytes, 1/2/4 = bytes per character of a non-ASCII compact str, 0xff = unreadable */
struct lotus_code_info {
    struct lotus_event_header h;
    __u64 code;
    __s32 firstlineno;
    __u8 name_kind;
    __u8 file_kind;
    __u8 own_space; /* 1: described in the process's own space (tgid | LOTUS_SPACE_OWN), see lotus_role_key */
    __u8 _pad;
    char name[LOTUS_NAME_LEN]; /* co_qualname (co_name before 3.11) */
    char file[LOTUS_FILE_LEN]; /* co_filename */
    /* The fingerprint BPF keyed its role entry with (lotus_role): user space sets the role only while the entry
     * still holds it, not onto another code object's at the address meanwhile; ABI 10 (older records end before) */
    __u64 fingerprint;
};

#define LOTUS_BASES 3
#define LOTUS_BASE_LEN 48
struct lotus_type_info {
    struct lotus_event_header h;
    __u64 type;
    __u8 own_space; /* 1: described in the process's own space (tgid | LOTUS_SPACE_OWN), as CODE records */
    /* Names BPF could not read (bit 0: name, bit 1 + i: bases[i]), left empty: a page of the target that its
     * process never touched (a static type's name in the binary's read-only data) cannot be faulted in by BPF.
     * User space reads them before the record goes on (capture/descriptions.h); ABI 9 */
    __u8 unread;
    __u8 _pad[6];
    char name[LOTUS_NAME_LEN]; /* tp_name */
    char bases[LOTUS_BASES][LOTUS_BASE_LEN]; /* tp_name of tp_base, its tp_base... ("" past object); ABI 4 */
    __u64 fingerprint; /* as lotus_code_info's, of its lotus_type_role entry; ABI 10 */
};

#define LOTUS_COMM_LEN 16
struct lotus_thread_name {
    struct lotus_event_header h; /* h.tgid, h.tid: the thread named */
    char comm[LOTUS_COMM_LEN];   /* its new name, NUL-terminated (the kernel's TASK_COMM_LEN) */
};

struct lotus_usage {
    struct lotus_event_header h; /* h.tgid: the process that is exiting */
    __u64 runtime_ns;            /* CPU time of all its threads: the scheduler's own sum (exact) */
    __u64 utime_ns, stime_ns;    /* the kernel's tick-sampled user/system split of it */
    __u64 nvcsw, nivcsw;         /* voluntary / involuntary context switches, all its threads */
    __u64 read_bytes, write_bytes; /* storage I/O it caused (task I/O accounting: what /proc/PID/io says) */
    /* ABI 7: payload bytes its AF_INET/AF_INET6 sockets sent and received while it was traced (what each
     * sendmsg/recvmsg returned, at the sock_send_length/sock_recv_length tracepoints), valid when net_counted;
     * ABI 5 and 6 records end before them */
    __u64 net_sent, net_recv;
    __u32 net_counted, _pad;
};

/* Network bytes per traced process so far (map lotus_net, by tgid). */
struct lotus_net_bytes {
    __u64 sent, recv;
};

struct lotus_proc_event {
    struct lotus_event_header h; /* h.tgid: the process the event is about */
    union {
        __u32 parent_tgid; /* FORK: the parent (EXEC: 0) */
        __u32 exit_code;   /* EXIT: the kernel's task->exit_code (exit status << 8, or the killing signal) */
    };
    __u32 space;                 /* FORK, EXEC: the process's role space from now on (0 in ABI 2 files) */
};

/* Roles user space assigns to code objects (map lotus_code_classes); BPF describes an object on first sight
 * (map lotus_roles). Steady state: an entry is emitted when its code is not SKIP or when its caller is a PIPELINE. */
#define LOTUS_ROLE_UNCLASSIFIED 0u
#define LOTUS_ROLE_CLASSIFIED (1u << 0)
#define LOTUS_ROLE_SKIP (1u << 1)     /* uninteresting by itself: do not emit */
#define LOTUS_ROLE_PIPELINE (1u << 2) /* Compose-like: its direct callees are ops, walk for captures */
#define LOTUS_ROLE_CAPTURE (1u << 3)  /* when walked past, report localsplus[capture_slot[i]] */
#define LOTUS_ROLE_EMIT_CALLEES (1u << 4) /* emit the entries it calls (e.g. Queue.put's __enter__) */
#define LOTUS_ROLE_ARG1 (1u << 5)         /* its localsplus[1] (a __getitem__'s index) is wanted in chains */
#define LOTUS_ROLE_OBJ1 (1u << 6)         /* its entry's arg1_obj is wanted (a DataLoader iterator's __init__) */
#define LOTUS_ROLE_SELF_PIPELINE (1u << 7) /* a call of an object (__call__, forward, nn.Module's call wrappers):
                                            * a pipeline (its callees are ops) when self's type is a pipeline
                                            * class (lotus_types), else skipped like SKIP */
#define LOTUS_ROLE_WALK (1u << 8)          /* its entries look up the stack for CAPTURE locals (a rank's id) */
#define LOTUS_ROLE_SCOPE (1u << 9)         /* a comprehension or generator expression: part of the frame below it
                                            * (a call it makes is judged by that frame's role and self) */
#define LOTUS_ROLE_RETURNED (1u << 10)     /* its return's ret_obj is wanted (DataLoader.__iter__'s iterator) */

/* The role of a slot entry's `code` (LOTUS_SLOT_*), as the rules give the code it stands for: a call of an
 * object (__call__, forward: a pipeline when self's type is one, else its calls from a pipeline's frame are
 * ops); a DataLoader's __iter__ (walks for a rank, returns the iterator), an iterator's __next__ (walks), its
 * __init__ (the DataLoader it iterates). BPF and the engine both read it here. */
static inline __u32 lotus_slot_role(__u64 slot)
{
    switch (slot) {
    case LOTUS_SLOT_CALL:
        return LOTUS_ROLE_CLASSIFIED | LOTUS_ROLE_SKIP | LOTUS_ROLE_SELF_PIPELINE;
    case LOTUS_SLOT_ITER:
        return LOTUS_ROLE_CLASSIFIED | LOTUS_ROLE_WALK | LOTUS_ROLE_RETURNED;
    case LOTUS_SLOT_NEXT:
        return LOTUS_ROLE_CLASSIFIED | LOTUS_ROLE_WALK;
    case LOTUS_SLOT_INIT:
        return LOTUS_ROLE_CLASSIFIED | LOTUS_ROLE_OBJ1;
    }
    return 0;
}

/* What user space says of a type (map lotus_type_classes, value lotus_type_role: flags) and which type BPF
 * described at an address (map lotus_types, key: role space and type address, flags DESCRIBED). Like code objects, types are
 * made and freed at run time (a DataLoader worker of a forkserver imports its transforms after the fork: its
 * sibling may hold another class at that address), so a type carries a fingerprint (its tp_name pointer) and a
 * process whose type at an address differs from its space's describes its own (tgid | LOTUS_SPACE_OWN). */
struct lotus_type_role {
    __u32 flags;
    __u32 describer;
    __u64 fingerprint;
};
#define LOTUS_TYPE_DESCRIBED (1u << 0)
#define LOTUS_TYPE_CLASSIFIED (1u << 1)
#define LOTUS_TYPE_PIPELINE (1u << 2) /* Compose-like or a container transform: the calls it makes are ops */
#define LOTUS_TYPE_CELL (1u << 3)     /* a cell: a frame's local that a nested scope captured; follow ob_ref */
#define LOTUS_TYPE_LOADER (1u << 4)   /* a DataLoader or one of its iterators: its iter/next/init slots are emitted */

/* Roles and type descriptions are kept per role space: the processes that share one memory image. A forked
 * child joins its parent's space (same objects at the same addresses, so it need not describe them again);
 * exec starts a new one. Processes known when tracing begins have space = their pid; spaces begun by exec are
 * numbered from LOTUS_SPACE_EXEC_BASE (above any pid: PID_MAX_LIMIT is 1 << 22). Where two processes of a
 * space made different code objects at one address after a fork (fingerprints differ), the one that did not
 * describe the space's keeps its own under space tgid | LOTUS_SPACE_OWN (and its CODE record says so). */
#define LOTUS_SPACE_EXEC_BASE (1u << 22)
#define LOTUS_SPACE_OWN (1u << 31)

struct lotus_role_key {
    __u32 space;
    __u32 _pad;
    __u64 ptr;
};

/* What user space says of one object (maps lotus_code_classes, lotus_type_classes): its role key and the
 * fingerprint its description carried. Only BPF writes lotus_roles and lotus_types (which object holds an
 * address, as described last); only user space writes these. Setting a role into BPF's entry, user space
 * could write back the fingerprint of an object that another had just replaced there: that one then went out
 * under the other's description. */
struct lotus_class_key {
    __u32 space;
    __u32 _pad;
    __u64 ptr;
    __u64 fingerprint;
};

/* fingerprint: co_qualname and co_filename pointers mixed. Code objects are freed and their addresses reused
 * (module bodies after import), so a known address whose fingerprint changed is a new code object. */
struct lotus_role {
    __u32 flags;
    __u32 describer; /* the process (tgid) whose CODE record described it */
    __u64 fingerprint;
    __u8 capture_slot[LOTUS_SLOTS_PER_ROLE]; /* LOTUS_NO_SLOT when unused */
    __u8 _pad[6];
};

/* A traced process's child held at its fork until its probes are in place (map lotus_held, key its tgid). */
struct lotus_hold {
    __u64 since_ns;    /* bpf_ktime_get_ns at the fork */
    __u32 parent_tgid; /* the child's memory image is this process's, as at the fork */
    __u32 flags;       /* LOTUS_HOLD_* */
};

/* lotus_hold.flags. An entry without STOPPED is a child that was not held (it shares its parent's memory, as
 * vfork and posix_spawn children do before their exec, or nobody was there to bound a hold): it runs, and user
 * space only attaches its probes. The guardian (userspace/capture/guardian.h) continues a held child once its
 * deadline has passed or the tracer is gone (RELEASED: its probes may not be in yet), or once the tracer has
 * attached them but left the SIGCONT to it because the job was stopped by its user (ATTACHED). */
enum {
    LOTUS_HOLD_STOPPED = 1,
    LOTUS_HOLD_ATTACHED = 2,
    LOTUS_HOLD_RELEASED = 4,
    LOTUS_HOLD_SHARED_MM = 8, /* not held at its fork: it shares its parent's memory (it execs at once) */
    LOTUS_HOLD_AT_EXEC = 16,  /* such a child that exec'd the traced interpreter: held (STOPPED) from there */
    /* Kernels without bpf_send_signal_task (before 6.13): a forked child to be held by itself, at its first step
     * in CPython after the fork (PyOS_AfterFork_Child) or at its exec of the interpreter; until then it has run no
     * Python, and neither user space nor the guardian touches it. */
    LOTUS_HOLD_PENDING = 32,
};

/* Why a traced process's child was not held (holds.bpf.h; .bss counters user space reads). */
enum {
    LOTUS_UNHELD_SHARED_MM = 0, /* it shares its parent's memory (vfork, posix_spawn): it execs at once */
    LOTUS_UNHELD_TRACER = 1,    /* the tracer was stopped or exiting: nobody would attach its probes soon */
    LOTUS_UNHELD_GUARDIAN = 2,  /* the guardian was gone: nobody would bound the hold */
    LOTUS_UNHELD_SIGNAL = 3,    /* the kernel refused the SIGSTOP */
    LOTUS_UNHELD_MAP = 4,       /* lotus_held was full */
    LOTUS_UNHELD_REASONS = 5,
};

/* Per-process state of a traced process (map lotus_traced, key tgid). */
struct lotus_traced_proc {
    __u32 root_tgid;
    __u32 space;        /* its role space */
    __u64 tstate_addr;  /* where the process keeps the GIL holder's thread state (the slot probes' runtime_tstate
                         * in its memory), noted at a slot probe's first hit in a thread; 0: not known yet */
};

/* Where CPython keeps what the programs read. One row per interpreter version, filled by user space from
 * userspace/cpython/cpython_layouts.cpp or from the target's _Py_DebugOffsets. -1 = not present. */
struct lotus_py_layout {
    __s32 tstate_cframe;          /* PyThreadState.cframe (3.11, 3.12); -1 when frames hang off tstate */
    __s32 cframe_current_frame;   /* _PyCFrame.current_frame */
    __s32 tstate_current_frame;   /* PyThreadState.current_frame (3.13+) */
    __s32 frame_code;             /* _PyInterpreterFrame.f_code / f_executable */
    __s32 frame_previous;
    __s32 frame_owner;            /* owner byte */
    __s32 frame_localsplus;
    __s32 owner_cstack;           /* owner value of C-stack shim frames to skip; -1 if none */
    __u64 stackref_tag_mask;      /* tag bits to clear from _PyStackRef values: f_executable, localsplus (3.14+) */
    __s32 code_name;              /* co_qualname, or co_name where there is none */
    __s32 code_filename;
    __s32 code_firstlineno;
    __s32 object_type;            /* PyObject.ob_type */
    __s32 type_name;              /* PyTypeObject.tp_name */
    __s32 type_flags;             /* PyTypeObject.tp_flags */
    __s32 unicode_state;          /* PyASCIIObject.state */
    __s32 unicode_length;         /* PyASCIIObject.length */
    __s32 unicode_ascii_data;     /* sizeof(PyASCIIObject) */
    __s32 unicode_compact_data;   /* sizeof(PyCompactUnicodeObject) */
    __u32 unicode_kind_shift;     /* state bitfield: kind:3 at this bit */
    __u32 unicode_ascii_bit;      /* state bitfield: ascii at this bit */
    __s32 long_size;              /* ob_size (<3.12) or lv_tag (3.12+) */
    __s32 long_digits;            /* ob_digit */
    __u32 long_tagged;            /* 1: lv_tag = ndigits << 3 | sign (3.12+); 0: signed ob_size */
    __s32 code_localsplusnames;   /* tuple of local names (user space reads it to find a local's slot) */
    __s32 tuple_size;             /* PyVarObject.ob_size of a tuple */
    __s32 tuple_items;            /* PyTupleObject.ob_item */
    __s32 frame_is_entry;         /* _PyInterpreterFrame.is_entry (3.11: --all-calls on inlined frames); -1 */
    /* 3.10 moves an argument captured by a nested scope into a cell before the frame runs (localsplus[0] is
     * then NULL; the cell is at localsplus[co_nlocals + i] for the i with co_cell2arg[i] == 0). -1 elsewhere. */
    __s32 code_nlocals;           /* co_nlocals */
    __s32 code_cellvars;          /* co_cellvars (a tuple) */
    __s32 code_cell2arg;          /* co_cell2arg (Py_ssize_t *, NULL when no argument is a cell) */
    __s32 cell_ref;               /* PyCellObject.ob_ref */
    __s32 type_base;              /* PyTypeObject.tp_base */
    /* Where _PyRuntime keeps the thread state of the thread that holds the GIL (the one running Python): its
     * gilstate.tstate_current before 3.12, then its main interpreter's GIL's last_holder. The type-slot probes
     * find the running frame through it (the slot functions are not handed the thread state). ABI 6. */
    __s32 runtime_tstate;
    __s32 bytes_data;             /* PyBytesObject.ob_sval: what os.read returned (its size: tuple_size) */
};

#endif /* LOTUS_ABI_H */
