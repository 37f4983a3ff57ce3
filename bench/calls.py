#!/usr/bin/env python3
"""N calls from C (map) into Python, after a warm-up (so the interpreter's start and a tracer's attach are not
in it); prints the loop's seconds. Usage: calls.py N [functions|objects|syscalls]
  functions: a plain function, each call an entry of the evaluator (and of no type slot)
  objects:   an instance of a class with __call__, each call through slot_tp_call, then the evaluator
  syscalls:  os.getpid() from C (starmap), each a getpid syscall, one that lotus-bpf does not watch"""
import itertools
import os
import sys
import time


def f(x):
    return x


class Op:
    def __call__(self, x):
        return x


def main():
    n = int(sys.argv[1])
    kind = sys.argv[2] if len(sys.argv) > 2 else "functions"
    if kind == "syscalls":
        loop = lambda k: list(itertools.starmap(os.getpid, itertools.repeat((), k)))
    else:
        fn = Op() if kind == "objects" else f
        loop = lambda k: list(map(fn, range(k)))
    loop(10000)
    t0 = time.perf_counter()
    for _ in range(n // 100000):
        loop(100000)
    print(f"calls {n} seconds {time.perf_counter() - t0:.6f}", flush=True)


if __name__ == "__main__":
    main()
