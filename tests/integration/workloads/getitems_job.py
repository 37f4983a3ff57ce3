#!/usr/bin/env python3
"""A map-style dataset with __getitems__ (torch 2.x's fetcher hands it a batch's indices at once, as Hugging Face
datasets take them): its pipeline runs with no __getitem__ above it. Ground truth: SAMPLE_LOG gets
`PID INDEX START_NS END_NS` around each pipeline call (CLOCK_MONOTONIC).
Usage: getitems_job.py DATA SAMPLE_LOG [--workers N] [--batch-size B]"""
import argparse
import os
import time

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2


class Items(Dataset):
    def __init__(self, root, transform, log):
        self.files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".jpg"))
        self.transform, self.log = transform, log

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        raise AssertionError("the fetcher calls __getitems__")

    def __getitems__(self, indices):
        out, lines = [], []
        for i in indices:
            img = Image.open(self.files[i]).convert("RGB")
            start = time.monotonic_ns()
            x = self.transform(img)
            lines.append(f"{os.getpid()} {i} {start} {time.monotonic_ns()}\n")
            out.append((x, i))
        with open(self.log, "a") as f:
            f.write("".join(lines))
        return out


OPS = ["RandomResizedCrop", "ToImage", "ToDtype"]

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("log")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    args = ap.parse_args()
    tf = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])
    assert [type(t).__name__ for t in tf.transforms] == OPS
    loader = DataLoader(Items(args.data, tf, args.log), batch_size=args.batch_size, shuffle=True,
                        num_workers=args.workers)
    n = 0
    for x, y in loader:
        n += len(y)
    print(f"getitems_job: {n} samples", flush=True)
