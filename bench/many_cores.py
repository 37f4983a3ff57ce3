#!/usr/bin/env python3
"""The overhead rows of bench/run.py on a machine with many cores, where the 2-core machines hide what the
tracer takes: the example with more DataLoader workers (8 by default) and a larger dataset, untraced, traced in
the default mode and with --native-map --counters, interleaved; the BPF time per sample (where bpftool runs);
the tracer's CPU while the job runs; an unrelated process's slowdown beside the tracer; the same slowdowns inside
one job, lotus-bpf attached and detached between epochs (bench/alternate.py); each mode's cost account (bench/run.py:
the traps at their bare cost, the BPF time and the tracer's CPU per sample, over the job's CPU per sample).

It prints each repeat as it ends and stops taking new repeats at --budget seconds, so a machine lent for a few
minutes still returns every figure it measured; --rows picks the parts (pairs, bpf, tracer, unrelated, beside_job,
alternate; beside_job: an unrelated process beside the example while it runs, traced or not).
Needs root (BPF) and lotus-bpf at build/lotus-bpf. On a machine that cannot build it: a stripped copy of the binary with
libbpf.so.1, libelf.so.1 and libfmt.so.9 (and bpftool with libcap.so.2 for the BPF rows) on LD_LIBRARY_PATH.
--default-only: lotus-bpf's default mode alone (no --native-map --counters rows: where that mode does not load,
or time is short). --calls-scale F: the calls of the trap measure and of the unrelated process, times F (a slow
machine: bench/kernels.sh runs QEMU without KVM at 0.05).
Usage: bench/many_cores.py [--python PY] [--workers 8] [--images 2048] [--repeats 10] [--budget SECONDS] [--calls-scale F]
                           [--default-only]
                           [--rows pairs,bpf,tracer,account,unrelated,beside_job,alternate]
(account needs pairs, bpf and tracer in the same run.)"""
import argparse
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time

import alternate
import floor
import run

UNRELATED = {"functions": 2_000_000, "objects": 2_000_000, "syscalls": 500_000, "switches": 100_000, "sockets": 300_000}


T0 = time.monotonic()


def say(text):
    """A line, after the seconds since the start (what each part took, to size a short lease)."""
    print(f"[{time.monotonic() - T0:4.0f} s] {text}", flush=True)


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
    ap.add_argument("--rows", default="pairs,bpf,tracer,account,unrelated,beside_job,alternate",
                    help="the parts to measure, in this order")
    ap.add_argument("--extra-mode", action="append", default=[],
                    help="one more traced mode in the pairs: lotus-bpf's options, e.g. '--native-map --sample-freq 99'")
    ap.add_argument("--calls-scale", type=float, default=1.0,
                    help="the calls of the trap measure and of the unrelated process, times this (a slow machine)")
    ap.add_argument("--default-only", action="store_true", help="the default mode alone (no --native-map --counters)")
    args = ap.parse_args()
    traced = [("default", ())] + ([] if args.default_only else [("--native-map --counters", run.NATIVE)])
    unrelated_calls = {kind: max(1000, int(n * args.calls_scale)) for kind, n in UNRELATED.items()}
    rows_wanted = set(args.rows.split(","))
    kinds = {"pairs", "bpf", "tracer", "account", "unrelated", "beside_job", "alternate"}
    if not rows_wanted <= kinds:
        sys.exit(f"bench: --rows takes {', '.join(sorted(kinds))} (got {args.rows})")
    if os.geteuid() != 0:
        sys.exit("bench: needs root (BPF)")
    start = time.monotonic()
    left = lambda: args.budget - (time.monotonic() - start)
    run.PY, run.WORKERS, alternate.PY = args.python, args.workers, args.python
    say(f"many_cores: {os.cpu_count()} CPUs, {args.workers} workers, {args.images} images x {args.epochs} epochs, "
        f"{args.python}")
    data = alternate.example_data(args.images, args.python)
    samples = args.images * args.epochs
    rows = []
    bpf_costs, tracer_us = {}, {}  # by mode: for the account
    with tempfile.TemporaryDirectory() as tmp:
        run.run_train(data, 1, False, tmp)  # the page cache
        base, base_cpu = [], []
        modes = {name: (extra, [], []) for name, extra in traced}
        modes.update({m: (shlex.split(m), [], []) for m in args.extra_mode})
        holds = {name: [] for name in modes}
        # what the pairs may take of the budget: the other rows need the rest
        share = 0.9 if rows_wanted == {"pairs"} else 0.45
        for i in range(args.repeats if "pairs" in rows_wanted else 0):
            if i >= 3 and left() < (1 - share) * args.budget:
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
                held = info.get("held_children", {})
                if held.get("count"):
                    holds[name].append(held)
                    line += (f" (workers held {held['total_ms'] / held['count']:.1f} ms each, at most "
                             f"{held['max_ms']:.1f}, attaching {held.get('attach_ms', 0) / held['count']:.1f})")
            say(line)
        if base:
            rows.append(f"samples/s untraced: {samples / statistics.median(base):.0f} (median of {len(base)})")
            rows += [ratio_row(name, runs, base, cpu, base_cpu) for name, (_, runs, cpu) in modes.items()]
            say(rows[-2])
            say(rows[-1])
        for name, hs in holds.items():
            if not hs:
                continue
            rows.append(f"DataLoader worker held at its fork, {name}: "
                        f"{statistics.median(h['total_ms'] / h['count'] for h in hs):.1f} ms (median of "
                        f"{len(hs)} runs), at most {max(h['max_ms'] for h in hs):.1f} ms; of a hold, attaching its "
                        f"probes {statistics.median(h.get('attach_ms', 0) / h['count'] for h in hs):.1f} ms")
            say(rows[-1])
        if "bpf" in rows_wanted and shutil.which("bpftool") and left() > 0.35 * args.budget:
            for name, extra in traced:
                costs = bpf_costs[name] = [run.bpf_cost(data, args.images, extra) for _ in range(2)]
                rows.append(f"BPF per sample, {name}: {run.cost_total(costs):.1f} us (epochs 2-3, median of 2; "
                            f"{run.cost_note(costs[-1])})")
                say(rows[-1])
        if "tracer" in rows_wanted and left() > 0.25 * args.budget:
            cpu_ms = 1000 * statistics.median(base_cpu) if base_cpu else None
            for name, extra in traced:
                us = [run.tracer_run_cpu(data, args.images, extra) for _ in range(2)]
                tracer_us[name] = statistics.median(us)
                share_note = (f"; {statistics.median(us) / 10 / cpu_ms:.2f} % of the job's {cpu_ms:.2f} ms of CPU "
                              "per sample untraced" if cpu_ms else "")
                rows.append(f"tracer CPU per sample while the job runs, {name}: {statistics.median(us):.0f} us "
                            f"({min(us):.0f}-{max(us):.0f}{share_note})")
                say(rows[-1])
        if "account" in rows_wanted and base_cpu and bpf_costs and tracer_us and left() > 60:
            slots = floor.probe_points(run.LOTUS, args.python, "slots")
            with floor.BareUprobe(slots) as probe:  # the Python probes' entries per sample, epochs 2-3
                hits = run.epoch_snapshots(run.train_cmd(data, 3), lambda _: probe.hits(), "run under bare uprobes")
            slot_hits = (hits[2] - hits[0]) / (2 * args.images)
            per_object_call = floor.call_costs(args.python, run.LOTUS, 5, "objects", slots, returns=True,
                                               n=max(1000, int(1_000_000 * args.calls_scale)))
            cpu_ms = 1000 * statistics.median(base_cpu)
            rows.append(f"kernel uprobe trap per call of an object: {per_object_call['bare']:.0f} ns, with its return "
                        f"{per_object_call['bare-return']:.0f} ns (bare tracefs probes, median of 5); Python-probe "
                        f"calls per sample {slot_hits:.1f}")
            say(rows[-1])
            for name in bpf_costs.keys() & tracer_us.keys():
                total, share, parts = run.mode_account(bpf_costs[name], slot_hits, per_object_call, tracer_us[name],
                                                       cpu_ms)
                rows.append(f"cost account, {name}: {share:.2f} % of the job's {cpu_ms:.2f} ms of CPU per sample "
                            f"untraced ({parts}; a lower bound of the slowdown)")
                say(rows[-1])
        if "unrelated" in rows_wanted and left() < 20:
            rows.append("unrelated process: not measured (out of time)")
        elif "unrelated" in rows_wanted:
            for mode, extra in ((f" {name}" if extra else "", extra) for name, extra in traced):
                for kind, (a, b, p) in run.unrelated(5, unrelated_calls, extra=extra).items():
                    n = unrelated_calls[kind]
                    rows.append(f"unrelated process beside the tracer{mode}, {kind}: {100 * (b / a - 1):+.1f} % ({a:.3f} "
                                f"s alone, {b:.3f} s beside, {(b - a) * 1e9 / n:+.0f} ns a call, {p}, 5 interleaved)")
                    say(rows[-1])
        if "beside_job" in rows_wanted and left() > 60:
            for kind, (wa, wb, pw, ca, cb, pc) in run.unrelated_beside_job(5, run.BESIDE_JOB, data).items():
                rows.append(f"unrelated process beside the example traced, {kind}: wall {100 * (wb / wa - 1):+.1f} % "
                            f"({wa:.3f} s, {wb:.3f} s, {pw}), its CPU {100 * (cb / ca - 1):+.1f} % ({pc}), 5 interleaved")
                say(rows[-1])
        if "alternate" in rows_wanted and left() > 60:
            arms = {"untraced": None, "default": (run.LOTUS, [], None)}
            if not args.default_only:
                arms["native"] = (run.LOTUS, run.NATIVE, None)
            got = alternate.alternate(data, arms, args.repeats, args.workers,
                                      deadline=time.monotonic() + left() - 45)
            for arm, cycles in got.items():
                name, value, note = run.alternate_row(arm, cycles)
                rows.append(f"{name}: {value} ({note})")
                say(rows[-1])
    say("many_cores summary")
    for row in rows:
        print("  " + row, flush=True)


if __name__ == "__main__":
    main()
