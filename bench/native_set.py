#!/usr/bin/env python3
"""Issue 62, item 2: --native-map --counters with the built-in set of now (copy_ unprobed, named through the
stack: --sample-unwind cfi) against the set before it (copy_ probed, the leaf alone), and untraced: N interleaved
runs of the example (512 images, 2 epochs) for samples/s and CPU per sample, then each arm's cost account
(bench/run.py's mode_account, 3 runs each, interleaved). As root. Usage: bench/native_set.py [N] [--old-build BIN]
With --old-build, "old" is that binary (an earlier build) with the same options as "new" (this build): two builds'
native maps side by side (issue 79 item 1: return-instruction probes against the uretprobes before them)."""
import os, statistics, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run, alternate
args = sys.argv[1:]
old_build = None
if "--old-build" in args:
    i = args.index("--old-build")
    old_build = os.path.abspath(args[i + 1])
    del args[i:i + 2]
images, epochs, repeats = 512, 2, int(args[0]) if args else 10
OLD = run.NATIVE + ["--native", "libtorch_cpu.so*:at::_ops::copy_::call", "--sample-stack", "1"]
arms = {"new": run.NATIVE, "old": run.NATIVE if old_build else OLD}
binaries = {"new": run.LOTUS, "old": old_build or run.LOTUS}


def arm_binary(arm):
    """run.py's functions start run.LOTUS: the arm's build."""
    run.LOTUS = binaries.get(arm, binaries["new"])
    return arm


data = alternate.example_data(images, run.PY)
samples = images * epochs
with tempfile.TemporaryDirectory() as tmp:
    run.run_train(data, 1, False, tmp)
    secs = {"untraced": [], "new": [], "old": []}
    cpus = {"untraced": [], "new": [], "old": []}
    for i in range(repeats):
        for arm in ("untraced", "new", "old"):
            s, info = run.run_train(data, epochs, arm_binary(arm) != "untraced", tmp, arms.get(arm, []))
            secs[arm].append(s)
            cpus[arm].append(info["cpu_s"] / samples)
        print("repeat", i, {a: round(v[-1], 3) for a, v in secs.items()}, flush=True)
    u = statistics.median(secs["untraced"])
    for arm in ("new", "old"):
        m = statistics.median(secs[arm])
        print(f"{arm}: samples/s slowdown {100 * (m / u - 1):+.1f} % ({run.pairs(secs[arm], secs['untraced'])}); "
              f"CPU/sample ratio {statistics.median(cpus[arm]) / statistics.median(cpus['untraced']):.3f} "
              f"({run.pairs(cpus[arm], cpus['untraced'])})", flush=True)
    cpu_ms = 1000 * statistics.median(cpus["untraced"])
    arm_binary("new")  # (the trap measures: this build's probe points)
    slot_hits, per_object_call = run.trap_prices(data, images)
    costs, rc = {"new": [], "old": []}, {"new": [], "old": []}
    for _ in range(3):  # interleaved, as the timed runs: the machine's drift falls on both arms
        for arm in ("new", "old"):
            costs[arm].append(run.bpf_cost(data, images, arms[arm_binary(arm)]))
            rc[arm].append(run.tracer_run_cpu(data, images, arms[arm]))
    for arm in ("new", "old"):
        acc = run.mode_account(costs[arm], slot_hits, per_object_call, statistics.median(rc[arm]), cpu_ms)
        print(arm, f"account {acc[1]:.2f} %", acc[2], "| native_call runs/sample",
              run.runs_of(costs[arm], "native_call"), "| on_sample", run.runs_of(costs[arm], "on_sample"),
              "| tracer us/sample", [round(x, 1) for x in rc[arm]], "| cpu_ms/sample", round(cpu_ms, 3), flush=True)
        print("  costs", costs[arm][1], flush=True)
