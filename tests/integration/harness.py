"""Shared helpers of the integration tests: the real lotus-bpf binary on real Python processes."""
import dataclasses
import gzip
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("LOTUS_SOURCE", os.path.abspath(os.path.join(HERE, "..", "..")))
LOTUS = os.environ.get("LOTUS_BPF", os.path.join(SOURCE, "build", "lotus-bpf"))
# The interpreters the suites run, in one place; each can be pointed elsewhere from the environment:
#   LOTUS_TEST_PYTHON       CPython with torch and torchvision (default Debian's; CMake's PYTHON_WITH_TORCH sets it)
#   PYENV_ROOT              where pyenv keeps its CPythons (default /root/.pyenv); the newest of each minor is run
#   LOTUS_TEST_PYTHON_3_12  one entry of INTERPRETERS (its key upper-cased, '.' and '-' as '_'), e.g. _3_14_STATIC
PY = os.environ.get("LOTUS_TEST_PYTHON", "/usr/bin/python3")
PYENV_VERSIONS = os.path.join(os.environ.get("PYENV_ROOT", "/root/.pyenv"), "versions")


def pyenv_python(minor):
    """pyenv's newest CPython `minor` (e.g. "3.12"), or None."""
    found = []
    if os.path.isdir(PYENV_VERSIONS):
        for v in os.listdir(PYENV_VERSIONS):
            exe = os.path.join(PYENV_VERSIONS, v, "bin", "python" + minor)
            if v.startswith(minor + ".") and v[len(minor) + 1:].isdigit() and os.access(exe, os.X_OK):
                found.append((int(v[len(minor) + 1:]), exe))
    return max(found)[1] if found else None


def _interpreter(key, default):
    return os.environ.get("LOTUS_TEST_PYTHON_" + key.replace(".", "_").replace("-", "_").upper(), default)


# Every supported CPython, static (Debian's) and with a shared libpython (pyenv's).
INTERPRETERS = {key: _interpreter(key, default) for key, default in {
    **{m: pyenv_python(m) or os.path.join(PYENV_VERSIONS, m + ".x", "bin", "python" + m)
       for m in ("3.10", "3.11", "3.12", "3.13")},
    "3.11-static": "/usr/bin/python3.11",
    # Debian's own 3.14 and 3.15, unpacked with their glibc by scripts/install-python.sh (called by scripts/test.sh);
    # python3.X-shared is a launcher linked to its libpython3.X.so
    "3.14-static": "/opt/lotus-bpf/python3.14/usr/bin/python3.14",
    "3.14": "/opt/lotus-bpf/python3.14/usr/bin/python3.14-shared",
    "3.15-static": "/opt/lotus-bpf/python3.15/usr/bin/python3.15",
    "3.15": "/opt/lotus-bpf/python3.15/usr/bin/python3.15-shared",
}.items()}
WORKLOAD = os.path.join(HERE, "workloads", "pipeline_job.py")
EXAMPLE = os.path.join(SOURCE, "examples", "train.py")
OPS = ["RandomResizedCrop", "RandomHorizontalFlip", "ToTensor", "Normalize"]


def _program_names():
    """Every BPF program lotus-bpf loads, as bpftool may name it, read from the binary itself rather than kept by
    hand, so that assert_detached looks for a new program as soon as it exists: the BPF object the skeleton embeds
    (an ELF of machine EM_BPF), its functions in executable sections other than .text (libbpf's programs; .text
    holds subprograms). The kernel keeps 15 characters of a name (BPF_OBJ_NAME_LEN); bpftool shows the full name
    where BTF has it: both are taken."""
    with open(LOTUS, "rb") as f:
        blob = f.read()
    found = set()
    at = blob.find(b"\x7fELF\x02\x01")
    while at >= 0:
        elf = blob[at:]
        if struct.unpack_from("<H", elf, 18)[0] == 247:  # EM_BPF
            shoff, = struct.unpack_from("<Q", elf, 0x28)
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3a)
            # (name, type, flags, offset, size, link) of each section
            secs = [struct.unpack_from("<IIQ8xQQI", elf, shoff + i * shentsize) for i in range(shnum)]
            def text(table, off):
                start = secs[table][3] + off
                return elf[start:elf.index(b"\0", start)].decode()
            for symtab in (sec for sec in secs if sec[1] == 2):  # SHT_SYMTAB
                base, size, strtab = symtab[3], symtab[4], symtab[5]
                for o in range(base, base + size, 24):
                    name, info, _, shndx = struct.unpack_from("<IBBH", elf, o)
                    if info & 0xf == 2 and 0 < shndx < len(secs) and secs[shndx][2] & 0x4 \
                            and text(shstrndx, secs[shndx][0]) != ".text":  # STT_FUNC, SHF_EXECINSTR
                        found.add(text(strtab, name))
        at = blob.find(b"\x7fELF\x02\x01", at + 1)
    if not found:
        raise AssertionError(f"no BPF program found in {LOTUS}: the tests cannot know what to look for")
    return found | {n[:15] for n in found}


PROGRAM_NAMES = _program_names()
AGENT_PROGRAMS = ("agent_execs",)  # the agent's own exec watch (bpf/exec_watch.bpf.c), loaded while it runs


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

    def long_job(self):
        """The test workload over 1,000 epochs, past its first epoch (imports done, workers running), its pipe kept
        drained; its whole group killed at cleanup (a worker forked just before its parent was killed may never
        notice: torch's watchdog takes the parent's pid from the worker's first getppid, 1 if it was gone)."""
        job = subprocess.Popen([PY, WORKLOAD, dataset(64), "--workers", "2", "--epochs", "1000"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        self.addCleanup(lambda: kill_group(job))
        while "epoch 0" not in job.stdout.readline():
            self.assertIsNone(job.poll(), "the job ended early")
        threading.Thread(target=lambda: job.stdout.read(), daemon=True).start()
        return job

    def assert_detached(self, why="lotus-bpf left BPF programs loaded", running=()):
        """running: programs that may stay while their owner runs on (the agent's exec watch, AGENT_PROGRAMS)."""
        # The kernel frees programs after an RCU grace period: give it a moment.
        left = lambda: [p for p in lotus_programs_loaded() if p not in running]
        deadline = time.time() + 5
        while left() and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(left(), [], why)


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


CAPS_SUFFICE = "CAP_BPF and CAP_PERFMON suffice (CAP_SYS_ADMIN not needed)"
CAPS_REFUSED = "lacks CAP_SYS_ADMIN: a run is refused so"


def probes_capabilities(stdout):
    """`lotus-bpf probes`' capabilities line, as (reason, verdict): (None, CAPS_SUFFICE) where CAP_BPF and
    CAP_PERFMON suffice, else the reason CAP_SYS_ADMIN is needed (a refused run's own words) and "has CAP_SYS_ADMIN"
    or CAPS_REFUSED. None where there is not exactly one such line."""
    lines = [line[len("capabilities: "):] for line in stdout.splitlines() if line.startswith("capabilities: ")]
    if len(lines) != 1:
        return None
    if lines[0] == CAPS_SUFFICE:
        return None, CAPS_SUFFICE
    reason, _, verdict = lines[0].rpartition("; this process ")
    return reason, verdict


def not_guardian(pids):
    """Of the tracer's children, those that are not its guardian process (lotus-bpf __guardian)."""
    def guardian(pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return b"\0__guardian\0" in f.read()
        except OSError:
            return False
    return [p for p in pids if not guardian(p)]


def free_port():
    """A TCP port free on the loopback now (for a --metrics endpoint or a server the test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid, every_thread=False):
    """The pids a process forked: from its main thread (every_thread: from each of its threads, as a fork from
    another thread is that thread's child; a thread that ends meanwhile has none); [] once it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task") if every_thread else [pid]
    except OSError:
        return []
    kids = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(c) for c in f.read().split()]
        except OSError:
            if int(tid) == pid:
                return []  # the process is gone
    return kids


def process_state(pid):
    """The process's state letter (R, S, T for stopped...), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return None


def run_lotus(args, timeout=300, **kw):
    return subprocess.run([LOTUS] + args, capture_output=True, text=True, timeout=timeout, **kw)


def start_lotus(args, **kw):
    return subprocess.Popen([LOTUS] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


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


# With a pin-memory thread the training loop's in-process timer around next() and the traced call can differ by a
# hand-over of the GIL: the thread asks for it, and the loop gives it up within the interpreter's switch interval
# (5 ms) and waits as long for it back, before the call's probe and again after its return.
PIN_THREAD_SLACK_US = 11000.0


def read_lines(path):
    try:
        with open(path) as f:
            return [l.split() for l in f if l.strip()]
    except FileNotFoundError:
        return []


def assert_nested(test, trace):
    """Every op lies inside a sample span of the same thread, with the same sample id; no traced process ran
    another interpreter than the probed one, nor ran CPython outside the traced tree (a false alarm there would tell
    users that spans are missing)."""
    test.assertNotIn("unprobed_interpreters", trace["otherData"])
    test.assertNotIn("untraced_python_processes", trace["otherData"])
    samples = {}
    for s in spans(trace, "sample"):
        samples[(s["pid"], s["tid"], s["args"]["sample_id"])] = s
    ops = spans(trace, "op")
    for op in ops:
        s = samples.get((op["pid"], op["tid"], op["args"]["sample_id"]))
        test.assertIsNotNone(s, f"op outside any sample: {op}")
        test.assertGreaterEqual(op["ts"], s["ts"])
        test.assertLessEqual(op["ts"] + op["dur"], s["ts"] + s["dur"])
    if ops:
        test.assertGreater(sum(op["dur"] for op in ops), 0)


def image_paths(root, py=PY):
    """The ImageFolder's files in its index order (the dataset index a sample carries)."""
    out = subprocess.run([py, "-c", "import sys; from torchvision import datasets; "
                          "print('\\n'.join(p for p, _ in datasets.ImageFolder(sys.argv[1]).samples))", root],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def flows(trace):
    """Pairs (batch span, wait span) joined by each flow arrow, and the ids of arrows missing an end."""
    by_id = {}
    for e in trace["traceEvents"]:
        if e["ph"] in "sf":
            by_id.setdefault(e["id"], {})[e["ph"]] = e

    def owner(ev, cat):
        for s in spans(trace, cat):
            if s["pid"] == ev["pid"] and s["tid"] == ev["tid"] and s["ts"] <= ev["ts"] <= s["ts"] + s["dur"]:
                return s
        return None
    pairs, broken = [], []
    for i, ends in by_id.items():
        if set(ends) != {"s", "f"}:
            broken.append(i)
            continue
        pairs.append((owner(ends["s"], "batch"), owner(ends["f"], "wait")))
    return pairs, broken


def assert_two_views(test, trace, images, batch, ops, summary_path):
    """transform=TwoViews(Compose): each item runs the same pipeline twice. One sample an item, holding both runs'
    ops, with one loader; the next item's runs (the same object again) are its own."""
    samples = spans(trace, "sample")
    test.assertEqual(len(samples), images)
    test.assertEqual(len(spans(trace, "loader")), images)
    test.assertEqual(Counter(op["name"] for op in spans(trace, "op")), Counter({op: 2 * images for op in ops}))
    per_sample = Counter(op["args"]["sample_id"] for op in spans(trace, "op"))
    test.assertEqual(set(per_sample.values()), {2 * len(ops)})
    test.assertEqual({b["args"]["samples"] for b in spans(trace, "batch")}, {batch})
    with open(summary_path) as f:
        test.assertEqual(json.load(f)["ops"]["sample"]["count"], images)


def assert_retried_items(test, trace, retry_log, images, batch, before, after):
    """The workload's Flaky transform raises now and then; the dataset's __getitem__ catches it and runs the
    pipeline again (for item 0), logging PID INDEX RETRIES. One sample an item, holding the failed runs' ops and the
    retry's; one loader an item. `before`: an op that runs before Flaky, `after` one that runs only past it."""
    items = read_lines(retry_log)
    test.assertEqual(len(items), images)
    retries = sum(int(r) for _, _, r in items)
    test.assertGreater(retries, images // 8, "too few failures: nothing tested")
    test.assertEqual(len(spans(trace, "sample")), images)
    test.assertEqual(len(spans(trace, "loader")), images)
    ops = Counter(op["name"] for op in spans(trace, "op"))
    test.assertEqual(ops["Flaky"], images + retries)  # every run, the failed ones too
    test.assertEqual(ops[before], images + retries)
    test.assertEqual(ops[after], images)  # only the runs that got past Flaky
    test.assertEqual({b["args"]["samples"] for b in spans(trace, "batch")}, {batch})
    per_sample = Counter(op["args"]["sample_id"] for op in spans(trace, "op") if op["name"] == "Flaky")
    by_index = Counter()
    for s in spans(trace, "sample"):
        by_index[s["args"]["sample"]] += per_sample[s["args"]["sample_id"]] - 1
    test.assertEqual(+by_index, +Counter({int(i): int(r) for _, i, r in items}))


def assert_waits_match(test, trace, wait_log, slack_us=500.0, outliers=0):
    """Every wait is its next()'s batch (the workload's wait log: epoch, batch, ns), and lasted as long as the
    in-process timer around the call says, to 10 % or slack_us. The timer encloses the call, so no wait may be
    longer; at most `outliers` may be shorter by more (the timer also counts the loop's own lines around the call,
    where the kernel may have preempted it: on 2 busy CPUs for a slice of a few ms)."""
    measured = {(int(l[0]), int(l[1])): int(l[2]) / 1000.0 for l in read_lines(wait_log)}
    traced = {(w["args"]["epoch"], w["args"]["batch"]): w["dur"] for w in spans(trace, "wait")}
    test.assertEqual(set(measured), set(traced))
    apart = [(k, traced[k], measured[k]) for k in measured
             if abs(traced[k] - measured[k]) > max(0.10 * measured[k], slack_us)]
    test.assertEqual([a for a in apart if a[1] > a[2]], [], "wait spans longer than in-process next() (us)")
    test.assertLessEqual(len(apart), outliers, f"wait spans vs in-process next() (us): {apart}")


def assert_dataloader_exact(test, data, trace, epochs, workers, images, batch, ops, stdout, summary_path,
                            py=PY, loader=0):
    """One DataLoader over `images` JPEGs in batches of `batch`, for `epochs` epochs with `workers` workers: every
    batch, wait, collate, loader, op exactly once where it belongs, every arrow joining the same batch."""
    import jsonschema
    batches_per_epoch = images // batch
    root = trace["otherData"]["target_pid"]
    expected = Counter({(e, b): 1 for e in range(epochs) for b in range(batches_per_epoch)})
    batches = [b for b in spans(trace, "batch") if b["args"].get("loader") == loader]
    test.assertEqual(Counter((b["args"]["epoch"], b["args"]["batch"]) for b in batches), expected)
    for b in batches:
        test.assertEqual(b["args"]["samples"], batch)
        if workers:
            test.assertNotEqual(b["pid"], root)
            test.assertIn(b["args"]["worker"], range(workers))
        else:
            test.assertEqual(b["pid"], root)
    waits = [w for w in spans(trace, "wait") if w["args"].get("loader") == loader]
    test.assertEqual(Counter((w["args"]["epoch"], w["args"]["batch"]) for w in waits), expected)
    test.assertTrue(all(w["pid"] == root for w in waits))
    consumed = [e for e in trace["traceEvents"] if e["ph"] == "i" and e["cat"] == "consumed"
                and e["args"].get("loader") == loader]
    test.assertEqual(len(consumed), epochs * batches_per_epoch)
    if workers:
        pairs, broken = flows(trace)
        test.assertEqual(broken, [])
        pairs = [(b, w) for b, w in pairs if w and w["args"].get("loader") == loader]
        test.assertEqual(len(pairs), epochs * batches_per_epoch)
        for b, w in pairs:  # each arrow joins the same batch at both ends
            test.assertIsNotNone(b)
            test.assertEqual({k: b["args"][k] for k in ("loader", "epoch", "batch")},
                             {k: w["args"][k] for k in ("loader", "epoch", "batch")})
        for b, w in pairs:  # the delay: from the batch ready (its span's end) to its use (the wait's end)
            ready_to_use_us = max(0, (w["ts"] + w["dur"]) - (b["ts"] + b["dur"]))
            test.assertAlmostEqual(w["args"]["delay_ms"], ready_to_use_us / 1000, delta=0.0025, msg=(b, w))
    # one collate per batch, inside it; one loader per sample with that sample's file
    collates = [c for c in spans(trace, "collate") if c["args"].get("loader") == loader]
    test.assertEqual(Counter((c["args"]["epoch"], c["args"]["batch"]) for c in collates), expected)
    loaders = [l for l in spans(trace, "loader") if l["args"].get("loader") == loader]
    test.assertEqual(len(loaders), epochs * images)
    paths = image_paths(data, py)
    for l in loaders:
        test.assertEqual(l["args"]["path"], paths[l["args"]["sample"]])
    test.assertEqual(Counter(s["name"] for s in spans(trace, "op") if s["args"].get("loader") == loader),
                     Counter({op: epochs * images for op in ops}))
    assert_nested(test, trace)
    # summary: the batch section and its JSON twin
    test.assertIn("batches prepared", stdout)
    with open(summary_path) as f:
        summary = json.load(f)
    with open(os.path.join(SOURCE, "schemas", "summary.schema.json")) as f:
        jsonschema.validate(summary, json.load(f))
    with open(os.path.join(SOURCE, "schemas", "chrome-trace.schema.json")) as f:
        jsonschema.validate(trace, json.load(f))
    mine = [x for x in summary["loaders"] if x["owner"] == root and x["loader"] == loader]
    test.assertEqual(len(mine), 1)
    test.assertEqual(mine[0]["batches"]["prepare"]["count"], epochs * batches_per_epoch)
    test.assertEqual(mine[0]["batches"]["wait"]["count"], epochs * batches_per_epoch)
    test.assertEqual(mine[0]["ops"]["sample"]["count"], epochs * images)
    training = [t for t in summary["training"] if t["pid"] == root]
    test.assertEqual(len(training), 1)
    test.assertIn("waited for data", training[0]["verdict"])
    test.assertLessEqual(training[0]["waiting_share"], 1.0)


def kill_group(job):
    """The job and whatever it started (3.14's forkserver and resource tracker outlive their parent)."""
    try:
        os.killpg(job.pid, 9)
    except ProcessLookupError:
        pass
    job.wait()


def assert_true_ids(test, trace, wait_log):
    """Each traced wait is matched, by time, to the in-process next() it measured: the (epoch-in-trace, batch)
    it carries must be that next()'s true batch; each arrow joins the same batch at both ends."""
    t0 = int(trace["otherData"]["t0_monotonic_ns"])
    calls = [(int(e), int(i), (int(start) - t0) / 1000.0, int(ns) / 1000.0) for e, i, ns, start in read_lines(wait_log)]
    first_epoch_seen = None
    for w in spans(trace, "wait"):
        mid = w["ts"] + w["dur"] / 2
        match = [c for c in calls if c[2] <= mid <= c[2] + c[3]]
        test.assertEqual(len(match), 1, (w, match))
        epoch, index = match[0][0], match[0][1]
        if "batch" in w["args"]:
            test.assertEqual(w["args"]["batch"], index, w)
        if "epoch" in w["args"]:  # epochs count from the first one tracing saw begin
            if first_epoch_seen is None:
                first_epoch_seen = epoch - w["args"]["epoch"]
            test.assertEqual(w["args"]["epoch"], epoch - first_epoch_seen, w)
    pairs, broken = flows(trace)
    test.assertEqual(broken, [])
    for b, w in pairs:
        test.assertEqual({k: b["args"].get(k) for k in ("loader", "epoch", "batch")},
                         {k: w["args"].get(k) for k in ("loader", "epoch", "batch")})


def assert_containers(test, trace, samples, ops, summary_path):
    """Compose([RandomApply([ColorJitter], p=1), Compose([Grayscale]), *ops]): the containers are ops, the
    transforms they call are ops inside them naming their container, once per sample."""
    got = Counter((s["name"], s["args"].get("container")) for s in spans(trace, "op"))
    expected = Counter({(op, None): samples for op in ops})
    expected.update({("RandomApply", None): samples, ("ColorJitter", "RandomApply"): samples,
                     ("Compose", None): samples, ("Grayscale", "Compose"): samples})
    test.assertEqual(got, expected)
    assert_nested(test, trace)
    outer = {(s["pid"], s["args"]["sample_id"], s["name"]): s for s in spans(trace, "op")
             if s["name"] in ("RandomApply", "Compose")}
    for s in spans(trace, "op"):
        if "container" in s["args"]:
            c = outer[(s["pid"], s["args"]["sample_id"], s["args"]["container"])]
            test.assertGreaterEqual(s["ts"] + 1e-3, c["ts"])
            test.assertLessEqual(s["ts"] + s["dur"], c["ts"] + c["dur"] + 1e-3)
    with open(summary_path) as f:
        rows = json.load(f)["ops"]
    test.assertEqual(rows["ColorJitter (in RandomApply)"]["count"], samples)
    test.assertEqual(rows["Grayscale (in Compose)"]["count"], samples)


# The DataLoader scenarios that run on every stack, written once: DataLoaderScenarios below, a TestCase per stack
# (test_dataloader.DataLoaderSemantics on Debian's torch, test_modern.ModernStack on the modern one) with its
# own scenarios besides. Each field of Stack is one way the stacks differ, said where the scenarios use it.
IMAGES, BATCH = 256, 32  # the scenarios' ImageFolder and batch size
V2_OPS = ["RandomResizedCrop", "RandomHorizontalFlip", "ToImage", "ToDtype", "Normalize"]  # OPS in transforms v2


@dataclasses.dataclass(frozen=True)
class Stack:
    """A CPython with torch and torchvision, and what the shared scenarios run and expect there."""
    name: str
    python: tuple  # the command that runs its python3 with arguments, as the tracer launches it
    transforms: tuple  # the workload's arguments for its transforms: () for v1, ("--v2",) for v2
    ops: tuple  # the ops of the workload's pipeline in those transforms (OPS, V2_OPS)
    op_past_flaky: str  # an op of `ops` that runs only in the pipeline runs that got past --flaky's Flaky
    # Every job logs each collation's end and each data_queue.put (the workload's --collate-log, whose collate_fn
    # is then LoggedCollate, and --put-log), and the two-worker job checks its batches end at the hand-over.
    hand_over_logs: bool
    lossless: bool  # every job's trace says it lost no event
    # The ways of running a scenario each stack runs (a subset where CI time is short):
    pin_thread_runs: tuple  # test_pin_memory_thread: (workload arguments, epochs) for each run
    left_mid_epoch_runs: tuple  # test_persistent_workers_left_mid_epoch: the workload's arguments for each run
    persistent_args: tuple  # test_persistent_workers_three_epochs: the workload's arguments besides --persistent
    worker_runs: tuple  # test_worker_counts: (workers, epochs) for each run
    # test_target_transform_and_own_calls_are_the_items: besides the exact check, every op within the sample of
    # its id, and each sample ending as its Relabel call does
    sample_ends_at_own_call: bool
    interpreter: str = None  # what each job's tracer must say it probes ("CPython 3.14.10"); None: not checked


class DataLoaderScenarios:
    """The scenarios every stack runs (a mixin of a BpfTestCase whose `stack` is a Stack), each exact against the
    workload's in-process ground truth. The workload runs on the stack's python in its transforms, `workers` workers
    for `epochs` epochs over IMAGES JPEGs in batches of BATCH."""
    stack = None

    def job(self, *args, epochs=2, workers=2, env=None, transforms=None):
        """The workload traced, with `args` besides (and `transforms` instead of the stack's): returns (data, trace);
        the printed summary in self.stdout, the tracer's stderr in self.stderr, the summary JSON's path in
        self.summary, the workload's logs' paths in self.logs (waits; collates and puts with hand_over_logs)."""
        data = dataset(IMAGES)
        out, self.summary = self.path("trace.json"), self.path("summary.json")
        self.logs = {k: self.path(f"{k}.log")
                     for k in ("waits",) + (("collates", "puts") if self.stack.hand_over_logs else ())}
        for log in self.logs.values():  # the workload appends (a test may run several jobs)
            if os.path.exists(log):
                os.remove(log)
        logged = [a for k, flag in (("waits", "--wait-log"), ("collates", "--collate-log"), ("puts", "--put-log"))
                  if k in self.logs for a in (flag, self.logs[k])]
        r = run_lotus(["-q", "-o", out, "--summary-json", self.summary, "--", *self.stack.python, WORKLOAD, data,
                       *(self.stack.transforms if transforms is None else transforms), "--workers", str(workers),
                       "--batch-size", str(BATCH), "--epochs", str(epochs), *logged, *args],
                      env={**os.environ, **(env or {})})
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        if self.stack.interpreter:
            self.assertIn(self.stack.interpreter, r.stderr)
        self.stdout, self.stderr = r.stdout, r.stderr
        trace = load_trace(out)
        if self.stack.lossless:
            self.assertEqual(trace["otherData"]["lost_events"], 0)
        return data, trace

    def exact(self, data, trace, epochs, workers, ops=None, batch=BATCH):
        assert_dataloader_exact(self, data, trace, epochs, workers, IMAGES, batch,
                                list(self.stack.ops if ops is None else ops), self.stdout, self.summary)

    def waits_match_in_process_next(self, trace, slack_us=500.0, outliers=0):
        assert_waits_match(self, trace, self.logs["waits"], slack_us, outliers)

    def test_wait_times_match_in_process_next(self):
        """Two workers, two epochs: exact, and every wait as long as the in-process timer around its next() says
        (and, where the workload logs them, every batch ending at its hand-over)."""
        data, trace = self.job()
        self.exact(data, trace, 2, 2)
        if self.stack.hand_over_logs:
            self.batches_end_at_the_hand_over(trace, self.logs["collates"], self.logs["puts"])
        self.waits_match_in_process_next(trace)

    def test_worker_counts(self):
        """No workers (every batch the main process's) and other numbers of workers than two."""
        for workers, epochs in self.stack.worker_runs:
            with self.subTest(workers=workers, epochs=epochs):
                data, trace = self.job(workers=workers, epochs=epochs)
                self.exact(data, trace, epochs, workers)

    def test_spawn(self):
        data, trace = self.job("--context", "spawn", epochs=1)
        self.exact(data, trace, 1, 2)

    def test_persistent_workers_three_epochs(self):
        data, trace = self.job("--persistent", *self.stack.persistent_args, epochs=3)
        self.exact(data, trace, 3, 2)
        self.assertEqual(len({b["pid"] for b in spans(trace, "batch")}), 2)  # the same two processes

    def test_pin_memory_thread(self):
        """pin_memory where an accelerator is (as in GPU training): torch's pin-memory thread reads every batch from
        the workers' result queue and relays it to next() through an in-process queue, so the training loop reads
        no batch message itself. torch is told an accelerator is there and its pinning hands batches over
        unchanged: the thread, its queues and next() are torch's own. Every wait is that next()'s batch, with
        persistent workers too."""
        for args, epochs in self.stack.pin_thread_runs:
            with self.subTest(args=args):
                data, trace = self.job("--pin-memory", "--pin-thread", *args, epochs=epochs)
                self.exact(data, trace, epochs, 2)
                self.waits_match_in_process_next(trace, PIN_THREAD_SLACK_US)

    def test_persistent_workers_left_mid_epoch(self):
        """The loop leaves every other epoch after 3 batches: the persistent iterator's next __iter__ reads and drops
        what the workers still sent of it before their new epoch begins (the training loop itself, or torch's
        pin-memory thread, which relays the new epoch's batches). Every wait is its next()'s batch, of its epoch."""
        for args in self.stack.left_mid_epoch_runs:
            with self.subTest(args=args):
                data, trace = self.job("--persistent", "--break-after", "3", *args, epochs=4)
                self.waits_match_in_process_next(trace, PIN_THREAD_SLACK_US if "--pin-thread" in args else 500.0)
                self.assertEqual(len(spans(trace, "wait")), 2 * (3 + IMAGES // BATCH))
                self.assertNotIn("as they arrived", self.stdout)

    def attach_after_3_batches(self, data, waits, *args, tracer_args=(), env=None, meanwhile=None):
        """The workload (2 workers, 2 epochs, `args` besides) paused after 3 batches of its first epoch, attached
        by lotus-bpf --pid (`tracer_args` besides, in `env`), then let go (and `meanwhile(tracer)` run): returns
        (its pid, the trace's path, the summary JSON, the printed summary)."""
        out, js, hold = self.path("attach.json"), self.path("s.json"), self.path("hold")
        job = subprocess.Popen([*self.stack.python, WORKLOAD, data, *self.stack.transforms, "--workers", "2",
                                "--batch-size", str(BATCH), "--epochs", "2", "--wait-log", waits, "--pause-after", "3",
                                "--hold", hold, *args], stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            pid = int(job.stdout.readline().split()[-1])
            wait_for_file(hold + ".paused")
            tracer = start_lotus(["-q", "-o", out, "--summary-json", js, *tracer_args, "--pid", str(pid)], env=env)
            wait_for_attach(tracer)
            with open(hold, "w"):
                pass
            if meanwhile:
                meanwhile(tracer)
            self.assertEqual(job.wait(timeout=300), 0)
            stdout, err = tracer.communicate(timeout=60)
            self.assertEqual(tracer.returncode, 0, err)
        finally:
            kill_group(job)
            job.stdout.close()
        with open(js) as f:
            return pid, out, json.load(f), stdout

    def test_attached_mid_epoch_one_section_per_loader(self):
        """Attached after 3 batches of the first epoch, a train loader and a val loader over the same dataset
        object: the pass in flight joins the train loader, told apart by its sampler (the dataset is the val's
        too), so there is one section per real loader, each named by its dataset's class and root, with counts
        equal to the job's own log."""
        data = dataset(IMAGES)
        waits = self.path("w.log")
        pid, _, summary, stdout = self.attach_after_3_batches(data, waits, "--val", "--val-same-dataset")
        sections = {s["loader"]: s for s in summary["loaders"] if s["owner"] == pid}
        self.assertEqual(sorted(sections), [0, 1], stdout)
        train = [s for s in sections.values() if s["batches"]["joined_partial_pass"]]
        self.assertEqual(len(train), 1, [s["title"] for s in sections.values()])
        val = [s for s in sections.values() if s is not train[0]][0]
        per_epoch = IMAGES // BATCH
        self.assertEqual(len(read_lines(waits)), 2 * per_epoch)  # (the job's own log: every next() of the train loop)
        self.assertEqual(train[0]["batches"]["partial_pass_batches"], per_epoch - 3)
        self.assertEqual(train[0]["batches"]["wait"]["count"], 2 * per_epoch - 3)
        self.assertEqual(val["batches"]["wait"]["count"], 2 * (IMAGES // (2 * BATCH)))
        self.assertFalse(val["batches"]["joined_partial_pass"])
        for s in sections.values():
            self.assertTrue(s["title"].endswith(f": LoggedFolder {data}"), s["title"])
        self.assertIn("Includes the pass that was in flight when tracing began", stdout)
        self.assertNotIn("DataLoader ?", stdout)
        # every worker's row names its loader
        self.assertEqual([p["label"] for p in summary["processes"] if p["worker"] >= 0 and p["loader"] < 0], [])

    def test_attached_mid_epoch_loaders_read_after_their_iter(self):
        """As above, with lotus-bpf stopped (SIGSTOP) across each later pass's iter() and continued once it returned
        (its workers held meanwhile): no DataLoader is read while its __iter__ runs. The passes' iterators, read at
        their first next(), tell what each loader holds: the pass in flight still joins the train loader."""
        data = dataset(IMAGES)
        waits, gate = self.path("w.log"), self.path("gate")

        def stop_across_each_iter(tracer):
            try:
                for n in (1, 2, 3):  # val, train, val
                    self.wait_for_gate(gate, f"iter{n}")
                    tracer.send_signal(signal.SIGSTOP)
                    open(f"{gate}.iter{n}", "w").close()
                    self.wait_for_gate(gate, f"made{n}")
                    tracer.send_signal(signal.SIGCONT)
                    open(f"{gate}.made{n}", "w").close()
            finally:
                tracer.send_signal(signal.SIGCONT)

        pid, _, summary, stdout = self.attach_after_3_batches(
            data, waits, "--val", "--val-same-dataset", "--gate", gate, tracer_args=["--hold-deadline", "60000"],
            env={**os.environ, "LOTUS_TEST_HOLD_WHILE_STOPPED": "1"}, meanwhile=stop_across_each_iter)
        sections = {s["loader"]: s for s in summary["loaders"] if s["owner"] == pid}
        self.assertEqual(sorted(sections), [0, 1], stdout)
        (train,) = [s for s in sections.values() if s["batches"]["joined_partial_pass"]]
        self.assertEqual(train["batches"]["partial_pass_batches"], IMAGES // BATCH - 3)
        self.assertEqual(train["batches"]["wait"]["count"], 2 * (IMAGES // BATCH) - 3)
        self.assertEqual(len(read_lines(waits)), 2 * (IMAGES // BATCH))
        self.assertIn("Includes the pass that was in flight when tracing began", stdout)

    @staticmethod
    def wait_for_gate(gate, name, timeout=120):
        deadline = time.time() + timeout
        while [name] not in read_lines(gate + ".at"):
            if time.time() > deadline:
                raise AssertionError(f"the job did not reach {name}")
            time.sleep(0.02)

    def test_target_transform_and_own_calls_are_the_items(self):
        """An item's __getitem__ runs two pipelines (transform, then target_transform, each a Compose) and calls an
        object of its own after them (a subclass's, after super().__getitem__; Python-to-Python calls inlined since
        CPython 3.11): one sample each item, with one loader, holding every op, and batches of BATCH samples."""
        data, trace = self.job("--target-transform", epochs=1)
        self.exact(data, trace, 1, 2, list(self.stack.ops) + ["Offset", "LabelTensor", "Relabel"])
        if self.stack.sample_ends_at_own_call:
            samples = {s["args"]["sample_id"]: s for s in spans(trace, "sample")}
            for op in spans(trace, "op"):
                smp = samples[op["args"]["sample_id"]]
                self.assertTrue(smp["ts"] <= op["ts"] and op["ts"] + op["dur"] <= smp["ts"] + smp["dur"], (op, smp))
            # each sample ends with its own call, after both pipelines
            ends = sorted(s["ts"] + s["dur"] for s in spans(trace, "sample"))
            self.assertEqual(ends, sorted(op["ts"] + op["dur"] for op in spans(trace, "op") if op["name"] == "Relabel"))

    def test_two_views_of_each_item_are_one_sample(self):
        """transform=TwoViews(Compose): each item runs the same pipeline twice (contrastive learning)."""
        data, trace = self.job("--two-views", epochs=1)
        assert_two_views(self, trace, IMAGES, BATCH, self.stack.ops, self.summary)

    def test_an_item_retried_after_its_pipeline_raised_is_one_sample(self):
        """A transform raises now and then; the dataset's __getitem__ catches it and runs the pipeline again."""
        log = self.path("retries.log")
        data, trace = self.job("--flaky", log, epochs=1)
        assert_retried_items(self, trace, log, IMAGES, BATCH, "RandomResizedCrop", self.stack.op_past_flaky)

    def test_no_batching(self):
        """DataLoader(batch_size=None): each task is one sample's index, not a list, and each 'batch' one sample,
        converted, not collated. Every sample is a batch of one, with its wait, arrow and delay."""
        data, trace = self.job("--no-batching", epochs=1)
        self.exact(data, trace, 1, 2, batch=1)
        # (256 short waits on 2 CPUs the workers keep busy: the scheduler preempted the loop next to a call in 1 to
        # 3 of them in a run, 1.5-3.5 ms; none may be longer than its timer)
        self.waits_match_in_process_next(trace, outliers=IMAGES // 50)
        self.assertIn("from a batch ready to its use", self.stdout)

    def test_container_transforms(self):
        data, trace = self.job("--containers", epochs=1)
        assert_containers(self, trace, IMAGES, self.stack.ops, self.summary)

    def batches_end_at_the_hand_over(self, trace, collate_log, put_log):
        """A worker's batch ends where its loop calls getppid, just after data_queue.put: after its collate_fn
        returned and after the put returned (in-process clock), by at most a few ms: the put log's own write lets the
        queue's feeder thread take the GIL to pickle the batch (about 1 ms), and on 2 cores with 3 busy processes the
        worker can be preempted. Between collate and put the worker frees the batch's samples, which takes ms too:
        the hand-over, not the collation's end, is the mark."""
        t0 = int(trace["otherData"]["t0_monotonic_ns"])
        collated, handed = {}, {}
        for pid, n, ns in read_lines(collate_log):
            collated.setdefault(int(pid), []).append((int(ns) - t0) / 1000.0)
        for pid, ns, *_ in read_lines(put_log):
            handed.setdefault(int(pid), []).append((int(ns) - t0) / 1000.0)
        per_pid = {}
        for b in spans(trace, "batch"):
            per_pid.setdefault(b["pid"], []).append(b)
        self.assertEqual(set(per_pid), set(collated))
        self.assertEqual(set(per_pid), set(handed))
        lags = []
        for pid, bs in per_pid.items():
            bs.sort(key=lambda b: b["ts"])
            self.assertEqual(len(bs), len(collated[pid]))
            self.assertEqual(len(bs), len(handed[pid]))
            for b, c, h in zip(bs, collated[pid], handed[pid]):
                end = b["ts"] + b["dur"]
                self.assertGreaterEqual(end, c, (b, c, h))
                lags.append(end - h)
        self.assertGreaterEqual(min(lags), 0, lags)
        self.assertLess(max(lags), 20000, lags)  # us
        self.assertLess(sorted(lags)[len(lags) // 2], 3000, lags)


def assert_waits_as_timed(test, waits, timed, summary):
    """The wait causes' checks (docs/wait-causes.md): every wait traced (waits: the trace's wait spans by batch),
    within the job's own clock around next() (timed: ns by batch; the clock takes a little more than the call: on
    two busy CPUs the loop may wait for one between its clock and the call, or the call's return and its clock:
    5.6 ms once in CI, a traced wait of 0.2 ms timed 5.8 ms by the job); the causes add up to the waiting, in the
    summary and per wait. Returns the summary's causes {(cause, op): s} and its rows by batch."""
    test.assertEqual(sorted(waits), sorted(timed))
    for b, w in waits.items():
        test.assertLessEqual(w["dur"], timed[b] / 1000 + 500, b)
        test.assertGreaterEqual(w["dur"], timed[b] / 1000 * 0.9 - 10000, b)
    (section,) = [l for l in summary["loaders"] if l["batches"]]
    causes = {(c["cause"], c["op"]): c["seconds"] for c in section["batches"]["wait_causes"]}
    test.assertAlmostEqual(sum(causes.values()), sum(w["dur"] for w in waits.values()) / 1e6,
                           delta=1e-5 * len(waits))
    rows = {r["batch"]: r for r in summary["waits"]["rows"]}
    for b, row in rows.items():
        test.assertAlmostEqual(sum(c["ms"] for c in row["causes"]), row["ms"], delta=0.01, msg=row)
        test.assertAlmostEqual(row["ms"], waits[b]["dur"] / 1000, delta=0.01)
    return causes, rows
