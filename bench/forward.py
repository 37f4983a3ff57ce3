#!/usr/bin/env python3
"""A model's forward in the training process: ResNet-50 (torchvision), one thread, a 1x3x16x16 input, no grad.
Each of its module calls is a call of an object, which traps where lotus-bpf traces the process (and which its
rules skip: a module is no pipeline). Prints the module calls a forward (counted once, by pre-hooks removed
before the timing) and the median of 5 timings of N forwards, in ms a forward. With --loader-workers K, the
process first iterates a DataLoader with K workers, as a training loop does (lotus-bpf's --trainer-calls auto then
stops probing its object calls), and waits 0.5 s. With --marks, it prints "mark" before and after the timed
forwards and waits 1 s after each (bench/run.py reads the tracer's BPF run counts in between). Usage: forward.py
N [--loader-workers K] [--marks]"""
import argparse
import statistics
import time

import torch
import torchvision


def iterate_loader(workers):
    data = torch.utils.data.TensorDataset(torch.arange(64.0))
    for _ in torch.utils.data.DataLoader(data, batch_size=8, num_workers=workers):
        pass
    time.sleep(0.5)


def mark(on):
    if on:
        print("mark", flush=True)
        time.sleep(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int)
    ap.add_argument("--loader-workers", type=int, default=0)
    ap.add_argument("--marks", action="store_true")
    args = ap.parse_args()
    n = args.n
    torch.set_num_threads(1)
    if args.loader_workers:
        iterate_loader(args.loader_workers)
    model = torchvision.models.resnet50().eval()
    x = torch.randn(1, 3, 16, 16)
    calls = [0]

    def count(_module, _inputs):
        calls[0] += 1
    hooks = [m.register_forward_pre_hook(count) for m in model.modules()]
    with torch.no_grad():
        model(x)
        for h in hooks:
            h.remove()
        for _ in range(5):  # warm-up (and, traced, the tracer's first sight of each code object)
            model(x)
        times = []
        mark(args.marks)
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                model(x)
            times.append((time.perf_counter() - t0) / n)
        mark(args.marks)
    print(f"module_calls {calls[0]} ms_per_forward {1000 * statistics.median(times):.4f}", flush=True)


if __name__ == "__main__":
    main()
