#!/usr/bin/env python3
"""lotus-bpf benchmark. Every figure is measured in this run; slowdowns are ratios of medians of interleaved
repeats (untraced, traced, untraced, traced, ...), never absolute times compared across runs."""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import alternate
import floor

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
LOTUS = os.path.join(ROOT, "build", "lotus-bpf")
PY = "/usr/bin/python3"
TRAIN = os.path.join(ROOT, "examples", "train.py")
PURE = os.path.join(ROOT, "tests", "integration", "workloads", "pure_pipeline.py")


def epoch_seconds(output):
    return sum(float(m) for m in re.findall(r"epoch \d+ done in ([0-9.]+) s", output))


def epoch_cpu(output):
    """CPU seconds of the epochs: the training process's and its (reaped) DataLoader workers'."""
    return sum(float(m) for m in re.findall(r"epoch \d+ done in [0-9.]+ s, cpu ([0-9.]+) s", output))


NATIVE = ["--native-map", "--counters", "default"]  # native map + counters: the issue-4 mode
MORE_EPOCHS = 4  # steady-state records and bytes per sample: the growth over this many more epochs
ALT_CYCLES = 20  # cycles of bench/alternate.py (each: an untraced epoch, and two per traced arm)


PROFILED = os.path.join(ROOT, "bench", "profiled_train.py")
WORKERS = 2  # DataLoader workers of the example (bench/many_cores.py sets more)


def train_cmd(data, epochs, script=TRAIN):
    return [PY, script, data, "--epochs", str(epochs), "--workers", str(WORKERS), "--batch-size", "32"]


def epoch_snapshots(cmd, snap, what, env=None):
    """Runs cmd (the example, maybe traced), calling snap(pid of cmd) as each epoch ends; the 3 or more results."""
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           env={**os.environ, **(env or {})})
    snaps = [snap(job.pid) for line in job.stdout if re.search(r"epoch \d+ done", line)]
    if job.wait() != 0 or len(snaps) < 3:
        raise RuntimeError(f"bench: {what} failed ({' '.join(cmd)})")
    return snaps


def run_train(data, epochs, traced, tmp, extra=(), script=TRAIN, env=None):
    cmd = train_cmd(data, epochs, script)
    if traced:
        out = os.path.join(tmp, "t.json")
        cmd = [LOTUS, "-q", "-o", out, "--summary-json", out + ".summary", *extra] + ["--"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, **(env or {})})
    info = {"cpu_s": epoch_cpu(r.stdout)}
    if traced:
        with open(out) as f:
            info.update(json.load(f)["otherData"])
        info["trace_bytes"] = os.path.getsize(out)
    return epoch_seconds(r.stdout), info


LOTUS_PROGS = {"py_call", "py_entry", "py_slot", "py_slot_entry", "py_return", "on_switch", "on_write", "on_getppid",
               "on_openat", "on_read_done", "on_sys_enter", "on_sys_exit", "native_call",
               "on_sample", "on_fork", "on_exec", "on_exit", "libc_call"}
UPROBE_PROGS = {"py_call", "py_entry", "py_slot", "py_slot_entry", "py_return", "native_call", "libc_call"}  # each run a trap of the traced thread
EVALUATOR = {"LOTUS_EVALUATOR_PROBE": "1"}  # Python calls probed at the evaluator (the default before issue 20)


def prog_stats(_pid=None):
    """The kernel's run count and run time of every loaded BPF program (needs kernel.bpf_stats_enabled=1)."""
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True, check=True).stdout
    return {p["id"]: (p.get("name", ""), p.get("run_cnt", 0), p.get("run_time_ns", 0)) for p in json.loads(out)}


def bpf_cost(data, images, extra=(), env=None):
    """BPF time per sample in steady state, from the kernel's own accounting (bpf_stats) of the tracer's programs
    over epochs 2 and 3 of a 3-epoch run: {program: (runs per sample, ns per run)}. It counts only the programs'
    own time, so a change to them shows here when the slowdown ratio is lost in noise; it still drifts by ~10 %
    with the machine's load (cache misses), so compare builds side by side."""
    stats = "/proc/sys/kernel/bpf_stats_enabled"
    with open(stats) as f:
        was = f.read().strip()
    with open(stats, "w") as f:
        f.write("1")
    try:
        snaps = epoch_snapshots([LOTUS, "-q", "-o", os.devnull, *extra, "--", *train_cmd(data, 3)], prog_stats,
                                "traced run for BPF accounting", env)
    finally:
        with open(stats, "w") as f:
            f.write(was)
    a, b = snaps[0], snaps[2]
    cost = {}
    for pid, (name, cnt, ns) in b.items():
        if name in LOTUS_PROGS and pid in a and cnt > a[pid][1]:
            runs, took = cnt - a[pid][1], ns - a[pid][2]
            n0, r0 = cost.get(name, (0, 0))
            cost[name] = (n0 + runs, r0 + took)
    return {name: (runs / (2 * images), took / runs) for name, (runs, took) in cost.items()}


def task_cpu_ns(pid):
    """CPU time of every thread of a process, in ns (schedstat: exact, where /proc/PID/stat counts 10 ms ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # a thread that ended meanwhile (the tracer's link closers: microseconds)
            pass
    return total


def tracer_run_cpu(data, images, extra=()):
    """The tracer's CPU per sample (us) over epochs 2-4 of a 4-epoch run: what it takes from the machine while the
    job runs, without its start (attach, symbol tables) and its end (writing the outputs)."""
    snaps = epoch_snapshots([LOTUS, "-q", "-o", os.devnull, *extra, "--", *train_cmd(data, 4)], task_cpu_ns,
                            "traced run for the tracer's CPU")
    return (snaps[3] - snaps[0]) / 1000 / (3 * images)


def pairs(xs, base):
    """The spread of the repeats' own ratios (each run over the untraced run just before it): the noise."""
    r = sorted(x / b for x, b in zip(xs, base))
    return f"pairs {r[0]:.3f}-{r[-1]:.3f}"


def cost_total(costs):
    """Median over runs of the BPF microseconds per sample."""
    return statistics.median(sum(runs * ns for runs, ns in c.values()) / 1000 for c in costs)


def runs_of(costs, *progs):
    """Median over runs of the programs' runs per sample (each run of a uprobe program is one trap)."""
    return statistics.median(sum(c.get(p, (0, 0))[0] for p in progs) for c in costs)


def trap_prices(data, images, repeats=3):
    """What a mode's account prices its traps with (mode_account's slot_hits and per_object_call): the Python
    probes' entry traps a sample (bare uprobes on this build's probe points, epochs 2-3 of the example) and the
    bare trap's cost (floor.call_costs, an entry and a return, `repeats` interleaved runs)."""
    slots = floor.probe_points(LOTUS, PY, "slots")
    with floor.BareUprobe(slots) as probe:
        hits = epoch_snapshots(train_cmd(data, 3), lambda _: probe.hits(), "bare")
    return (hits[2] - hits[0]) / (2 * images), floor.call_costs(PY, LOTUS, repeats, "objects", slots, returns=True)


def account(entries, returns, trap_ns, return_ns, bpf_us, tracer_us, cpu_ms):
    """The measured parts of a sample's cost (us) and their sum as a share of the job's CPU per sample untraced:
    the traps at their bare cost, the BPF programs' own time, the tracer's CPU while the job runs. A return's cost
    is a difference of two noisy timings: where it does not come out above 0 it is counted as 0 (and said), which
    keeps the sum a lower bound."""
    unresolved = return_ns <= 0
    return_ns = max(0.0, return_ns)
    traps = (entries * trap_ns + returns * return_ns) / 1000
    total = traps + bpf_us + tracer_us
    return total, 100 * total / 1000 / cpu_ms, (f"{traps:.1f} us of traps ({entries:.1f} entries x {trap_ns:.0f} ns, "
                                                 f"{returns:.1f} returns x {return_ns:.0f} ns"
                                                 f"{': not resolved from the noise this run' if unresolved else ''}) + "
                                                 f"{bpf_us:.1f} us of BPF + {tracer_us:.0f} us of the tracer = {total:.0f} us")


def mode_account(costs, slot_hits, per_object_call, tracer_us, cpu_ms):
    """A mode's cost account (account()), its traps counted from its programs' runs (bpf_cost): the Python
    probes' entries (slot_hits, from bare uprobes) and the other runs of the Python programs (their returns), libc's
    wrappers' and the native probes' entries, the native probes' returns (native_call runs twice a call of a traced
    process: at its entry, and at the return instruction it leaves by, a uprobe single-stepped out of line, taken
    here at a uretprobe's price)."""
    trap_ns = per_object_call["bare"]
    return_ns = per_object_call["bare-return"] - trap_ns
    session = runs_of(costs, "native_call") / 2
    entries = slot_hits + runs_of(costs, "libc_call") + session
    returns = (max(0.0, runs_of(costs, "py_slot", "py_slot_entry", "py_return") - slot_hits)
               + session)
    return account(entries, returns, trap_ns, return_ns, cost_total(costs), tracer_us, cpu_ms)


def cost_note(cost):
    top = sorted(cost.items(), key=lambda kv: -kv[1][0] * kv[1][1])[:3]
    return "; ".join(f"{name} {runs:.1f} runs x {ns:.0f} ns" for name, (runs, ns) in top)


def alternate_row(arm, cycles):
    """A row of bench/alternate.py's results: the arm's median slowdown and its cycles' spread."""
    m, lo, hi, cm, clo, chi, w = alternate.summary(cycles)
    how = ("no tracer attached, the same cycles: the method's own noise" if arm == "untraced" else
           f"lotus-bpf --pid {' '.join(NATIVE) + ' ' if arm == 'native' else ''}attached for two epochs, detached "
           f"for one; the second traced epoch over the untraced one of its cycle")
    return (f"epoch attached over detached, {arm}", f"{100 * (m - 1):+.1f} %",
            f"bench/alternate.py, one job: {how}, median of {len(cycles)} cycles {lo:.3f}-{hi:.3f}; CPU "
            f"{100 * (cm - 1):+.1f} % ({clo:.3f}-{chi:.3f}); the first epoch after attaching {100 * (w - 1):+.1f} %")


def attach_latency(tmp, extra=(), env=None):
    """Start to 'probes live' when attaching to a process that has torch (libtorch_cpu) loaded, and SIGTERM to
    the tracer's exit (drain, detach every probe, write the trace)."""
    job = subprocess.Popen([PY, "-c", "import torch, time; print('ready', flush=True); time.sleep(60)"],
                           stdout=subprocess.PIPE, text=True)
    try:
        job.stdout.readline()
        t0 = time.monotonic()
        tracer = subprocess.Popen([LOTUS, "-q", "-o", os.path.join(tmp, "a.json"), "--pid", str(job.pid), *extra],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, **(env or {})})
        while "tracing PID" not in tracer.stderr.readline():
            pass
        latency = time.monotonic() - t0
        t1 = time.monotonic()
        tracer.terminate()
        tracer.wait()
        return latency, time.monotonic() - t1
    finally:
        job.kill()
        job.wait()


FLOOD = os.path.join(ROOT, "bench", "flood.py")


def flood(tmp, k, seconds, stall=None):
    """Capture capacity: k processes calling a two-op pipeline in a tight loop (6 records per call). Returns
    (records delivered, lost, pipeline calls made, wall seconds, tracer CPU seconds). stall=(at, length): the tracer is stopped (SIGSTOP)
    for `length` s after `at` s, as a consumer that falls behind: the ring buffer fills and records are lost."""
    out, rec = os.path.join(tmp, "f.json"), os.path.join(tmp, "f.lbt")
    t0 = time.monotonic()
    tracer = subprocess.Popen([LOTUS, "-q", "-o", out, "--record", rec, "--pipeline", "Pipeline", "--", PY, FLOOD,
                               str(k), str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if stall:
        time.sleep(stall[0])
        tracer.send_signal(signal.SIGSTOP)
        time.sleep(stall[1])
        tracer.send_signal(signal.SIGCONT)
    calls = int(tracer.communicate()[0].split()[0])
    wall = time.monotonic() - t0
    with open(out) as f:
        d = json.load(f)["otherData"]
    return d["events"], d["lost_events"], calls, wall, d["tracer_cpu_ms"] / 1000, d["events_delivered"]


def export_rate(tmp):
    """Export throughput on the last flood's record file (record -> Chrome JSON), events/s."""
    rec = os.path.join(tmp, "f.lbt")
    t0 = time.monotonic()
    r = subprocess.run([LOTUS, "export", rec, "-o", os.path.join(tmp, "fe.json")], capture_output=True, check=True)
    took = time.monotonic() - t0
    with open(os.path.join(tmp, "f.json")) as f:
        return json.load(f)["otherData"]["events"] / took


# An unrelated process's calls beside the tracer: Python calls (functions, objects), syscalls lotus-bpf does not
# watch (os.getpid: ~0.14 us each here), context switches (pipe round trips, ~15 us each here) and socket calls
# (a loopback UDP send and receive, ~5 us here).
UNRELATED = {"functions": 2_000_000, "objects": 2_000_000, "syscalls": 500_000, "switches": 100_000,
             "sockets": 300_000}
# The same beside the example while it runs (unrelated_beside_job): call-heavy Python, as issue 20 names it.
BESIDE_JOB = {"functions": 8_000_000, "objects": 8_000_000}


def unrelated(repeats, kinds, env=None, extra=()):
    """An unrelated process running the same interpreter (bench/calls.py: n calls of each kind in `kinds`, a dict
    kind -> n) while lotus-bpf traces another job (an idle one that imported torch), against the same with
    nothing traced, interleaved: per repeat each kind alone, the tracer attached, each kind beside it, the tracer
    stopped (one attach a repeat for all kinds). env: the tracer's extra environment; extra: its options. Per kind: (median seconds
    alone, median seconds beside the tracer, their pairs)."""
    job = subprocess.Popen([PY, "-c", "import torch, time; print('ready', flush=True); time.sleep(900)"],
                           stdout=subprocess.PIPE, text=True)
    alone, beside = {kind: [] for kind in kinds}, {kind: [] for kind in kinds}
    try:
        job.stdout.readline()
        for _ in range(repeats):
            for kind, n in kinds.items():
                alone[kind].append(floor.call_seconds(PY, n, kind, "untraced", LOTUS, []))
            tracer = subprocess.Popen([LOTUS, "-q", "-o", os.devnull, *extra, "--pid", str(job.pid)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, **(env or {})})
            while "tracing PID" not in tracer.stderr.readline():
                pass
            for kind, n in kinds.items():
                beside[kind].append(floor.call_seconds(PY, n, kind, "untraced", LOTUS, []))
            tracer.terminate()
            tracer.wait()
    finally:
        job.kill()
        job.wait()
    return {kind: (statistics.median(alone[kind]), statistics.median(beside[kind]), pairs(beside[kind], alone[kind]))
            for kind in kinds}


def unrelated_beside_job(repeats, kinds, data):
    """An unrelated process of the same interpreter (bench/calls.py) beside the example while it runs, the example
    traced (lotus-bpf --pid, default mode) or not, interleaved in one job of many epochs: per repeat each kind with
    no tracer and each kind with the tracer attached (then stopped), in turn first. What tracing a busy job costs the
    rest of the machine: the tracer's CPU taken from CPUs others share, the programs every process runs, the job's
    own extra CPU; the rows above have an idle job. Both CPUs are busy with the job here, so the wall time is
    mostly the share of a CPU the loop gets; its CPU time is what the loop itself cost. Per kind: medians (wall
    alone, wall beside, CPU alone, CPU beside), and the pairs of each."""
    job = subprocess.Popen([PY, TRAIN, data, "--epochs", "100000", "--workers", str(WORKERS), "--batch-size", "32"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    runs = {kind: {"wall": ([], []), "cpu": ([], [])} for kind in kinds}
    try:
        while "epoch 0 done" not in job.stdout.readline():  # its workers up and past their first batches
            pass
        for rep in range(repeats):
            for traced in (False, True) if rep % 2 == 0 else (True, False):  # neither arm always the later one
                tracer = None
                if traced:
                    tracer = subprocess.Popen([LOTUS, "-q", "-o", os.devnull, "--pid", str(job.pid)],
                                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                    while "tracing PID" not in tracer.stderr.readline():
                        pass
                for kind, n in kinds.items():
                    wall, cpu = floor.call_times(PY, n, kind, "untraced", LOTUS, [])
                    runs[kind]["wall"][traced].append(wall)
                    runs[kind]["cpu"][traced].append(cpu)
                if tracer:
                    tracer.terminate()
                    tracer.wait()
    finally:
        job.kill()
        job.wait()
    out = {}
    for kind, r in runs.items():
        (wa, wb), (ca, cb) = r["wall"], r["cpu"]
        out[kind] = (statistics.median(wa), statistics.median(wb), pairs(wb, wa),
                     statistics.median(ca), statistics.median(cb), pairs(cb, ca))
    return out


def read_costs(repeats, n=500_000):
    """ns a traced process's reads cost over untraced, interleaved: a file read (bench/calls.py filereads, libc's
    read: not probed), the same with libc's read probed (LOTUS_LIBC_READ=1, before 3411edf) and os.read
    (bench/calls.py reads: the probe where pipes' reads are seen, a read too short for a pickle)."""
    modes = {"file untraced": ("filereads", "untraced", {}), "file traced": ("filereads", "traced", {}),
             "file libc": ("filereads", "traced", {"LOTUS_LIBC_READ": "1"}),
             "os untraced": ("reads", "untraced", {}), "os traced": ("reads", "traced", {})}
    runs = {mode: [] for mode in modes}
    for _ in range(repeats):
        for mode, (kind, how, env) in modes.items():
            runs[mode].append(floor.call_seconds(PY, n, kind, how, LOTUS, [], env))
    med = {mode: statistics.median(v) for mode, v in runs.items()}
    ns = lambda mode, base: (med[mode] - med[base]) * 1e9 / n
    return ns("file traced", "file untraced"), ns("file libc", "file untraced"), ns("os traced", "os untraced")


def unrelated_bare_syscalls(repeats, n):
    """The syscall loop (bench/calls.py syscalls) with two syscall events enabled and no tracer, against the same
    with none, interleaved: the floor of any syscall tracer on other processes (floor.BareSyscallEvents)."""
    alone, beside = [], []
    for _ in range(repeats):
        alone.append(floor.call_seconds(PY, n, "syscalls", "untraced", LOTUS, []))
        with floor.BareSyscallEvents():
            beside.append(floor.call_seconds(PY, n, "syscalls", "untraced", LOTUS, []))
    return statistics.median(alone), statistics.median(beside), pairs(beside, alone)


PY312 = "/root/.pyenv/versions/3.12.1/bin/python3.12"
PY311 = "/root/.pyenv/versions/3.11.7/bin/python3.11"


def model_forward(repeats, n=10):
    """bench/forward.py (ResNet-50's forward, n of them a timing, after a pass over a DataLoader with 2 workers)
    untraced, launched under lotus-bpf (--trainer-calls auto: the default) and under lotus-bpf --trainer-calls on,
    in turn: per run (module calls a forward, ms a forward); the untraced runs, the default ones, the `on` ones."""
    def run(traced, extra=()):
        cmd = [PY, os.path.join(ROOT, "bench", "forward.py"), str(n), "--loader-workers", "2"]
        if traced:
            cmd = [LOTUS, "-q", "-o", os.devnull, *extra, "--", *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        m = re.search(r"module_calls (\d+) ms_per_forward ([0-9.]+)", out)
        if not m:
            raise RuntimeError(f"bench: forward.py printed no timing ({' '.join(cmd)})")
        return int(m.group(1)), float(m.group(2))
    untraced, traced, probed = [], [], []
    for _ in range(repeats):
        untraced.append(run(False))
        traced.append(run(True))
        probed.append(run(True, ["--trainer-calls", "on"]))
    return untraced, traced, probed


def forward_cost(extra=(), n=40):
    """What BPF runs in a traced forward (bench/forward.py --marks, ResNet-50 after a pass over a DataLoader with
    2 workers), from bpf_stats over its 5 x n timed forwards: {program: (runs a forward, ns a run)}. Each run of
    an entry program is a trap; returns trap too (uprobe sessions: the same program)."""
    stats = "/proc/sys/kernel/bpf_stats_enabled"
    with open(stats) as f:
        was = f.read().strip()
    with open(stats, "w") as f:
        f.write("1")
    cmd = [LOTUS, "-q", "-o", os.devnull, *extra, "--", PY, os.path.join(ROOT, "bench", "forward.py"), str(n),
           "--loader-workers", "2", "--marks"]
    try:
        job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        snaps = [prog_stats() for line in job.stdout if line.startswith("mark")]
        if job.wait() != 0 or len(snaps) != 2:
            raise RuntimeError(f"bench: forward.py --marks failed ({' '.join(cmd)})")
    finally:
        with open(stats, "w") as f:
            f.write(was)
    a, b = snaps
    cost = {}
    for pid, (name, cnt, ns) in b.items():
        if name in LOTUS_PROGS and pid in a and cnt > a[pid][1]:
            runs, took = cnt - a[pid][1], ns - a[pid][2]
            n0, r0 = cost.get(name, (0, 0))
            cost[name] = (n0 + runs, r0 + took)
    return {name: (runs / (5 * n), took / runs) for name, (runs, took) in cost.items()}


def pure_wall(mode, n, py=PY312):
    """Wall time of the pure-Python pipeline workload: untraced, default, or --all-calls."""
    cmd = [py, PURE, "--plain", str(n)]
    if mode != "untraced":
        extra = ["--all-calls"] if mode == "all-calls" else []
        cmd = [LOTUS, "-q", "-o", "/tmp/lotus-bench-pure.json", "--pipeline",
               "Pipeline"] + extra + ["--"] + cmd
    t0 = time.monotonic()
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    return time.monotonic() - t0


def peak_rss_kb(tmp, data, epochs):
    """The tracer's own VmHWM (in the trace's otherData) over a longer run, which is also recorded: the record
    file's size."""
    out, rec = os.path.join(tmp, "r.json"), os.path.join(tmp, "r.lbt")
    subprocess.run([LOTUS, "-q", "-o", out, "--record", rec, "--", PY, TRAIN, data, "--epochs", str(epochs)],
                   capture_output=True, text=True, check=True)
    with open(out) as f:
        other = json.load(f)["otherData"]
    return other["tracer_peak_rss_kb"], os.path.getsize(rec)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--images", type=int, default=512)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: needs root (BPF)")
    data = alternate.example_data(args.images, PY)
    samples = args.images * args.epochs
    with tempfile.TemporaryDirectory() as tmp:
        run_train(data, 1, False, tmp)  # warm the page cache
        slots, evaluator = floor.probe_points(LOTUS, PY, "slots"), floor.probe_points(LOTUS, PY, "evaluator")
        untraced, traced, native, profiled, infos, pair, cpu, bare = [], [], [], [], [], [], [], []
        at_eval, eval_infos, native_infos = [], [], []
        for _ in range(args.repeats):
            s, info = run_train(data, args.epochs, False, tmp)
            untraced.append(s)
            cpu.append(info["cpu_s"] / samples)
            with floor.BareUprobe(slots):
                bare.append(run_train(data, args.epochs, False, tmp)[0])
            s, info = run_train(data, args.epochs, True, tmp)
            traced.append(s)
            infos.append(info)
            s, info = run_train(data, args.epochs, True, tmp, env=EVALUATOR)
            at_eval.append(s)
            eval_infos.append(info)
            s, info = run_train(data, args.epochs, True, tmp, NATIVE)
            native.append(s)
            native_infos.append(info)
            pair.append(run_train(data, args.epochs, True, tmp, env={"LOTUS_NO_UPROBE_SESSION": "1"})[0])
            profiled.append(run_train(data, args.epochs, False, tmp, script=PROFILED)[0])
        u, t, nt = statistics.median(untraced), statistics.median(traced), statistics.median(native)
        ev = statistics.median(at_eval)
        pt = statistics.median(profiled)
        pr = statistics.median(pair)
        cpu_ratio = statistics.median(i['cpu_s'] for i in infos) / samples / statistics.median(cpu)
        eval_cpu_ratio = statistics.median(i['cpu_s'] for i in eval_infos) / samples / statistics.median(cpu)
        native_cpu_ratio = statistics.median(i['cpu_s'] for i in native_infos) / samples / statistics.median(cpu)

        def cpu_pairs(traced_infos):
            return pairs([i["cpu_s"] / samples for i in traced_infos], cpu)
        events = statistics.median(i["events"] for i in infos)
        lost = max(i["lost_events"] for i in infos)
        # Marginal records and bytes per sample: the growth over more epochs, without the fixed cost of startup
        # (imports describe thousands of code objects once; it varies by a few KB run to run).
        rec = os.path.join(tmp, "m.lbt")
        base_tracer = run_train(data, args.epochs, True, tmp, ["--record", rec])[1]["tracer_cpu_ms"]
        base_bytes = os.path.getsize(rec)
        more_info = run_train(data, args.epochs + MORE_EPOCHS, True, tmp, ["--record", rec])[1]
        more = more_info["events"]
        tracer_us = 1000 * (more_info["tracer_cpu_ms"] - base_tracer) / (MORE_EPOCHS * args.images)
        per_sample = (more - events) / (MORE_EPOCHS * args.images)
        bytes_per_sample = (os.path.getsize(rec) - base_bytes) / (MORE_EPOCHS * args.images)
        run_cpu = [tracer_run_cpu(data, args.images) for _ in range(3)]
        native_run_cpu = [tracer_run_cpu(data, args.images, NATIVE) for _ in range(3)]
        latencies, stops = zip(*[attach_latency(tmp) for _ in range(3)])
        native_latencies, native_stops = zip(*[attach_latency(tmp, ["--native-map"]) for _ in range(3)])
        _, event_stops = zip(*[attach_latency(tmp, ["--native-map"], {"LOTUS_NO_UPROBE_MULTI": "1"})
                               for _ in range(3)])
        cap = flood(tmp, 2, 4)
        export_eps = export_rate(tmp)
        stalled = flood(tmp, 2, 4, stall=(1.5, 1.0))
        rss, record_bytes = peak_rss_kb(tmp, data, 10)
        # The same slowdowns inside one job, lotus-bpf attached (--pid) and detached between epochs; the untraced
        # arm is the method's own noise.
        alt = alternate.alternate(data, {"untraced": None, "default": (LOTUS, [], None),
                                         "native": (LOTUS, NATIVE, None)}, ALT_CYCLES, WORKERS)
        costs = [bpf_cost(data, args.images) for _ in range(3)]
        eval_costs = [bpf_cost(data, args.images, env=EVALUATOR) for _ in range(3)]
        native_costs = [bpf_cost(data, args.images, NATIVE) for _ in range(3)]
        per_sample_hits = {}
        for where, points in (("slots", slots), ("evaluator", evaluator)):  # traps per sample over epochs 2-3
            with floor.BareUprobe(points) as probe:
                hits = epoch_snapshots(train_cmd(data, 3), lambda _: probe.hits(), "run under bare uprobes")
            per_sample_hits[where] = (hits[2] - hits[0]) / (2 * args.images)
        entries, slot_hits = per_sample_hits["evaluator"], per_sample_hits["slots"]
        per_call = floor.call_costs(PY, LOTUS, args.repeats, "functions", evaluator)
        per_object_call = floor.call_costs(PY, LOTUS, args.repeats, "objects", slots, returns=True)
        reads = read_costs(args.repeats)
        beside = unrelated(max(args.repeats, 5), UNRELATED)
        beside_job = unrelated_beside_job(max(args.repeats, 5), BESIDE_JOB, data)
        # as kernels before 6.13 run (no per-process probes)
        beside_wide = unrelated(max(args.repeats, 5), {"objects": UNRELATED["objects"]},
                                env={"LOTUS_SYSTEM_WIDE_PROBES": "1"})["objects"]
        beside_bare = unrelated_bare_syscalls(max(args.repeats, 5), UNRELATED["syscalls"])
        # the native map's sampling: events on the traced threads (the default), and one per CPU at 999 Hz (what
        # it was before, and what kernels before 6.13 get at that frequency)
        syscalls_only = {"syscalls": UNRELATED["syscalls"]}
        beside_native = unrelated(max(args.repeats, 5), syscalls_only, extra=NATIVE)["syscalls"]
        beside_net = unrelated(max(args.repeats, 5), {"sockets": UNRELATED["sockets"]}, extra=["--net"])["sockets"]
        beside_per_cpu = unrelated(max(args.repeats, 5), syscalls_only, env={"LOTUS_PER_CPU_SAMPLING": "1"},
                                   extra=NATIVE + ["--sample-freq", "999"])["syscalls"]
        fwd_untraced, fwd_traced, fwd_probed = model_forward(args.repeats)
        fwd_cost, fwd_cost_on = forward_cost(), forward_cost(["--trainer-calls", "on"])
        pure = {"untraced": [], "default": [], "all-calls": []}
        pure311 = {"untraced": [], "all-calls": []}
        if os.access(PY312, os.X_OK):
            for _ in range(args.repeats):
                for mode in pure:
                    pure[mode].append(pure_wall(mode, 100000))
        if os.access(PY311, os.X_OK):
            for _ in range(args.repeats):
                for mode in pure311:
                    pure311[mode].append(pure_wall(mode, 100000, PY311))

    cpu_ms = 1000 * statistics.median(cpu)
    libc_runs = runs_of(costs, "libc_call")
    default_account = mode_account(costs, slot_hits, per_object_call, statistics.median(run_cpu), cpu_ms)
    native_account = mode_account(native_costs, slot_hits, per_object_call, statistics.median(native_run_cpu), cpu_ms)
    rows = [
        ("example pipeline, samples/s untraced", f"{samples / u:.0f}", f"median of {args.repeats}"),
        ("example pipeline, samples/s traced (default)", f"{samples / t:.0f}", f"ratio {t / u:.3f} (slowdown {100 * (t / u - 1):+.1f} %, {pairs(traced, untraced)}); "
         f"CPU per sample ratio {cpu_ratio:.3f} ({cpu_pairs(infos)}; the traced processes' CPU, the tracer's not in it); Python calls "
         f"probed at the type-slot functions"),
        ("samples/s traced, probes at the evaluator", f"{samples / ev:.0f}", f"ratio {ev / u:.3f} (slowdown {100 * (ev / u - 1):+.1f} %, "
         f"{pairs(at_eval, untraced)}); CPU per sample ratio {eval_cpu_ratio:.3f}; the default before issue 20 "
         f"(LOTUS_EVALUATOR_PROBE=1; --span and --all-calls still probe there)"),
        ("samples/s traced, uprobe + uretprobe", f"{samples / pr:.0f}", f"ratio {pr / u:.3f} (slowdown {100 * (pr / u - 1):+.1f} %), "
         "default mode as kernels 6.6-6.12 run it (LOTUS_NO_UPROBE_SESSION=1: two uprobe_multi links)"),
        ("samples/s traced, --native-map --counters", f"{samples / nt:.0f}", f"ratio {nt / u:.3f} (slowdown {100 * (nt / u - 1):+.1f} %, {pairs(native, untraced)}); CPU per sample ratio {native_cpu_ratio:.3f} ({cpu_pairs(native_infos)})"),
        *[alternate_row(arm, pairs_) for arm, pairs_ in alt.items()],
        ("samples/s under torch.profiler (CPU)", f"{samples / pt:.0f}", f"ratio {pt / u:.3f} (slowdown {100 * (pt / u - 1):+.1f} %), "
         "bench/profiled_train.py: main process only"),
        ("BPF time per sample, default (us)", f"{cost_total(costs):.1f}",
         f"kernel bpf_stats, epochs 2-3, median of 3; {cost_note(costs[1])}"),
        ("BPF time per sample, probes at the evaluator (us)", f"{cost_total(eval_costs):.1f}",
         f"the same; {cost_note(eval_costs[1])}"),
        ("BPF time per sample, --native-map --counters (us)", f"{cost_total(native_costs):.1f}",
         f"the same; {cost_note(native_costs[1])}"),
        ("kernel uprobe trap per call of an object (ns)", f"{per_object_call['bare']:.0f}",
         f"bench/calls.py objects: bare uprobes on the type-slot functions (tracefs events, no BPF), over "
         f"untraced, median of {args.repeats}; traced (default mode, a call the rules skip): "
         f"{per_object_call['traced']:.0f} ns; bare return probes there (an entry and a return trap): "
         f"{per_object_call['bare-return']:.0f} ns"),
        ("kernel uprobe trap per C->Python call (ns)", f"{per_call['bare']:.0f}",
         f"bench/calls.py functions: a bare uprobe on the evaluator, the same; traced (default mode: no probe "
         f"there): {per_call['traced']:.0f} ns"),
        ("file read in a traced process (ns)", f"{reads[0]:.0f}",
         f"bench/calls.py filereads (FileIO.read of 1 byte from C: libc's read, not probed), traced over untraced, "
         f"median of {args.repeats} interleaved; with libc's read probed (LOTUS_LIBC_READ=1, as before 3411edf): "
         f"{reads[1]:.0f} ns"),
        ("os.read in a traced process (ns)", f"{reads[2]:.0f}",
         "bench/calls.py reads (os.read of 1 byte from C), the same: the probe where the pipes' reads are seen, a "
         "read too short for a pickle"),
        ("Python-probe calls per sample (default probes)", f"{slot_hits:.1f}", "bare uprobes' hits on the "
         "type-slot functions and os.read over epochs 2-3 of the example (main process and workers): the default "
         "mode's entry traps there; the calls it emits also trap at their return, and libc's wrappers trap too "
         "(the BPF rows' runs)"),
        ("evaluator entries per sample", f"{entries:.1f}", "the same for a bare uprobe on the evaluator: the traps "
         "of --span, --all-calls and the default before issue 20"),
        ("default-mode floor: the entry traps alone (%)", f"{100 * slot_hits * per_object_call['bare'] / 1e6 / cpu_ms:.2f}",
         f"{slot_hits:.1f} x {per_object_call['bare']:.0f} ns = {slot_hits * per_object_call['bare'] / 1000:.1f} us "
         f"per sample against {cpu_ms:.2f} ms of CPU per sample untraced (the example's processes, median of "
         f"{args.repeats}); at the evaluator: {entries:.1f} x {per_call['bare']:.0f} ns = "
         f"{100 * entries * per_call['bare'] / 1e6 / cpu_ms:.2f} %; not counted: the emitted calls' returns and "
         f"libc's wrappers (their runs: the BPF rows)"),
        ("the default mode's cost account (%)", f"{default_account[1]:.2f}",
         f"{default_account[2]} per sample against {cpu_ms:.2f} ms of CPU per sample untraced: a lower bound of "
         f"the slowdown from the kernel's and the tracer's own counts (they drift with the machine's load, not by "
         f"the samples/s ratios' +-10-20 %). Entries: the Python probes' bare hits and libc's wrappers' runs "
         f"({libc_runs:.1f}, at the slot trap's cost); returns: the Python programs' other runs, at a bare "
         f"uretprobe's return (bench/calls.py objects under return probes over entry probes); not in it: the "
         f"kernel's dispatch to on_switch at each switch, and the caches and TLB the traps and programs take "
         f"from the job's own code"),
        ("the --native-map --counters cost account (%)", f"{native_account[1]:.2f}",
         f"{native_account[2]}: the same with the native probes' entries and returns; not in it either: the "
         f"sampling interrupts and the perf events' work at each switch of a traced thread"),
        ("samples/s with bare uprobes on the slots and os.read", f"{samples / statistics.median(bare):.0f}",
         f"ratio {statistics.median(bare) / u:.3f} (slowdown {100 * (statistics.median(bare) / u - 1):+.1f} %, "
         f"{pairs(bare, untraced)}), no tracer: the floor above, measured on the example (within the ratios' noise)"),
        *[(f"unrelated process beside the tracer, {kind}", f"{100 * (b / a - 1):+.1f} %",
           f"bench/calls.py {kind} ({UNRELATED[kind] / 1e6:g} M calls from C) in another process of the same "
           f"interpreter while lotus-bpf traces an idle job, over nothing traced: {a:.3f} s alone, {b:.3f} s "
           f"beside ({(b - a) * 1e9 / UNRELATED[kind]:+.0f} ns a call), {p}, median of {max(args.repeats, 5)} "
           "interleaved; "
           + {"syscalls": "the watched syscalls seen at libc's wrappers in the traced processes (no syscall event "
                          "in use); the next row is what the events would cost",
              "switches": "on_switch runs at every context switch of the machine: a load tells a task never "
                          "traced",
              "sockets": "no socket tracepoint without --net (next row)"}.get(
                  kind, "the Python probes in the traced processes only"))
          for kind, (a, b, p) in beside.items()],
        *[(f"unrelated process beside the example traced, {kind}", f"{100 * (wb / wa - 1):+.1f} %",
           f"bench/calls.py {kind} ({BESIDE_JOB[kind] / 1e6:g} M calls) beside the example running ({WORKERS} workers), "
           f"lotus-bpf --pid attached over not, interleaved in one job: wall {wa:.3f} s and {wb:.3f} s ({pw}); "
           f"the loop's own CPU {100 * (cb / ca - 1):+.1f} % ({ca:.3f} s and {cb:.3f} s, {pc}), median of "
           f"{max(args.repeats, 5)}; the job holds both CPUs, so the wall time is mostly the loop's share of one")
          for kind, (wa, wb, pw, ca, cb, pc) in beside_job.items()],
        ("unrelated process, syscalls, bare syscall events", f"{100 * (beside_bare[1] / beside_bare[0] - 1):+.1f} %",
         f"the same loop with no tracer and two syscall events enabled (tracefs, output off, no BPF): "
         f"{beside_bare[0]:.3f} s alone, {beside_bare[1]:.3f} s beside "
         f"({(beside_bare[1] - beside_bare[0]) * 1e9 / UNRELATED['syscalls']:+.0f} ns a syscall), {beside_bare[2]}; "
         "while any syscall event is in use the kernel takes its tracing path at every syscall of every task"),
        ("unrelated process, objects, system-wide probes", f"{100 * (beside_wide[1] / beside_wide[0] - 1):+.1f} %",
         f"the same with LOTUS_SYSTEM_WIDE_PROBES=1 (kernels before 6.13): {beside_wide[0]:.3f} s alone, "
         f"{beside_wide[1]:.3f} s beside, {beside_wide[2]}"),
        ("unrelated process, sockets, beside --net", f"{100 * (beside_net[1] / beside_net[0] - 1):+.1f} %",
         f"{beside_net[0]:.3f} s alone, {beside_net[1]:.3f} s beside "
         f"({(beside_net[1] - beside_net[0]) * 1e9 / UNRELATED['sockets']:+.0f} ns a send and receive), {beside_net[2]}; "
         "the socket tracepoints run at every socket call of the machine (a load tells a task never traced)"),
        ("unrelated process, syscalls, beside --native-map --counters", f"{100 * (beside_native[1] / beside_native[0] - 1):+.1f} %",
         f"{beside_native[0]:.3f} s alone, {beside_native[1]:.3f} s beside, {beside_native[2]}; the sampling events are "
         f"on the traced threads alone (99 Hz)"),
        ("unrelated process, syscalls, per-CPU sampling at 999 Hz", f"{100 * (beside_per_cpu[1] / beside_per_cpu[0] - 1):+.1f} %",
         f"{beside_per_cpu[0]:.3f} s alone, {beside_per_cpu[1]:.3f} s beside, {beside_per_cpu[2]}; LOTUS_PER_CPU_SAMPLING=1 "
         f"--sample-freq 999: the native map before 5de3f28, and kernels before 6.13 at that frequency"),
        ("records per sample, steady state", f"{per_sample:.1f}", f"marginal over {MORE_EPOCHS} more epochs; {lost} lost; "
         f"all records incl. startup: {events / samples:.1f}/sample"),
        ("tracer CPU per sample, steady state (us)", f"{tracer_us:.0f}",
         f"the tracer's own CPU time (ring buffer, engine, /proc readings, record file, and the outputs written "
         f"at the end), marginal over {MORE_EPOCHS} more epochs, one run each: {tracer_us / 10 / cpu_ms:.2f} % "
         f"of the job's CPU per sample untraced"),
        ("tracer CPU per sample while the job runs (us)", f"{statistics.median(run_cpu):.0f}",
         f"epochs 2-4 of 4 (schedstat of the tracer's threads), median of 3 ({min(run_cpu):.0f}-{max(run_cpu):.0f}):"
         f" {statistics.median(run_cpu) / 10 / cpu_ms:.2f} % of the job's CPU per sample untraced, taken from the "
         f"job's CPUs when none is free; --native-map --counters: {statistics.median(native_run_cpu):.0f} us "
         f"({min(native_run_cpu):.0f}-{max(native_run_cpu):.0f}, "
         f"{statistics.median(native_run_cpu) / 10 / cpu_ms:.2f} %)"),
        ("attach latency, torch loaded (s)", f"{statistics.median(latencies):.3f}", f"median of 3: {', '.join(f'{x:.3f}' for x in latencies)}"),
        ("attach latency, torch loaded, --native-map (s)", f"{statistics.median(native_latencies):.3f}",
         f"median of 3 (libjpeg, _imaging, libtorch_cpu resolved and probed)"),
        ("stop latency, SIGTERM -> exit (s)", f"{statistics.median(stops):.3f}", "median of 3, the same runs"),
        ("stop latency, --native-map (s)", f"{statistics.median(native_stops):.3f}",
         f"median of 3; {statistics.median(event_stops):.3f} s with a perf-event uprobe per function "
         f"(LOTUS_NO_UPROBE_MULTI=1, as kernels before 6.6)"),
        ("capture: records/s delivered, 0 lost", f"{cap[0] / 4:.0f}",
         f"bench/flood.py, 2 processes x 4 s: {cap[0]} delivered, {cap[1]} lost, {cap[2]} pipeline calls; the probes "
         f"slow the 2 cores' producers before the consumer falls behind"),
        ("capture: records per tracer CPU second", f"{cap[0] / cap[4]:.0f}",
         f"the same run: the tracer used {cap[4]:.2f} s of CPU (ring buffer, engine, trace and record writing)"),
        ("capture: consumer stalled 1 s, records lost", f"{stalled[1]}",
         f"{stalled[0]} written by BPF, {stalled[5]} read by the tracer; written + lost - 6 x calls = "
         f"{stalled[0] + stalled[1] - 6 * stalled[2]} (without the stall: {cap[0] + cap[1] - 6 * cap[2]}: "
         f"startup records)"),
        ("tracer peak RSS (MB), 10 epochs", f"{rss / 1024:.1f}", "VmHWM; 32 MB of it is the mapped ring buffer"),
        ("record file bytes per sample, steady state", f"{bytes_per_sample:.0f}", f"marginal over {MORE_EPOCHS} more epochs"),
        ("record file bytes per sample, 10 epochs", f"{record_bytes / (10 * args.images):.0f}",
         f"{record_bytes / 1e6:.1f} MB incl. startup (code objects of every import)"),
        ("export throughput (events/s)", f"{export_eps:.0f}", f"lotus-bpf export of the flood's record file ({cap[0]} events) -> Chrome JSON"),
    ]
    fu, ft = statistics.median(r[1] for r in fwd_untraced), statistics.median(r[1] for r in fwd_traced)
    fo = statistics.median(r[1] for r in fwd_probed)
    module_calls = fwd_untraced[0][0]
    rows.append(("a model's forward in the traced process (ms more)", f"{ft - fu:+.2f}",
                 f"bench/forward.py after a pass over a DataLoader with 2 workers: ResNet-50, one thread, a 16x16 "
                 f"input: {fu:.2f} ms a forward untraced, {ft:.2f} ms under lotus-bpf ({100 * (ft / fu - 1):+.1f} %, "
                 f"{pairs([r[1] for r in fwd_traced], [r[1] for r in fwd_untraced])}), median of {args.repeats} "
                 f"interleaved: --trainer-calls auto leaves the training process's object calls unprobed"))
    rows.append(("the same with --trainer-calls on (ms more)", f"{fo - fu:+.2f}",
                 f"{fo:.2f} ms a forward ({100 * (fo / fu - 1):+.1f} %, "
                 f"{pairs([r[1] for r in fwd_probed], [r[1] for r in fwd_untraced])}), interleaved with the above; "
                 f"{module_calls} module calls a forward, {1000 * (fo - fu) / module_calls:+.1f} us each: every call "
                 f"of an object traps"))
    def fwd_traps(c):
        return sum(runs for name, (runs, _) in c.items() if name in UPROBE_PROGS)
    rows.append(("uprobe traps a forward, default / --trainer-calls on", f"{fwd_traps(fwd_cost):.1f} / {fwd_traps(fwd_cost_on):.1f}",
                 f"bench/forward.py --marks, bpf_stats over its 200 timed forwards: runs of the uprobe programs, each "
                 f"a trap ({cost_note(fwd_cost) or 'none'}; on: {cost_note(fwd_cost_on)}); all programs' BPF time "
                 f"{cost_total([fwd_cost]):.1f} / {cost_total([fwd_cost_on]):.1f} us a forward"))
    holds = [i["held_children"] for i in infos if i.get("held_children", {}).get("count")]
    if holds:  # per-process probes (6.13+): each new worker waits for its own
        rows.append(("DataLoader worker held at its fork (ms)",
                     f"{statistics.median(h['total_ms'] / h['count'] for h in holds):.1f}",
                     f"per worker, until its probes are in place (otherData.held_children of the default runs), "
                     f"median of {len(holds)}; the longest in any run {max(h['max_ms'] for h in holds):.1f} ms, "
                     f"{holds[0]['count']} workers a run; of a hold, attaching its probes "
                     f"{statistics.median(h.get('attach_ms', 0) / h['count'] for h in holds):.1f} ms (the rest: waiting "
                     f"for the tracer)"))
    if pure["untraced"]:
        base = statistics.median(pure["untraced"])
        for mode in ("default", "all-calls"):
            m = statistics.median(pure[mode])
            rows.append((f"pure-Python pipeline on 3.12, {mode}", f"{m / base:.2f}x",
                         f"wall time ratio to untraced ({base:.2f} s), 100000 samples, median of {args.repeats}"))
    if pure311["untraced"]:
        base = statistics.median(pure311["untraced"])
        m = statistics.median(pure311["all-calls"])
        rows.append(("pure-Python pipeline on 3.11, all-calls", f"{m / base:.2f}x",
                     f"RESUME/RETURN_VALUE handler probes; untraced {base:.2f} s, median of {args.repeats}"))
    width = max(len(r[0]) for r in rows)
    print(f"{'measure'.ljust(width)}  {'value':>10}  note")
    for name, value, note in rows:
        print(f"{name.ljust(width)}  {value:>10}  {note}")


if __name__ == "__main__":
    main()
