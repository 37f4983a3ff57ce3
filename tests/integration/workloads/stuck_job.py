"""A DataLoader job one of whose samples makes its worker sleep (a stuck worker, for `lotus-bpf dump` and the
stuck-process watch): in its __getitem__ (--stuck-in getitem) or in the op Stall of its pipeline (--stuck-in op).
The worker logs, as it starts sleeping: "stuck INDEX PID MONOTONIC_S WALL_S"; the main process logs "main PID"
first and "done" at its end."""
import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Scale:
    def __call__(self, x):
        return x * 2.0


class Shift:
    def __call__(self, x):
        return x + 1.0


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


def stall(seconds):
    time.sleep(seconds)  # the stuck line


def log_stuck(log, idx):
    with open(log, "a") as f:
        f.write(f"stuck {idx} {os.getpid()} {time.monotonic():.6f} {time.time():.6f}\n")


class Stall:
    """An op that sleeps on the sample whose value (after Scale) says it is the stuck index."""
    def __init__(self, stuck_index, seconds, log):
        self.stuck_index, self.seconds, self.log = stuck_index, seconds, log

    def __call__(self, x):
        if self.stuck_index >= 0 and float(x[0]) == 2.0 * self.stuck_index:
            log_stuck(self.log, self.stuck_index)
            stall(seconds=self.seconds)
        return x


class StuckDataset(Dataset):
    def __init__(self, n, stuck_index, seconds, log, in_op):
        self.n, self.stuck_index, self.seconds, self.log = n, -1 if in_op else stuck_index, seconds, log
        self.transform = Compose([Scale(), Stall(stuck_index if in_op else -1, seconds, log), Shift()])

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        x = torch.full((16,), float(idx))
        if idx == self.stuck_index:
            log_stuck(self.log, idx)
            stall(self.seconds)
        time.sleep(0.002)
        return self.transform(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log", required=True)
    ap.add_argument("--samples", type=int, default=96)
    ap.add_argument("--stuck-index", type=int, default=37)
    ap.add_argument("--sleep", type=float, default=8.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--stuck-in", choices=["getitem", "op"], default="getitem")
    args = ap.parse_args()
    with open(args.log, "a") as f:
        f.write(f"main {os.getpid()}\n")
    ds = StuckDataset(args.samples, args.stuck_index, args.sleep, args.log, args.stuck_in == "op")
    loader = DataLoader(ds, batch_size=4, num_workers=args.workers)
    total = 0.0
    for _ in range(args.epochs):
        for batch in loader:
            total += float(batch.sum())
    with open(args.log, "a") as f:
        f.write("done\n")


if __name__ == "__main__":
    main()
