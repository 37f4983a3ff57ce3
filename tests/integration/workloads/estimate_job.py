#!/usr/bin/env python3
"""A test workload for the workers estimate: a map-style dataset whose loading blocks (a sleep, as a read from a
slow store does) and then runs a Compose of ops that compute on the CPU (numpy), in a DataLoader with
--workers; the training loop does a fixed CPU step per batch. Prints one line per epoch with its time."""
import argparse
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


class Blur:
    def __call__(self, x):
        for _ in range(3):
            x = (x[:-1, :-1] + x[1:, 1:] + x[:-1, 1:] + x[1:, :-1]) * 0.25
        return x


class Scale:
    def __call__(self, x):
        return np.ascontiguousarray(x[::2, ::2] * 2.0, dtype=np.float32)


class Files(Dataset):
    def __init__(self, n, io_ms, tf):
        self.n, self.io_s, self.tf = n, io_ms / 1000, tf
        self.base = np.random.default_rng(0).random((160, 160))

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.io_s)
        return torch.from_numpy(self.tf(self.base + i))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--samples", type=int, default=512)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--io-ms", type=float, default=3.0)
    ap.add_argument("--step-ms", type=float, default=1.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    ds = Files(args.samples, args.io_ms, transforms.Compose([Blur(), Scale()]))
    loader = DataLoader(ds, batch_size=16, shuffle=True, num_workers=args.workers)
    for epoch in range(args.epochs):
        t0 = time.perf_counter()
        for x in loader:
            end = time.thread_time() + args.step_ms / 1000
            while time.thread_time() < end:
                x.sum()
        print(f"estimate_job: epoch {epoch} done in {time.perf_counter() - t0:.3f} s", flush=True)


if __name__ == "__main__":
    main()
