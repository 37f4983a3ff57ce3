#!/usr/bin/env python3
"""Capacity load: K processes (forked) each run a Compose-like pipeline of two ops in a tight loop for S seconds,
so that every call enters the interpreter from C (6 traced events per pipeline call). Prints the calls made.
Usage: flood.py K SECONDS"""
import os
import sys
import time

# the same ops and pipeline as the integration tests' pure-Python workload, in its plain form (no generator
# expression, which would add traced calls: 12 records per call, not 6)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "integration", "workloads"))
from pure_pipeline import Pipeline, Scale, Shift  # noqa: E402


def spin(seconds, w):
    p, n, end = Pipeline([Scale(), Shift()], check=False), 0, time.monotonic() + seconds
    while time.monotonic() < end:
        for i in range(1000):
            p((i,))
        n += 1000
    os.write(w, f"{n}\n".encode())


if __name__ == "__main__":
    k, seconds = int(sys.argv[1]), float(sys.argv[2])
    r, w = os.pipe()
    pids = []
    for _ in range(k):
        pid = os.fork()
        if pid == 0:
            spin(seconds, w)
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    os.close(w)
    print(sum(int(x) for x in os.read(r, 1 << 16).split()))
