#!/usr/bin/env python3
"""A test workload: data-parallel training as torch.multiprocessing.spawn runs it. Each rank (gloo process
group, DistributedSampler) has its own DataLoader with its own workers and trains a tiny DDP model. Ground truth:
--wait-log F gets one line per next() of each rank: "RANK PID EPOCH INDEX NS MONOTONIC_NS_IT_BEGAN"; --loop-log F one
line per epoch of each rank for the next() that raised StopIteration: "RANK PID EPOCH MONOTONIC_NS_IT_BEGAN
MONOTONIC_NS_IT_ENDED"."""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets, transforms

from pipeline_job import _append, _workers_idle  # (this directory: the workloads)


def train(rank, args, port):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch 2.x store is built without libuv
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    tf = transforms.Compose([transforms.RandomResizedCrop(64), transforms.RandomHorizontalFlip(),
                             transforms.ToTensor(), transforms.Normalize([0.5] * 3, [0.25] * 3)])
    ds = datasets.ImageFolder(args.data, transform=tf)
    sampler = DistributedSampler(ds, num_replicas=args.ranks, rank=rank, shuffle=True)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, len(ds.classes))))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        it, lines, i = iter(loader), [], 0
        while True:
            if args.step_ms and i == 0:  # the workers get ahead: every batch they were handed is ready
                _workers_idle(it)
            elif args.step_ms:  # a slower training step
                time.sleep(args.step_ms / 1000)
            began = time.monotonic_ns()
            t0 = time.perf_counter_ns()
            try:
                x, y = next(it)
            except StopIteration:
                if args.loop_log:
                    _append(args.loop_log, f"{rank} {os.getpid()} {epoch} {began} {time.monotonic_ns()}\n")
                break
            lines.append(f"{rank} {os.getpid()} {epoch} {i} {time.perf_counter_ns() - t0} {began}\n")
            i += 1
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        if args.wait_log:
            _append(args.wait_log, "".join(lines))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--wait-log")
    ap.add_argument("--loop-log")
    ap.add_argument("--step-ms", type=float, default=0, help="sleep this long before each next(), and before an "
                    "epoch's first wait until the workers have made every batch they were handed: they keep ahead")
    args = ap.parse_args()
    with socket.socket() as s:  # a free port for the process group's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"ranks_job: pid {os.getpid()}", flush=True)
    mp.spawn(train, args=(args, port), nprocs=args.ranks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
