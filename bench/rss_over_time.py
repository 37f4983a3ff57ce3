#!/usr/bin/env python3
"""The tracer's own memory over a long run: the example runs many epochs (2 DataLoader workers, non-persistent,
so new worker processes every epoch), lotus-bpf is attached to it (`--pid`, `-o /dev/null`: no trace kept, so
what grows is the tracer's own state), and its RSS (VmRSS of /proc/PID/status) is read at the given seconds
after the attach. Prints RSS against time and the growth since the second reading (the first one, taken while
the tracer still describes the job's code and types, is its warm-up). Bounded memory: RSS flat after warm-up.

Usage (root): bench/rss_over_time.py [--at 15,30,60,90,120] [--epochs 100] [--images 512] [--lotus BINARY]
                                     [--extra "ARGS"]"""
import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PY = "/usr/bin/python3"
TRAIN = os.path.join(ROOT, "examples", "train.py")


def example_data(images):
    data = os.path.join(tempfile.gettempdir(), f"lotus-bench-images-{images}")
    subprocess.run([PY, os.path.join(ROOT, "examples", "make_dataset.py"), data, "--images", str(images)],
                   check=True, stdout=subprocess.DEVNULL)
    return data


def rss_kb(pid):
    """VmRSS of a process in kB, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def measure(lotus, at, epochs, images, extra=()):
    """Attaches lotus-bpf to the example and reads its RSS at each of `at` seconds after the attach:
    [(seconds, kB)]. Raises where the job or the tracer ends before the last reading."""
    data = example_data(images)
    job = subprocess.Popen([PY, "-u", TRAIN, data, "--epochs", str(epochs), "--workers", "2", "--batch-size", "32"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    tracer = None
    try:
        for line in job.stdout:
            if "train.py: pid" in line:
                break
        threading.Thread(target=lambda: [None for _ in job.stdout], daemon=True).start()
        tracer = subprocess.Popen([lotus, "--pid", str(job.pid), "-o", "/dev/null", *extra],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in tracer.stderr:
            if "tracing PID" in line:
                break
        else:
            raise RuntimeError(f"bench: lotus-bpf ended before attaching (status {tracer.wait()})")
        threading.Thread(target=lambda: [None for _ in tracer.stderr], daemon=True).start()
        start = time.monotonic()
        out = []
        for t in at:
            time.sleep(max(0.0, start + t - time.monotonic()))
            kb = rss_kb(tracer.pid)
            if kb is None or job.poll() is not None:
                raise RuntimeError(f"bench: the job or the tracer ended before {t} s (more --epochs)")
            out.append((t, kb))
        return out
    finally:
        job.kill()
        job.wait()
        if tracer:
            try:
                tracer.wait(timeout=60)
            except subprocess.TimeoutExpired:
                tracer.kill()
                tracer.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--at", default="15,30,60,90,120", help="seconds after the attach to read RSS at")
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--lotus", default=os.path.join(ROOT, "build", "lotus-bpf"))
    ap.add_argument("--extra", default="", help="more lotus-bpf options, e.g. \"--native-map\"")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: needs root (BPF)")
    at = [float(x) for x in args.at.split(",")]
    rows = measure(args.lotus, at, args.epochs, args.images, shlex.split(args.extra))
    base = rows[1][1] if len(rows) > 1 else rows[0][1]
    print(f"lotus-bpf RSS attached to the example ({args.epochs} epochs, {args.images} images, 2 workers, "
          f"-o /dev/null{' ' + args.extra if args.extra else ''})")
    print(f"{'s':>6} {'RSS MB':>8} {'since ' + str(int(rows[min(1, len(rows) - 1)][0])) + ' s, MB':>16}")
    for t, kb in rows:
        print(f"{t:>6.0f} {kb / 1024:>8.1f} {(kb - base) / 1024:>+16.2f}")


if __name__ == "__main__":
    main()
