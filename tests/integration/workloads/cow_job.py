#!/usr/bin/env python3
"""Copy-on-read (pytorch/pytorch#13246): a dataset holding 1,000,000 Python strings in a list, or the same bytes in
one numpy array (--numpy). Each __getitem__ reads its own slice of them (the samples, in order, cover the whole data
once) and returns a small tensor; 2 workers read one pass. Reading a string writes its reference count, so each
worker copies the pages it reads: its private memory grows with the samples. Reading the numpy array writes nothing.
Ground truth: each worker appends `PID SAMPLES_READ PRIVATE_KB RSS_KB` (its own smaps_rollup: Private_Clean +
Private_Dirty, and Rss) to LOG when it starts and every 50 samples.
--context: the workers' start method (DataLoader's multiprocessing_context; CPython 3.14's default on Linux is
forkserver, whose workers unpickle their own dataset and share none of the parent's pages).
Usage: cow_job.py LOG [--numpy] [--pipeline] [--samples N] [--sleep-ms MS] [--context fork|forkserver|spawn]"""
import argparse
import os
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms

N = 1_000_000


def own_memory():
    fields = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2 and parts[0].endswith(":"):
                fields[parts[0][:-1]] = int(parts[1])
    return fields["Private_Clean"] + fields["Private_Dirty"], fields["Rss"]


class Double:
    def __call__(self, x):
        return x * 2


class Strings(Dataset):
    def __init__(self, args):
        self.samples, self.log, self.sleep = args.samples, args.log, args.sleep_ms / 1000
        self.per = N // args.samples
        items = [f"item-{i:07d}" for i in range(N)]
        self.data = np.array(items, dtype="S12") if args.numpy else items
        self.transform = transforms.Compose([Double()]) if args.pipeline else None
        self.read = 0

    def __len__(self):
        return self.samples

    def note(self):
        priv, rss = own_memory()
        with open(self.log, "a") as f:
            f.write(f"{os.getpid()} {self.read} {priv} {rss}\n")

    def __getitem__(self, i):
        if self.read == 0:
            self.note()
        part = self.data[i * self.per:(i + 1) * self.per]
        if isinstance(part, np.ndarray):
            total = int(part.view(np.uint8).sum())
        else:
            total = sum(len(s) for s in part)
        time.sleep(self.sleep)
        x = torch.tensor([float(total), float(i)])
        self.read += 1
        if self.read % 50 == 0:
            self.note()
        return self.transform(x) if self.transform else x


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--numpy", action="store_true")
    ap.add_argument("--pipeline", action="store_true")
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--sleep-ms", type=float, default=2.0)
    ap.add_argument("--context", default=None)
    args = ap.parse_args()
    ds = Strings(args)
    n = 0
    for x in DataLoader(ds, batch_size=20, num_workers=2, multiprocessing_context=args.context):
        n += len(x)
    print(f"cow_job: {n} samples", flush=True)
