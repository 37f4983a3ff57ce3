#!/usr/bin/env python3
"""The cost account of this build, default mode and `--native-map --counters default`, side by side (bench/run.py's
mode_account): the example (512 images), its untraced CPU per sample (N runs), then per mode N runs each of the
BPF programs' time (bpf_stats) and of the tracer's CPU in steady state, interleaved so that the machine's drift
falls on both; a trap priced by a loop of object calls under bare uprobes on the same probe points
(bench/floor.py). The tracer's CPU by parts too, in the same interleaved rounds: each mode without PSS walks
(--pss-interval 0) and without any resource readings (--resources-interval 0), whose difference from the mode
is what the readings cost it (the first PSS walk, 2 s after the start, falls inside the measured epochs or
before them: runs differ by it).
As root. Usage: bench/account.py [N]   (N: runs of each measure, default 3; ~1 minute a round on 2 cores)"""
import os, statistics, sys, tempfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run, alternate

repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
images = 512
modes = {"default": [], "native": run.NATIVE}
data = alternate.example_data(images, run.PY)
with tempfile.TemporaryDirectory() as tmp:
    run.run_train(data, 1, False, tmp)  # (the dataset in the page cache)
    cpu = [run.run_train(data, 2, False, tmp)[1]["cpu_s"] / (2 * images) for _ in range(repeats)]
cpu_ms = 1000 * statistics.median(cpu)
slot_hits, per_object_call = run.trap_prices(data, images, repeats)
costs = {m: [] for m in modes}
tracer = {m: [] for m in modes}
parts = {"no PSS": ["--pss-interval", "0"], "no readings": ["--resources-interval", "0"]}
tracer_parts = {(m, p): [] for m in modes for p in parts}
for _ in range(repeats):
    for mode, extra in modes.items():
        costs[mode].append(run.bpf_cost(data, images, extra))
        tracer[mode].append(run.tracer_run_cpu(data, images, extra))
        for part, off in parts.items():
            tracer_parts[mode, part].append(run.tracer_run_cpu(data, images, [*extra, *off]))
print(f"untraced CPU per sample {cpu_ms:.2f} ms ({', '.join(f'{1000 * c:.2f}' for c in cpu)}); "
      f"Python entry traps a sample {slot_hits:.2f}; a bare trap {per_object_call['bare']:.0f} ns, "
      f"a return {per_object_call['bare-return'] - per_object_call['bare']:.0f} ns more")
for mode in modes:
    acc = run.mode_account(costs[mode], slot_hits, per_object_call, statistics.median(tracer[mode]), cpu_ms)
    print(f"{mode}: account {acc[1]:.2f} % ({acc[2]}); tracer us a sample {[round(t, 1) for t in tracer[mode]]}; "
          f"BPF: {run.cost_note(costs[mode][len(costs[mode]) // 2])}", flush=True)
    print(f"  {mode}'s tracer by parts, us a sample (medians): all {statistics.median(tracer[mode]):.1f}; " +
          "; ".join(f"{part} {statistics.median(t):.1f} {[round(x, 1) for x in t]}"
                    for (m, part), t in tracer_parts.items() if m == mode), flush=True)
