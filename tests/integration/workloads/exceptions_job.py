#!/usr/bin/env python3
"""Samples whose transform tries a fast path and falls back when it throws: torch.stack (and torch.cat) of tensors
of unequal sizes raise RuntimeError from C++ (a C++ exception through the op's dispatcher call), caught here; and,
with a library path, a C++ function called through ctypes whose callee throws an exception the C++ caller catches.
Each worker logs "PID caught_torch caught_cxx stacks_ok calls_ok" at its end as ground truth; the main process
prints the samples it received."""
import ctypes
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

COUNTS = {"torch": 0, "cxx": 0, "stacks": 0, "calls": 0}


class FastPathOrFallback:
    def __init__(self, lib):
        self.lib = lib
        self.cxx = None

    def __call__(self, x, i):
        try:
            torch.stack([torch.zeros(3), torch.zeros(4)])  # throws: unequal sizes
        except RuntimeError:
            COUNTS["torch"] += 1
        try:
            torch.cat([torch.zeros(2, 3), torch.zeros(2, 4)])  # throws
        except RuntimeError:
            COUNTS["torch"] += 1
        y = torch.stack([x, x])  # returns
        COUNTS["stacks"] += 1
        if self.lib:
            if self.cxx is None:
                self.cxx = ctypes.CDLL(self.lib)
            # one call that throws (caught in C++) and one that returns, per sample
            COUNTS["cxx"] += self.cxx.lotus_try_twice(i)
            COUNTS["calls"] += 1
        return y


class Numbers(Dataset):
    def __init__(self, n, tf):
        self.n, self.tf = n, tf

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.tf(torch.full((3,), float(i)), i)


def report(log):
    with open(log, "a") as f:
        f.write(f"{os.getpid()} {COUNTS['torch']} {COUNTS['cxx']} {COUNTS['stacks']} {COUNTS['calls']}\n")


class Logged(Numbers):
    def __init__(self, n, tf, log, per_worker):
        super().__init__(n, tf)
        self.log, self.per_worker, self.seen = log, per_worker, 0

    def __getitem__(self, i):
        out = super().__getitem__(i)
        self.seen += 1
        if self.seen == self.per_worker:
            report(self.log)
        return out


if __name__ == "__main__":
    samples, log = int(sys.argv[1]), sys.argv[2]
    lib = sys.argv[3] if len(sys.argv) > 3 else None
    workers = 2
    # batches of 4 dealt round-robin: each worker gets samples / 2 when samples is a multiple of 8
    loader = DataLoader(Logged(samples, FastPathOrFallback(lib), log, samples // workers), batch_size=4,
                        num_workers=workers)
    n = sum(len(b) for b in loader)
    print(n, "samples", flush=True)
