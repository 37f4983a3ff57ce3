#!/usr/bin/env python3
"""Issue 79, item 1: the native probes' returns at their return instructions (this build) against return probes
(uretprobes: a build from before, given as BASELINE), and untraced: N interleaved runs of the example (512 images,
2 epochs) with --native-map --counters default, for samples/s and CPU per sample, each traced arm over the untraced
run just before it. As root. Usage: bench/native_returns.py BASELINE_LOTUS_BPF [N]"""
import os, statistics, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run, alternate
baseline, repeats = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 6
images, epochs = 512, 2
binaries = {"returns": run.LOTUS, "uretprobe": baseline}
data = alternate.example_data(images, run.PY)
samples = images * epochs
with tempfile.TemporaryDirectory() as tmp:
    run.run_train(data, 1, False, tmp)
    secs = {a: [] for a in ("untraced", *binaries)}
    cpus = {a: [] for a in secs}
    calls = {a: [] for a in binaries}
    for i in range(repeats):
        for arm in secs:
            run.LOTUS = binaries.get(arm, run.LOTUS)
            s, info = run.run_train(data, epochs, arm != "untraced", tmp, run.NATIVE)
            secs[arm].append(s)
            cpus[arm].append(info["cpu_s"] / samples)
            if arm != "untraced":
                calls[arm].append(info.get("native_calls_unended", 0))
        print("repeat", i, {a: round(v[-1], 3) for a, v in secs.items()}, flush=True)
    u, c = statistics.median(secs["untraced"]), statistics.median(cpus["untraced"])
    for arm in binaries:
        print(f"{arm}: samples/s slowdown {100 * (statistics.median(secs[arm]) / u - 1):+.1f} % "
              f"({run.pairs(secs[arm], secs['untraced'])}); CPU/sample ratio {statistics.median(cpus[arm]) / c:.3f} "
              f"({run.pairs(cpus[arm], cpus['untraced'])}); calls unended per run {calls[arm]}", flush=True)
