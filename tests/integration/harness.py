"""Shared helpers of the integration tests: the real lotus-bpf binary on real Python processes."""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("LOTUS_SOURCE", os.path.abspath(os.path.join(HERE, "..", "..")))
LOTUS = os.environ.get("LOTUS_BPF", os.path.join(SOURCE, "build", "lotus-bpf"))
PY = "/usr/bin/python3"
WORKLOAD = os.path.join(HERE, "workloads", "pipeline_job.py")
EXAMPLE = os.path.join(SOURCE, "examples", "train.py")
OPS = ["RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"]
PROGRAM_NAMES = {"py_call", "py_entry", "py_return", "on_fork", "on_exec", "on_exit", "role_of", "describe_type", "on_switch",
                 "on_sample", "native_entry", "native_return"}


def bpf_unavailable():
    """Why BPF tests cannot run here, or None. Only a machine without BPF skips; CI is root with BPF."""
    if os.geteuid() != 0:
        return "not root: BPF integration tests need root"
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return "no kernel BTF (/sys/kernel/btf/vmlinux): BPF integration tests cannot run"
    return None


class BpfTestCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        why = bpf_unavailable()
        if why:
            print(f"SKIPPING {cls.__name__}: {why}", file=sys.stderr)
            raise unittest.SkipTest(why)
        if not os.access(LOTUS, os.X_OK):
            raise AssertionError(f"lotus-bpf binary not found at {LOTUS}")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lotus-test-")
        self.assert_detached("BPF programs of an earlier run are still loaded")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def assert_detached(self, why="lotus-bpf left BPF programs loaded"):
        # The kernel frees programs after an RCU grace period: give it a moment.
        deadline = time.time() + 5
        while lotus_programs_loaded() and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(lotus_programs_loaded(), [], why)


def dataset(images):
    """A deterministic JPEG ImageFolder, made once per size and kept under the system temp dir."""
    root = os.path.join(tempfile.gettempdir(), f"lotus-test-images-{images}")
    subprocess.run([PY, os.path.join(SOURCE, "examples", "make_dataset.py"), root, "--images", str(images)],
                   check=True)
    return root


def lotus_programs_loaded():
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return sorted(p.get("name", "") for p in json.loads(out or "[]") if p.get("name") in PROGRAM_NAMES)


def load_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def spans(trace, cat=None, name=None):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)
            and (name is None or e["name"] == name)]


def kernel_at_least(major, minor):
    release = tuple(int(x) for x in os.uname().release.split("-")[0].split(".")[:2])
    return release >= (major, minor)


def run_lotus(args, timeout=300, **kw):
    return subprocess.run([LOTUS] + args, capture_output=True, text=True, timeout=timeout, **kw)


def start_lotus(args):
    return subprocess.Popen([LOTUS] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_attach(proc, timeout=30):
    """Reads the tracer's stderr until it says it is tracing; returns that line."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"lotus-bpf ended before attaching: rc={proc.wait()}")
        if "tracing PID" in line:
            return line
    raise AssertionError("lotus-bpf did not attach in time")


def wait_for_file(path, timeout=120):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        if time.time() > deadline:
            raise AssertionError(f"{path} did not appear")
        time.sleep(0.02)


def read_lines(path):
    try:
        with open(path) as f:
            return [l.split() for l in f if l.strip()]
    except FileNotFoundError:
        return []


def assert_nested(test, trace):
    """Every op lies inside a sample span of the same thread, with the same sample id."""
    samples = {}
    for s in spans(trace, "sample"):
        samples[(s["pid"], s["tid"], s["args"]["sample_id"])] = s
    for op in spans(trace, "op"):
        s = samples.get((op["pid"], op["tid"], op["args"]["sample_id"]))
        test.assertIsNotNone(s, f"op outside any sample: {op}")
        test.assertGreaterEqual(op["ts"] + 1e-3, s["ts"])
        test.assertLessEqual(op["ts"] + op["dur"], s["ts"] + s["dur"] + 1e-3)
        test.assertGreater(op["dur"], 0)
