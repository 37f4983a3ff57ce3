#!/usr/bin/env python3
"""A transform that loads a native library the first time a process runs it (ctypes.CDLL on libgdbm, which
nothing else here maps) and calls one of its functions once per sample: lotus-bpf probes the library only once
the worker's dlopen has returned, so the first calls may come before its probes. Each call is logged with its
CLOCK_MONOTONIC time ("PID NS") as ground truth."""
import ctypes
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

from own_pipeline import Pipeline

LIB = "libgdbm.so.6"


class LateLibrary:
    lib = None

    def __init__(self, log):
        self.log = log

    def __call__(self, x):
        if LateLibrary.lib is None:
            LateLibrary.lib = ctypes.CDLL(LIB)
        t = time.monotonic_ns()
        LateLibrary.lib._gdbm_hash(b"key", 3)  # (a plain function: it returns by its own ret)
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()} {t}\n")
        return x


class Numbers(Dataset):
    def __init__(self, n, tf):
        self.n, self.tf = n, tf

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.tf(torch.tensor([float(i)]))


if __name__ == "__main__":
    samples, log = int(sys.argv[1]), sys.argv[2]
    loader = DataLoader(Numbers(samples, Pipeline([LateLibrary(log)])), batch_size=4, num_workers=2)
    print(sum(len(b) for b in loader), "samples", flush=True)
