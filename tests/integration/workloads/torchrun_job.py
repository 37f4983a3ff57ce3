#!/usr/bin/env python3
"""A test workload: one rank as torchrun starts it (RANK, LOCAL_RANK, WORLD_SIZE and the store's address in its
environment), gloo process group, DistributedSampler, its own DataLoader with workers, a tiny DDP model.
--slow-rank R --slow-ms MS: rank R's dataset sleeps MS per item (a slow shard: every rank waits for it at each
all-reduce). Ground truth: --log DIR gets DIR/rank-R with a line per consumed batch, "EPOCH INDEX SAMPLES"."""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import datasets, transforms


class Slow(torch.utils.data.Dataset):
    def __init__(self, inner, seconds):
        self.inner, self.seconds = inner, seconds

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, i):
        time.sleep(self.seconds)
        return self.inner[i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0)
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    os.environ.setdefault("USE_LIBUV", "0")  # Debian's torch 2.x store is built without libuv
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    torch.manual_seed(rank)
    torch.set_num_threads(1)
    tf = transforms.Compose([transforms.RandomResizedCrop(64), transforms.ToTensor()])
    ds = datasets.ImageFolder(args.data, transform=tf)
    classes = len(ds.classes)
    if rank == args.slow_rank:
        ds = Slow(ds, args.slow_ms / 1000)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(3, classes)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with open(os.path.join(args.log, f"rank-{rank}"), "a") as log:
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            for i, (x, y) in enumerate(loader):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
                log.write(f"{epoch} {i} {len(y)}\n")
                log.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
