#!/usr/bin/env python3
"""N calls from C (map) into Python, after a warm-up (so the interpreter's start and a tracer's attach are not
in it); prints the loop's seconds. Usage: calls.py N [functions|objects]
  functions: a plain function, each call an entry of the evaluator (and of no type slot)
  objects:   an instance of a class with __call__, each call through slot_tp_call, then the evaluator"""
import sys
import time


def f(x):
    return x


class Op:
    def __call__(self, x):
        return x


def main():
    n = int(sys.argv[1])
    fn = Op() if len(sys.argv) > 2 and sys.argv[2] == "objects" else f
    list(map(fn, range(10000)))
    t0 = time.perf_counter()
    for _ in range(n // 100000):
        list(map(fn, range(100000)))
    print(f"calls {n} seconds {time.perf_counter() - t0:.6f}", flush=True)


if __name__ == "__main__":
    main()
