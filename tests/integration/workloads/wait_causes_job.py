"""A DataLoader job built to wait for one cause (test_wait_causes.py): its loading reads a file and works on it for
a time that follows the file's size (as decoding does), then a pipeline of two ops: Work, and Heavy, which works
--heavy-factor times longer on the samples of every --heavy-every-th batch. The loop logs each wait in next()."""
import argparse
import hashlib
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import transforms


CHUNK = bytes(16 * 1024)


def spin(ms):
    """Work on a CPU for ms of the thread's own CPU time (its wall time grows where it waits for a CPU), in hashes
    that let go of the GIL as native ops do (so the worker's queue feeder thread sends its batches meanwhile)."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        hashlib.sha256(CHUNK).digest()


class Work:
    def __init__(self, ms):
        self.ms = ms

    def __call__(self, item):
        spin(self.ms)
        return item


class Heavy:
    def __init__(self, ms, every, factor, batch_size):
        self.ms, self.every, self.factor, self.batch_size = ms, every, factor, batch_size

    def __call__(self, item):
        index, x = item
        heavy = self.every and (index // self.batch_size) % self.every == self.every - 1
        spin(self.ms * (self.factor if heavy else 1))
        return item


class Files(Dataset):
    def __init__(self, root, ms_per_kb, pipeline):
        self.files = sorted(os.path.join(root, f) for f in os.listdir(root))
        self.ms_per_kb, self.pipeline = ms_per_kb, pipeline

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        with open(self.files[i], "rb") as f:
            data = f.read()
        spin(len(data) / 1024 * self.ms_per_kb)  # "decoding": time in proportion to the file's size
        return self.pipeline((i, torch.zeros(8)))[1], i


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--ms-per-kb", type=float, default=1.0)
    ap.add_argument("--work-ms", type=float, default=1.5)
    ap.add_argument("--heavy-ms", type=float, default=0.5)
    ap.add_argument("--heavy-every", type=int, default=0)
    ap.add_argument("--heavy-factor", type=float, default=1)
    ap.add_argument("--step-ms", type=float, default=0, help="the loop's own time per batch (sleeping)")
    ap.add_argument("--wait-log", required=True, help="one line per batch: INDEX NS spent in next(it)")
    ap.add_argument("--loop-log", help="one line: the first next()'s start and the last one's end (StopIteration), "
                                       "ns of the monotonic clock")
    args = ap.parse_args()
    pipeline = transforms.Compose([Work(args.work_ms),
                                   Heavy(args.heavy_ms, args.heavy_every, args.heavy_factor, args.batch_size)])
    loader = DataLoader(Files(args.data, args.ms_per_kb, pipeline), batch_size=args.batch_size,
                        num_workers=args.workers)
    it = iter(loader)
    lines = []
    b = 0
    first = None
    while True:
        t0 = time.perf_counter_ns()
        first = first or t0
        try:
            next(it)
        except StopIteration:
            break
        lines.append(f"{b} {time.perf_counter_ns() - t0}\n")
        b += 1
        if args.step_ms:
            time.sleep(args.step_ms / 1000)
    end = time.perf_counter_ns()
    with open(args.wait_log, "w") as f:
        f.writelines(lines)
    if args.loop_log:
        with open(args.loop_log, "w") as f:
            f.write(f"{first} {end}\n")
    print(f"wait_causes_job: {b} batches", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
