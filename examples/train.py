#!/usr/bin/env python3
"""The bundled example: an ImageNet-style classification input pipeline on an ImageFolder of JPEGs
(RandomResizedCrop(224), RandomHorizontalFlip, ToTensor, Normalize), DataLoader with worker processes,
and a small CNN training step. Nothing in it knows about lotus-bpf.

--hold FILE: after the first iterator has started (workers alive and prefetching), wait until FILE exists
before consuming batches, so a tracer can attach to workers that are already alive and idle.
--log FILE: append one line per consumed batch ("batch EPOCH INDEX N") for tests.
--steps DIR: before each epoch N, wait until DIR/go-N exists (bench/alternate.py attaches and detaches a tracer
between epochs).
--linger FILE: after the last epoch, print "lingering" and wait until FILE exists (the figures are then still:
the metrics test reads them from Prometheus)."""
import argparse
import os
import resource
import sys
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def cpu_seconds():
    """CPU time of this process and its reaped children (the epoch's DataLoader workers, joined at its end)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--hold", help="wait for this file before consuming batches")
    ap.add_argument("--log", help="append a line per consumed batch")
    ap.add_argument("--steps", help="before each epoch N, wait for the file DIR/go-N")
    ap.add_argument("--no-train", action="store_true", help="skip the model step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--linger", help="after the last epoch, say so on stdout and wait for this file before exiting")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(args.data, transform=tf)
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    model = nn.Sequential(nn.Conv2d(3, 8, 5, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                          nn.Linear(8 * 16, len(ds.classes)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    log = open(args.log, "a") if args.log else None
    print(f"train.py: pid {os.getpid()}, {len(ds)} images, {args.workers} workers", flush=True)
    for epoch in range(args.epochs):
        while args.steps and not os.path.exists(os.path.join(args.steps, f"go-{epoch}")):
            time.sleep(0.005)
        c0 = cpu_seconds()
        it = iter(loader)
        if args.hold and epoch == 0:
            print("train.py: workers started, holding", flush=True)
            while not os.path.exists(args.hold):
                time.sleep(0.02)
        t0 = time.perf_counter()
        for i, (x, y) in enumerate(it):
            if not args.no_train:
                opt.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                opt.step()
            if log:
                log.write(f"batch {epoch} {i} {len(y)}\n")
                log.flush()
        print(f"train.py: epoch {epoch} done in {time.perf_counter() - t0:.2f} s, cpu {cpu_seconds() - c0:.2f} s",
              flush=True)
    if args.linger:
        print("train.py: last epoch done, lingering", flush=True)
        while not os.path.exists(args.linger):
            time.sleep(0.02)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"train.py: cpu total {cpu_seconds():.3f} s (this process since it started, and its workers), workers "
          f"{kids.ru_utime + kids.ru_stime:.3f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
