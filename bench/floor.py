"""What any tracer pays that sees Python calls with a uprobe on the evaluator's entry, whatever its BPF does: the
kernel's trap per call, measured with a bare uprobe (a tracefs event in a trace instance that is switched off,
so the handler writes nothing; no BPF at all). Its hits count the calls (bench/run.py: per sample)."""
import contextlib
import os
import re
import statistics
import subprocess

TRACEFS = "/sys/kernel/tracing"
GROUP, EVENT = "lotus_bench", "evalf"
INSTANCE = os.path.join(TRACEFS, "instances", GROUP)
EVALUATOR = "_PyEval_EvalFrameDefault"


def _write(path, text):
    # tracefs files take O_APPEND writes; Python's buffered "a" mode seeks first and fails there
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _defines(path, symbol):
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[2] == symbol:
            return int(f[0], 16)
    return None


def evaluator_location(python):
    """(ELF file, file offset) of the evaluator that `python` runs: the executable's, else its libpython's."""
    exe = os.path.realpath(python)
    candidates = [exe]
    ldd = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    candidates += re.findall(r"=> (\S*libpython\S*) ", ldd)
    for path in candidates:
        vaddr = _defines(path, EVALUATOR)
        if vaddr is None:
            continue
        segments = subprocess.run(["readelf", "-lW", path], capture_output=True, text=True, check=True).stdout
        for m in re.finditer(r"LOAD\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)", segments):
            off, start, size = (int(x, 16) for x in m.groups())
            if start <= vaddr < start + size:
                return path, vaddr - start + off
    raise RuntimeError(f"bench: no {EVALUATOR} in {exe} or its libpython")


class BareUprobe:
    """A uprobe on the evaluator's entry with no BPF program and no output, for the `with` block."""

    def __init__(self, python):
        self.path, self.offset = evaluator_location(python)

    def __enter__(self):
        if not os.path.isdir(os.path.join(TRACEFS, "instances")):
            raise RuntimeError(f"bench: no tracefs at {TRACEFS} (mount -t tracefs nodev {TRACEFS})")
        if os.path.isdir(INSTANCE):  # left by a bench run that was killed
            self._remove()
        os.makedirs(INSTANCE)
        _write(os.path.join(TRACEFS, "uprobe_events"), f"p:{GROUP}/{EVENT} {self.path}:{self.offset:#x}\n")
        _write(os.path.join(INSTANCE, "tracing_on"), "0\n")
        _write(os.path.join(INSTANCE, "events", GROUP, EVENT, "enable"), "1\n")
        return self

    def hits(self):
        with open(os.path.join(TRACEFS, "uprobe_profile")) as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 3 and fields[1] in (EVENT, f"{GROUP}/{EVENT}"):
                    return int(fields[2])
        return 0

    def __exit__(self, *exc):
        self._remove()

    @staticmethod
    def _remove():
        enable = os.path.join(INSTANCE, "events", GROUP, EVENT, "enable")
        if os.path.exists(enable):
            _write(enable, "0\n")
            _write(os.path.join(TRACEFS, "uprobe_events"), f"-:{GROUP}/{EVENT}\n")
        os.rmdir(INSTANCE)


CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.py")


def call_seconds(python, n, mode, lotus):
    """Seconds of n C->Python calls (bench/calls.py): untraced, under a bare uprobe, or traced (default mode)."""
    cmd = [python, CALLS, str(n)]
    if mode == "traced":
        cmd = [lotus, "-q", "-o", os.devnull, "--"] + cmd
    with BareUprobe(python) if mode == "bare" else contextlib.nullcontext():
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(re.search(r"seconds ([0-9.]+)", out).group(1))


def call_costs(python, lotus, repeats, n=1_000_000):
    """ns per call over untraced, for the bare uprobe and for lotus-bpf's default mode (a call its rules skip):
    medians of interleaved repeats."""
    runs = {"untraced": [], "bare": [], "traced": []}
    for _ in range(repeats):
        for mode in runs:
            runs[mode].append(call_seconds(python, n, mode, lotus))
    med = {mode: statistics.median(v) for mode, v in runs.items()}
    return {mode: (med[mode] - med["untraced"]) * 1e9 / n for mode in ("bare", "traced")}
