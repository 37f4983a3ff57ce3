#!/usr/bin/env python3
"""A test workload for the slow samples: an ImageFolder in which one file in 50 is about eight times larger, each
sample's loading timed by the job itself.
  slow_files_job.py DIR --make          writes the data set (noise JPEGs, 256x256; 724x724 for one index in 50)
  slow_files_job.py DIR --load-log F    runs it: a DataLoader over DIR; one line per sample loaded:
                                        "PID INDEX LOAD_NS PATH" (LOAD_NS: the file's open and decode)
"""
import argparse
import os
import random
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

BIG_EVERY, BIG_AT = 50, 17


def make(root, images):
    from PIL import Image
    rng = random.Random(80)
    for i in range(images):
        side = 724 if i % BIG_EVERY == BIG_AT else 256  # 8x the pixels of noise: about 8x the bytes
        d = os.path.join(root, f"class_{i % 2}")
        os.makedirs(d, exist_ok=True)
        img = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
        img.save(os.path.join(d, f"img_{i:03d}{'_big' if side > 256 else ''}.jpg"), quality=85)


class TimedFolder(datasets.ImageFolder):
    """At module level: CPython 3.14's DataLoader workers start through a forkserver, which pickles the dataset."""
    load_log = None

    def __getitem__(self, index):
        path, target = self.samples[index]
        start = time.perf_counter_ns()
        img = self.loader(path)
        took = time.perf_counter_ns() - start
        with open(self.load_log, "a") as f:
            f.write(f"{os.getpid()} {index} {took} {path}\n")
        return self.transform(img), target


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--make", action="store_true")
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--load-log")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    if args.make:
        make(args.data, args.images)
        return
    torch.manual_seed(0)
    torch.set_num_threads(1)
    ds = TimedFolder(args.data, transform=transforms.Compose([transforms.CenterCrop(96), transforms.ToTensor()]))
    ds.load_log = args.load_log
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    for _ in range(args.epochs):
        for _batch in loader:
            pass
    print(f"slow_files_job: {len(ds)} samples x {args.epochs} epochs", file=sys.stderr)


if __name__ == "__main__":
    main()
