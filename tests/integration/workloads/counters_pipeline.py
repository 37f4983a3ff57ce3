#!/usr/bin/env python3
"""Counter test workload: a pipeline of two ops, one that sleeps 5 ms (off CPU, blocks once) and one that
spins 5 ms on the CPU and writes to 256 fresh pages (page faults)."""
import mmap
import time

from own_pipeline import Pipeline


class Sleepy:
    def __call__(self, x):
        time.sleep(0.005)
        return x


class Busy:
    def __call__(self, x):
        end = time.perf_counter() + 0.005
        while time.perf_counter() < end:
            pass
        m = mmap.mmap(-1, 1 << 20)  # 256 fresh pages, each faulted in by its first write
        for off in range(0, 1 << 20, 4096):
            m[off] = 1
        m.close()
        return x


p = Pipeline([Sleepy(), Busy()])
for i in range(40):
    p(i)
