#!/usr/bin/env python3
"""Slowdown measured inside one job: the example runs epoch after epoch, and lotus-bpf is attached to it
(`--pid`, the product's own use) for some epochs and detached for others. Each cycle runs one untraced epoch
and, for each traced arm, attaches, lets one epoch go by (the attach's own warm-up: code and types described
for the first time), times the next epoch and detaches. A traced epoch is compared with the untraced one of the
same cycle, seconds apart, in the same process with the same page cache, and the arms' order rotates from cycle
to cycle, so a drift favours none. Adjacent epochs still differ by a few percent on these shared machines (as
much as separate runs do): the method is faster than separate runs and goes through `--pid`, not more precise;
the untraced arm prints its noise.

Usage (root): bench/alternate.py [--cycles N] [--images N] [--lotus BINARY]... [--extra "ARGS"]..."""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PY = "/usr/bin/python3"
TRAIN = os.path.join(ROOT, "examples", "train.py")
DONE = re.compile(r"epoch (\d+) done in ([0-9.]+) s, cpu ([0-9.]+) s")


def example_data(images, python=PY):
    """The example's dataset of `images` JPEGs (made once, kept in the temporary directory): its path."""
    data = os.path.join(tempfile.gettempdir(), f"lotus-bench-images-{images}")
    subprocess.run([python, os.path.join(ROOT, "examples", "make_dataset.py"), data, "--images", str(images)],
                   check=True)
    return data


class Job:
    """The example, waiting before each epoch for its go file."""

    def __init__(self, data, epochs, workers, steps):
        self.steps = steps
        self.next = 0
        self.proc = subprocess.Popen([PY, TRAIN, data, "--epochs", str(epochs), "--workers", str(workers),
                                      "--batch-size", "32", "--steps", steps],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.pid = self.proc.pid

    def epoch(self):
        """Runs the next epoch: (seconds, CPU seconds of the job)."""
        n = self.next
        self.next += 1
        open(os.path.join(self.steps, f"go-{n}"), "w").close()
        for line in self.proc.stdout:
            m = DONE.search(line)
            if m and int(m.group(1)) == n:
                return float(m.group(2)), float(m.group(3))
        raise RuntimeError(f"bench: the example exited before its epoch {n} ended (status {self.proc.wait()})")

    def close(self):
        self.proc.kill()
        self.proc.wait()


class Attached:
    """lotus-bpf attached to pid for the `with` block (it returns once tracing began; SIGINT detaches it)."""

    def __init__(self, lotus, pid, extra=(), env=None):
        self.cmd = [lotus, "-q", "-o", os.devnull, *extra, "--pid", str(pid)]
        self.env = {**os.environ, **(env or {})}

    def __enter__(self):
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=self.err, env=self.env, text=True)
        deadline = time.monotonic() + 60
        while True:
            self.err.seek(0)
            text = self.err.read()
            if "tracing PID" in text:
                return self
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"bench: {' '.join(self.cmd)} did not attach: {text.strip()}")
            time.sleep(0.01)

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGINT)
        rc = self.proc.wait()
        self.err.seek(0)
        text = self.err.read()
        self.err.close()
        if rc != 0 and not exc[0]:
            raise RuntimeError(f"bench: {' '.join(self.cmd)} exited {rc}: {text.strip()[-500:]}")


def alternate(data, arms, cycles, workers=2, deadline=None):
    """arms: {name: (lotus binary, extra args, env), or None for an untraced arm (the method's own noise)}. Returns
    {name: [(traced s, untraced s, traced cpu, untraced cpu, warm-up epoch s)]}, one tuple per cycle; no cycle
    starts after `deadline` (time.monotonic())."""
    names = list(arms)
    order = [None] + names  # None: the untraced epoch
    epochs = 1 + cycles * (1 + 2 * len(names))
    out = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as steps:
        job = Job(data, epochs, workers, steps)
        try:
            job.epoch()  # the first epoch: imports and the page cache, untraced
            for c in range(cycles):
                if deadline is not None and c > 0 and time.monotonic() > deadline:
                    break
                k = c % len(order)
                got = {}
                for arm in order[k:] + order[:k]:
                    if arm is None:
                        got[None] = job.epoch()
                        continue
                    if arms[arm] is None:
                        warm = job.epoch()[0]
                        got[arm] = job.epoch() + (warm,)
                        continue
                    lotus, extra, env = arms[arm]
                    with Attached(lotus, job.pid, extra, env):
                        warm = job.epoch()[0]
                        got[arm] = job.epoch() + (warm,)
                for name in names:
                    (t, tc, warm), (u, uc) = got[name], got[None]
                    out[name].append((t, u, tc, uc, warm))
        finally:
            job.close()
    return out


def summary(pairs):
    """Median slowdown of the epoch and its CPU, with the spread of the cycles' ratios."""
    r = sorted(t / u for t, u, _, _, _ in pairs)
    c = sorted(tc / uc for _, _, tc, uc, _ in pairs)
    w = statistics.median(warm / u for _, u, _, _, warm in pairs)
    return (statistics.median(r), r[0], r[-1], statistics.median(c), c[0], c[-1], w)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lotus", action="append", help="a lotus-bpf binary (repeatable; default: build/lotus-bpf)")
    ap.add_argument("--extra", action="append", help="lotus-bpf arguments of an arm (repeatable, one string)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: needs root (BPF)")
    data = example_data(args.images)
    binaries = args.lotus or [os.path.join(ROOT, "build", "lotus-bpf")]
    extras = args.extra or [""]
    arms = {f"{b} {e}".strip(): (b, e.split(), None) for b in binaries for e in extras}
    for name, pairs in alternate(data, arms, args.cycles, args.workers).items():
        m, lo, hi, cm, clo, chi, w = summary(pairs)
        print(f"{name}: epoch {100 * (m - 1):+.1f} % (cycles {lo:.3f}-{hi:.3f}), CPU {100 * (cm - 1):+.1f} % "
              f"({clo:.3f}-{chi:.3f}); the epoch right after attaching {100 * (w - 1):+.1f} %")


if __name__ == "__main__":
    main()
