#!/usr/bin/env python3
"""What --metrics costs the job: the example traced without and with --metrics while a real Prometheus server
(Debian's) scrapes the endpoint every second, in interleaved pairs (without, with, without, with, ...). Rows:
samples/s of each arm (median) and their ratio with the spread of the pairs' own ratios; the job's CPU per sample
(the traced processes' own, from the example's epoch lines); and the cost account: the tracer's CPU per sample in
each arm (its metrics updates and the HTTP server's thread are in the second) and the scrapes served.
Usage: sudo bench/metrics.py [--pairs N] [--images N] [--epochs N]"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import alternate

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LOTUS = os.path.join(ROOT, "build", "lotus-bpf")
PY = "/usr/bin/python3"
TRAIN = os.path.join(ROOT, "examples", "train.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prometheus(tmp, target):
    port = free_port()
    config = os.path.join(tmp, "prometheus.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: lotus\n    static_configs:\n"
                f"      - targets: ['{target}']\n")
    return subprocess.Popen(["/usr/bin/prometheus", f"--config.file={config}",
                             f"--storage.tsdb.path={tmp}/prom-data", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(data, epochs, tmp, metrics_port=None):
    """One traced run of the example: (seconds of its epochs, its CPU per sample, the tracer's CPU ms, scrapes)."""
    out = os.path.join(tmp, "t.json")
    extra = ["--metrics", f"127.0.0.1:{metrics_port}"] if metrics_port else []
    cmd = [LOTUS, "-q", "-o", out, *extra, "--", PY, TRAIN, data, "--epochs", str(epochs), "--workers", "2"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    seconds = sum(float(m) for m in re.findall(r"epoch \d+ done in ([0-9.]+) s", r.stdout))
    cpu = sum(float(m) for m in re.findall(r"epoch \d+ done in [0-9.]+ s, cpu ([0-9.]+) s", r.stdout))
    with open(out) as f:
        other = json.load(f)["otherData"]
    return seconds, cpu, other["tracer_cpu_ms"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--images", type=int, default=512)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/metrics.py: needs root (BPF)")
    data = alternate.example_data(args.images, PY)
    samples = args.images * args.epochs
    port = free_port()
    arms = {"without": [], "with": []}
    with tempfile.TemporaryDirectory() as tmp:
        prom = prometheus(tmp, f"127.0.0.1:{port}")  # scrapes the --metrics arm's endpoint every second
        try:
            run(data, 1, tmp)  # warm the page cache
            for _ in range(args.pairs):
                arms["without"].append(run(data, args.epochs, tmp))
                arms["with"].append(run(data, args.epochs, tmp, port))
            time.sleep(2)
            q = urllib.parse.urlencode({"query": 'sum(count_over_time(up{job="lotus"}[1h]))'})
            # (up is 1 for each scrape that reached the endpoint, 0 for those between runs)
            with urllib.request.urlopen(f"http://127.0.0.1:{prom_port(prom)}/api/v1/query?{q}", timeout=5) as r:
                scrapes = json.loads(r.read())["data"]["result"]
            q = urllib.parse.urlencode({"query": 'sum(sum_over_time(up{job="lotus"}[1h]))'})
            with urllib.request.urlopen(f"http://127.0.0.1:{prom_port(prom)}/api/v1/query?{q}", timeout=5) as r:
                served = json.loads(r.read())["data"]["result"]
        finally:
            prom.terminate()
            prom.wait()
    rate = {a: [samples / s for s, c, t in runs] for a, runs in arms.items()}
    ratios = sorted(w / o for w, o in zip(rate["with"], rate["without"]))
    cpu = {a: statistics.median(c / samples * 1e6 for s, c, t in runs) for a, runs in arms.items()}
    tracer = {a: statistics.median(t / samples * 1e3 for s, c, t in runs) for a, runs in arms.items()}
    served_n = float(served[0]["value"][1]) if served else 0
    rows = [
        ("samples/s traced, without --metrics", f"{statistics.median(rate['without']):.1f}", f"median of {args.pairs}"),
        ("samples/s traced, with --metrics (scraped every 1 s)", f"{statistics.median(rate['with']):.1f}",
         f"ratio {statistics.median(ratios):.3f} (pairs {ratios[0]:.3f}-{ratios[-1]:.3f})"),
        ("job CPU per sample, without / with", f"{cpu['without']:.0f} / {cpu['with']:.0f} us",
         f"ratio {cpu['with'] / cpu['without']:.3f} (the traced processes' own CPU: the job does nothing for metrics)"),
        ("tracer CPU per sample, without / with", f"{tracer['without']:.1f} / {tracer['with']:.1f} us",
         f"+{tracer['with'] - tracer['without']:.1f} us a sample: metrics updates and the HTTP thread"),
        ("scrapes served", f"{served_n:.0f}", "Prometheus's up == 1 over the with-arm runs"),
    ]
    width = max(len(r[0]) for r in rows)
    for name, value, note in rows:
        print(f"{name:<{width}}  {value:>16}  {note}")


def prom_port(proc):
    args = proc.args
    return int(next(a for a in args if a.startswith("--web.listen-address=")).rsplit(":", 1)[1])


if __name__ == "__main__":
    main()
