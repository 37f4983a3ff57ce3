#!/usr/bin/env python3
"""What a subprocess costs a traced job: a job that runs subprocess.run(["/bin/true"]) N times (as pipelines that
call a decoder per sample do), timed in the job itself, untraced and launched under lotus-bpf in turn (interleaved
pairs). CPython's subprocess forks with vfork where it can: such a child shares its parent's memory until its exec,
and lotus-bpf does not hold it. Prints ms a spawn per arm (median and range over the pairs) and the traced/untraced
ratio of the medians. Usage: spawn.py [--pairs 10] [--spawns 200]"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LOTUS = os.path.join(ROOT, "build", "lotus-bpf")
PY = "/usr/bin/python3"
JOB = ("import subprocess, sys, time\n"
       "n = int(sys.argv[1])\n"
       "subprocess.run(['/bin/true'])\n"  # warm-up: the first spawn imports and caches
       "t0 = time.perf_counter()\n"
       "for _ in range(n): subprocess.run(['/bin/true'])\n"
       "print(f'ms_per_spawn {1000 * (time.perf_counter() - t0) / n:.4f}', flush=True)\n")


def one(traced, spawns):
    cmd = [PY, "-c", JOB, str(spawns)]
    if traced:
        cmd = [LOTUS, "-q", "-o", "/dev/null", "--"] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"ms_per_spawn ([0-9.]+)", out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--spawns", type=int, default=200)
    args = ap.parse_args()
    untraced, traced = [], []
    for _ in range(args.pairs):
        untraced.append(one(False, args.spawns))
        traced.append(one(True, args.spawns))
    u, t = statistics.median(untraced), statistics.median(traced)
    print(f"subprocess.run(['/bin/true']) x {args.spawns}, {args.pairs} interleaved pairs")
    print(f"  untraced: {u:.3f} ms a spawn (range {min(untraced):.3f}-{max(untraced):.3f})")
    print(f"  traced:   {t:.3f} ms a spawn (range {min(traced):.3f}-{max(traced):.3f})")
    ratios = sorted(b / a for a, b in zip(untraced, traced))
    print(f"  traced/untraced: {t / u:.3f} (per pair {ratios[0]:.3f}-{ratios[-1]:.3f})")


if __name__ == "__main__":
    sys.exit(main())
