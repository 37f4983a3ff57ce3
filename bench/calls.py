#!/usr/bin/env python3
"""N calls from C (map) into Python, after a warm-up (so the interpreter's start and a tracer's attach are not
in it); prints the loop's seconds and its CPU seconds. Usage: calls.py N [functions|objects|syscalls|reads|filereads|switches|sockets]
  functions: a plain function, each call an entry of the evaluator (and of no type slot)
  objects:   an instance of a class with __call__, each call through slot_tp_call, then the evaluator
  syscalls:  os.getpid() from C (starmap), each a getpid syscall, one that lotus-bpf does not watch
  reads:     os.read(fd, 1) of /dev/zero from C (starmap), each through the interpreter's os.read, where
             lotus-bpf sees the pipes' reads in the processes it traces (libc's read with LOTUS_LIBC_READ=1)
  filereads: FileIO.read(1) of /dev/zero (unbuffered) from C (starmap), each through libc's read: a file
             read, as an image's, which lotus-bpf does not probe (with LOTUS_LIBC_READ=1 it does)
  switches:  a byte to a child process and back over two pipes (writev/readv, syscalls lotus-bpf does not
             watch), both pinned to one CPU: two context switches each
  sockets:   a byte sent over a loopback UDP socket and received on another (no switch): two socket calls,
             each one that lotus-bpf's socket tracepoints (--net) run at, whatever process makes it"""
import itertools
import os
import socket
import sys
import time


def f(x):
    return x


class Op:
    def __call__(self, x):
        return x


def ping_pong():
    """The loop of `switches`: a child echoes each byte back; both on the CPU this process may use first."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    (r1, w1), (r2, w2) = os.pipe(), os.pipe()
    if os.fork() == 0:  # until the parent's end closes (at its exit)
        os.close(w1)
        os.close(r2)
        buf = bytearray(1)
        while os.readv(r1, [buf]) == 1:
            os.writev(w2, [buf])
        os._exit(0)
    os.close(r1)
    os.close(w2)
    buf = bytearray(1)

    def loop(k):
        for _ in range(k):
            os.writev(w1, [b"x"])
            os.readv(r2, [buf])
    return loop


def main():
    n = int(sys.argv[1])
    kind = sys.argv[2] if len(sys.argv) > 2 else "functions"
    if kind == "switches":
        loop = ping_pong()
    elif kind == "sockets":
        a, b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM), socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        b.bind(("127.0.0.1", 0))
        a.connect(b.getsockname())

        def loop(k):
            for _ in range(k):
                a.send(b"x")
                b.recv(1)
    elif kind == "reads":
        fd = os.open("/dev/zero", os.O_RDONLY)
        loop = lambda k: list(itertools.starmap(os.read, itertools.repeat((fd, 1), k)))
    elif kind == "filereads":
        zero = open("/dev/zero", "rb", buffering=0)
        loop = lambda k: list(itertools.starmap(zero.read, itertools.repeat((1,), k)))
    elif kind == "syscalls":
        loop = lambda k: list(itertools.starmap(os.getpid, itertools.repeat((), k)))
    else:
        fn = Op() if kind == "objects" else f
        loop = lambda k: list(map(fn, range(k)))
    loop(10000)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n // 100000):
        loop(100000)
    print(f"calls {n} seconds {time.perf_counter() - t0:.6f} cpu {time.process_time() - c0:.6f}", flush=True)


if __name__ == "__main__":
    main()
