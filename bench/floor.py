"""What any tracer pays that sees Python calls with uprobes, whatever its BPF does: the kernel's trap per call,
measured with bare uprobes (tracefs events in a trace instance that is switched off, so the handler writes
nothing; no BPF at all) on the points lotus-bpf probes: the type-slot functions (the default) or the evaluator's
entry. Their hits count the calls (bench/run.py: per sample)."""
import contextlib
import os
import re
import statistics
import subprocess

TRACEFS = "/sys/kernel/tracing"
GROUP = "lotus_bench"
INSTANCE = os.path.join(TRACEFS, "instances", GROUP)


def _write(path, text):
    # tracefs files take O_APPEND writes; Python's buffered "a" mode seeks first and fails there
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def probe_points(lotus, python, where):
    """[(file, file offset)] where lotus-bpf probes `python`'s calls: "slots" (the type-slot functions, and
    os.read where its pipe reads are seen: the default mode's Python probes) or "evaluator" (`lotus-bpf probes`
    says)."""
    out = subprocess.run([lotus, "probes", python], capture_output=True, text=True, check=True).stdout
    path = re.search(r"^interpreter (\S+)$", out, re.M).group(1)
    if where == "evaluator":
        return [(path, int(re.search(r"^evaluator \S+ (0x[0-9a-f]+)$", out, re.M).group(1), 16))]
    points = [(path, int(m, 16)) for m in re.findall(r"^slot \S+ (0x[0-9a-f]+)$", out, re.M)]
    if points:
        points += [(path, int(m, 16)) for m in re.findall(r"^builtin os\.read (0x[0-9a-f]+)$", out, re.M)]
    if not points:
        raise RuntimeError(f"bench: lotus-bpf finds no type slots in {python}:\n{out}")
    return points


def _fresh_instance(path, remove):
    """A new trace instance at path, switched off (its events count but write nothing); `remove` first takes
    away one left by a bench run that was killed."""
    if not os.path.isdir(os.path.join(TRACEFS, "instances")):
        raise RuntimeError(f"bench: no tracefs at {TRACEFS} (mount -t tracefs nodev {TRACEFS})")
    if os.path.isdir(path):
        remove()
    os.makedirs(path)
    _write(os.path.join(path, "tracing_on"), "0\n")


class BareUprobe:
    """Uprobes on these points with no BPF program and no output, for the `with` block; `returns`: return probes
    (uretprobes: an entry trap that takes the return address, and a trap at the return)."""

    def __init__(self, points, returns=False):
        self.points = points
        self.kind = "r" if returns else "p"
        self.events = [f"{self.kind}{i}" for i in range(len(points))]

    def __enter__(self):
        _fresh_instance(INSTANCE, self._remove)
        for event, (path, offset) in zip(self.events, self.points):
            _write(os.path.join(TRACEFS, "uprobe_events"), f"{self.kind}:{GROUP}/{event} {path}:{offset:#x}\n")
        for event in self.events:
            _write(os.path.join(INSTANCE, "events", GROUP, event, "enable"), "1\n")
        return self

    def hits(self):
        total = 0
        with open(os.path.join(TRACEFS, "uprobe_profile")) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[1].removeprefix(f"{GROUP}/") in self.events:
                    total += int(fields[2])
        return total

    def __exit__(self, *exc):
        self._remove()

    @staticmethod
    def _remove():
        events = os.path.join(INSTANCE, "events", GROUP)
        for event in sorted(os.listdir(events)) if os.path.isdir(events) else []:
            enable = os.path.join(events, event, "enable")
            if os.path.exists(enable):
                _write(enable, "0\n")
                _write(os.path.join(TRACEFS, "uprobe_events"), f"-:{GROUP}/{event}\n")
        os.rmdir(INSTANCE)


class BareSyscallEvents:
    """What any syscall tracer costs every task on the machine, whatever its programs do: a syscall entry and a
    syscall exit event enabled (tracefs, in a trace instance that is switched off; no BPF). While any syscall
    event is in use the kernel sends every syscall of every task through its tracing path (a flag it sets on all
    tasks); the events are the directions lotus-bpf watches (openat at entry, read at exit)."""

    EVENTS = ("sys_enter_openat", "sys_exit_read")
    NAME = GROUP + "_syscalls"

    def __enter__(self):
        self.instance = os.path.join(TRACEFS, "instances", self.NAME)
        _fresh_instance(self.instance, self._remove)
        for event in self.EVENTS:
            _write(os.path.join(self.instance, "events", "syscalls", event, "enable"), "1\n")
        return self

    def __exit__(self, *exc):
        self._remove()

    def _remove(self):
        for event in self.EVENTS:
            _write(os.path.join(self.instance, "events", "syscalls", event, "enable"), "0\n")
        os.rmdir(self.instance)


CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.py")


def call_times(python, n, kind, mode, lotus, points, env=None):
    """Seconds of n calls from C (bench/calls.py, `kind`: functions, objects, ...), and the CPU seconds of the
    process making them: untraced, under the bare uprobes ("bare"), the bare return probes ("bare-return"), or
    traced (lotus-bpf's default mode: calls its rules skip; env: the tracer's extra environment)."""
    cmd = [python, CALLS, str(n), kind]
    if mode == "traced":
        cmd = [lotus, "-q", "-o", os.devnull, "--"] + cmd
    bare = mode in ("bare", "bare-return")
    with BareUprobe(points, mode == "bare-return") if bare else contextlib.nullcontext():
        out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                             env={**os.environ, **(env or {})}).stdout
    m = re.search(r"seconds ([0-9.]+) cpu ([0-9.]+)", out)
    return float(m.group(1)), float(m.group(2))


def call_seconds(python, n, kind, mode, lotus, points, env=None):
    """The seconds of call_times()."""
    return call_times(python, n, kind, mode, lotus, points, env)[0]


def call_costs(python, lotus, repeats, kind, points, n=1_000_000, returns=False):
    """ns per call over untraced, for the bare uprobes and for lotus-bpf's default mode (and with `returns`, for
    bare return probes): medians of interleaved repeats."""
    runs = {"untraced": [], "bare": [], "traced": [], **({"bare-return": []} if returns else {})}
    for _ in range(repeats):
        for mode in runs:
            runs[mode].append(call_seconds(python, n, kind, mode, lotus, points))
    med = {mode: statistics.median(v) for mode, v in runs.items()}
    return {mode: (med[mode] - med["untraced"]) * 1e9 / n for mode in runs if mode != "untraced"}
