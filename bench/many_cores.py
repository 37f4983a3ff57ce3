#!/usr/bin/env python3
"""The overhead rows of bench/run.py on a machine with many cores, where the 2-core machines hide what the
tracer takes: the example with more DataLoader workers (8 by default) and a larger dataset, untraced, traced in
the default mode and with --native-map --counters, interleaved; the BPF time per sample (where bpftool runs);
the tracer's CPU while the job runs; an unrelated process's slowdown beside the tracer.

It prints each repeat as it ends and stops taking new repeats at --budget seconds, so a machine lent for a few
minutes still returns every figure it measured. Needs root (BPF); built lotus-bpf at build/lotus-bpf.
Usage: bench/many_cores.py [--python PY] [--workers 8] [--images 2048] [--repeats 10] [--budget SECONDS]"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import run

UNRELATED = {"functions": 2_000_000, "objects": 2_000_000, "syscalls": 500_000, "switches": 100_000}


def say(text):
    print(text, flush=True)


def ratio_row(name, runs, base, cpu, base_cpu):
    """A traced mode against the untraced runs interleaved with it: samples/s and CPU per sample."""
    s, u = statistics.median(runs), statistics.median(base[:len(runs)])
    c, uc = statistics.median(cpu), statistics.median(base_cpu[:len(cpu)])
    return (f"{name}: slowdown {100 * (s / u - 1):+.1f} % ({run.pairs(runs, base)}), CPU per sample "
            f"{100 * (c / uc - 1):+.1f} % ({run.pairs(cpu, base_cpu)}), {len(runs)} pairs")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", default=run.PY, help="the interpreter with torch and torchvision")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--budget", type=float, default=1e9, help="seconds after which no new repeat starts")
    ap.add_argument("--pairs-only", action="store_true", help="only the interleaved runs of the example")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: needs root (BPF)")
    start = time.monotonic()
    left = lambda: args.budget - (time.monotonic() - start)
    run.PY, run.WORKERS = args.python, args.workers
    say(f"many_cores: {os.cpu_count()} CPUs, {args.workers} workers, {args.images} images x {args.epochs} epochs, "
        f"{args.python}")
    data = os.path.join(tempfile.gettempdir(), f"lotus-bench-images-{args.images}")
    subprocess.run([args.python, os.path.join(run.ROOT, "examples", "make_dataset.py"), data,
                    "--images", str(args.images)], check=True)
    samples = args.images * args.epochs
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        run.run_train(data, 1, False, tmp)  # the page cache
        base, base_cpu = [], []
        modes = {"default": ((), [], []), "--native-map --counters": (run.NATIVE, [], [])}
        for i in range(args.repeats):
            if i >= 3 and left() < (0.1 if args.pairs_only else 0.55) * args.budget:  # the rows below need the rest
                break
            s, info = run.run_train(data, args.epochs, False, tmp)
            base.append(s)
            base_cpu.append(info["cpu_s"] / samples)
            line = f"repeat {i + 1}: untraced {samples / s:.0f} samples/s"
            for name, (extra, runs, cpu) in modes.items():
                s, info = run.run_train(data, args.epochs, True, tmp, extra)
                runs.append(s)
                cpu.append(info["cpu_s"] / samples)
                line += f", {name} {samples / s:.0f} ({info['lost_events']} lost)"
            say(line)
        rows.append(f"samples/s untraced: {samples / statistics.median(base):.0f} (median of {len(base)})")
        rows += [ratio_row(name, runs, base, cpu, base_cpu) for name, (_, runs, cpu) in modes.items()]
        say(rows[-2])
        say(rows[-1])
        if args.pairs_only:
            return
        if shutil.which("bpftool") and left() > 0.35 * args.budget:
            for name, extra in (("default", ()), ("--native-map --counters", run.NATIVE)):
                costs = [run.bpf_cost(data, args.images, extra) for _ in range(2)]
                rows.append(f"BPF per sample, {name}: {run.cost_total(costs):.1f} us (epochs 2-3, median of 2; "
                            f"{run.cost_note(costs[-1])})")
                say(rows[-1])
        if left() > 0.25 * args.budget:
            cpu_ms = 1000 * statistics.median(base_cpu)
            for name, extra in (("default", ()), ("--native-map --counters", run.NATIVE)):
                us = [run.tracer_run_cpu(data, args.images, extra) for _ in range(2)]
                rows.append(f"tracer CPU per sample while the job runs, {name}: {statistics.median(us):.0f} us "
                            f"({min(us):.0f}-{max(us):.0f}; {statistics.median(us) / 10 / cpu_ms:.2f} % of the "
                            f"job's {cpu_ms:.2f} ms of CPU per sample untraced)")
                say(rows[-1])
        for kind, n in UNRELATED.items():
            if left() < 20:
                rows.append(f"unrelated process, {kind}: not measured (out of time)")
                continue
            a, b, p = run.unrelated(5, kind, n)
            rows.append(f"unrelated process beside the tracer, {kind}: {100 * (b / a - 1):+.1f} % ({a:.3f} s alone, "
                        f"{b:.3f} s beside, {(b - a) * 1e9 / n:+.0f} ns a call, {p}, 5 interleaved)")
            say(rows[-1])
    say("\nmany_cores summary")
    for row in rows:
        say("  " + row)


if __name__ == "__main__":
    main()
