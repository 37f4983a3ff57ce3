#!/usr/bin/env python3
"""N calls of a Python function from C (map), each one an entry of the evaluator; prints the loop's seconds
(after a warm-up, so the interpreter's start and a tracer's attach are not in it). Usage: calls.py N"""
import sys
import time


def f(x):
    return x


def main():
    n = int(sys.argv[1])
    list(map(f, range(10000)))
    t0 = time.perf_counter()
    for _ in range(n // 100000):
        list(map(f, range(100000)))
    print(f"calls {n} seconds {time.perf_counter() - t0:.6f}", flush=True)


if __name__ == "__main__":
    main()
