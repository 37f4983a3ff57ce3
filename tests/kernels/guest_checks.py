"""The kernel matrix's own checks (tests/kernels/guest_run.py runs them in each VM, beside chosen integration tests;
they run on the host too: cd tests/integration && PYTHONPATH=../kernels python3 -m unittest guest_checks).
Each is exact against its own run's ground truth, and small: under QEMU's TCG a torch import takes 20-30 s and the
example ~7 s an epoch for 64 images. Figures worth reading in the matrix's report are printed as `FIGURE k=v`."""
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
import unittest
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import (CAPS_REFUSED, CAPS_SUFFICE, EXAMPLE, LOTUS, OPS, PY, WORKLOAD, BpfTestCase, assert_nested,  # noqa: E402
                     dataset, kill_group, load_trace, probes_capabilities, read_lines, run_lotus, spans, start_lotus,
                     wait_for_attach, wait_for_file)
from test_isolation import INT3, first_bytes, probe_offsets  # noqa: E402
from test_progress import session_states  # noqa: E402

PURE = os.path.join(os.path.dirname(WORKLOAD), "pure_pipeline.py")
IMAGES, BATCH, EPOCHS = 32, 8, 2  # the example's run: 4 batches an epoch, 2 epochs (workers forked twice)


def figure(key, value):
    print(f"FIGURE {key}={value}", flush=True)


def assert_counts(test, got, expected, what):
    """got == expected (Counters), else a message that says what is missing and what is extra, not a truncated
    repr of both."""
    if got != expected:
        missing, extra = expected - got, got - expected
        test.fail(f"{what}: {sum(got.values())} traced, {sum(expected.values())} expected; missing "
                  f"{sum(missing.values())}: {sorted(missing.items())[:12]}; extra {sum(extra.values())}: "
                  f"{sorted(extra.items())[:12]}")


class ExampleJob(BpfTestCase):
    """examples/train.py with 2 workers, traced from its start (launch) and attached before its first epoch
    (--pid; its DataLoader made, its workers not yet forked): every batch, wait and collate is one the job's own
    log says it consumed, each sample has each op once and one loader."""

    def job_args(self, data, log, *extra):
        return [PY, EXAMPLE, data, "--epochs", str(EPOCHS), "--workers", "2", "--batch-size", str(BATCH),
                "--log", log, *extra]

    def assert_as_logged(self, trace, log):
        consumed = read_lines(log)  # batch EPOCH INDEX N
        expected = Counter((int(e), int(i)) for _, e, i, _ in consumed)
        sizes = {(int(e), int(i)): int(n) for _, e, i, n in consumed}
        self.assertEqual(sum(sizes.values()), EPOCHS * IMAGES)
        self.assertEqual(trace["otherData"]["lost_events"], 0)
        for cat in ("batch", "wait", "collate"):
            got = Counter((s["args"].get("epoch"), s["args"].get("batch")) for s in spans(trace, cat))
            assert_counts(self, got, expected, f"{cat} spans (epoch, batch) against the job's log")
        for b in spans(trace, "batch"):
            self.assertEqual(b["args"]["samples"], sizes[(b["args"]["epoch"], b["args"]["batch"])], b)
        samples = spans(trace, "sample")
        assert_counts(self, Counter(s["args"]["sample"] for s in samples),
                      Counter({i: EPOCHS for i in range(IMAGES)}), "samples by dataset index")
        assert_counts(self, Counter(l["args"]["sample"] for l in spans(trace, "loader")),
                      Counter({i: EPOCHS for i in range(IMAGES)}), "loader spans by dataset index")
        per_sample = Counter((op["args"]["sample_id"], op["name"]) for op in spans(trace, "op"))
        ids = {s["args"]["sample_id"] for s in samples}
        assert_counts(self, per_sample, Counter({(i, op): 1 for i in ids for op in OPS}), "ops (sample id, op)")
        assert_nested(self, trace)

    def test_launch_exact_against_its_log(self):
        data, log, out = dataset(IMAGES), self.path("batches.log"), self.path("trace.json")
        started = time.monotonic()
        r = run_lotus(["-q", "-o", out, "--", *self.job_args(data, log)], timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        figure("example_launch_s", round(time.monotonic() - started, 1))
        self.assert_as_logged(load_trace(out), log)

    def test_attach_exact_against_its_log(self):
        data, log, out, steps = dataset(IMAGES), self.path("batches.log"), self.path("trace.json"), self.path("go")
        os.mkdir(steps)
        # --steps: before each epoch N the job waits for go/go-N; it prints its pid once torch is imported and its
        # DataLoader made.
        job = subprocess.Popen(self.job_args(data, log, "--steps", steps), stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
        self.addCleanup(lambda: (kill_group(job), job.stdout.close()))
        self.assertIn("pid", job.stdout.readline())
        started = time.monotonic()
        tracer = start_lotus(["-q", "-o", out, "--pid", str(job.pid)])
        self.addCleanup(lambda: tracer.poll() is None and tracer.kill())
        wait_for_attach(tracer, timeout=300)
        figure("attach_s", round(time.monotonic() - started, 1))
        for epoch in range(EPOCHS):
            open(os.path.join(steps, f"go-{epoch}"), "w").close()
        job.communicate(timeout=600)
        self.assertEqual(job.returncode, 0)
        _, err = tracer.communicate(timeout=120)
        self.assertEqual(tracer.returncode, 0, err[-3000:])
        trace = load_trace(out)
        attach_figures(trace, "example_attach_")
        self.assert_as_logged(trace, log)


def assert_pure_exact(test, trace, n):
    """tests/integration/workloads/pure_pipeline.py N's trace: n items in the main process, n/2 in each of its two
    forked processes, every op once per item, nothing lost."""
    test.assertEqual(trace["otherData"]["lost_events"], 0)
    root = trace["otherData"]["target_pid"]
    per_pid = Counter(s["pid"] for s in spans(trace, "sample"))
    test.assertEqual(per_pid.pop(root, 0), n)
    test.assertEqual(sorted(per_pid.values()), [n // 2, n // 2])
    test.assertEqual(sorted(s["args"]["sample"] for s in spans(trace, "sample") if s["pid"] == root), list(range(n)))
    test.assertEqual(Counter(s["name"] for s in spans(trace, "op")),
                     Counter({"Scale": 2 * n, "Shift": 2 * n, "Clip": 2 * n}))
    assert_nested(test, trace)


def attach_figures(trace, prefix):
    """The run's attach cost (otherData): wall time and the tracer's own CPU time, loading and verifying the BPF
    programs included. Under TCG CPU time is inflated many times over hardware: figures, never a threshold."""
    for key in ("attach_wall_ms", "attach_cpu_ms"):
        if key in trace["otherData"]:
            figure(f"{prefix}{key}", trace["otherData"][key])


class PurePython(BpfTestCase):
    N = 200

    def test_pure_python_pipeline_exact(self):
        """No torch: a Compose-like class of three ops, n items in the main process and n/2 in each of two forked
        processes (tests/integration/workloads/pure_pipeline.py), with --pipeline: every op once per item."""
        out = self.path("trace.json")
        r = run_lotus(["-q", "-o", out, "--pipeline", "Pipeline", "--", PY, PURE, str(self.N)], timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        trace = load_trace(out)
        attach_figures(trace, "")
        assert_pure_exact(self, trace, self.N)


class ReducedCapabilities(BpfTestCase):
    """The tracer as an unprivileged user (nobody) with only CAP_BPF and CAP_PERFMON (ambient), tracing a job it
    launches as that user: the same exact trace as root's; or, where the kernel cannot allow it, a refusal in one
    line naming the capability it lacks, no output written and the job not started. Never a half-attached run."""

    def test_pure_python_pipeline_with_bpf_and_perfmon_only(self):
        n = PurePython.N
        home = self.path("nobody")
        os.chmod(self.tmp, 0o711)
        os.mkdir(home)
        # The binary and the job where nobody can read them (the carried tree may be root's alone).
        lotus, job = os.path.join(home, "lotus-bpf"), os.path.join(home, "pure_pipeline.py")
        shutil.copy2(LOTUS, lotus)
        shutil.copy2(PURE, job)
        for f in (home, lotus, job):
            os.chown(f, 65534, 65534)
        out = os.path.join(home, "trace.json")
        caps = "+bpf,+perfmon"
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", f"--inh-caps={caps}",
               f"--ambient-caps={caps}", lotus, "-q", "-o", out, "--pipeline", "Pipeline", "--",
               PY, job, str(n)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=home,
                           env={**os.environ, "HOME": home})
        # What `lotus-bpf probes` says of the same user's capabilities on this kernel, before any run.
        probes = subprocess.run(cmd[:cmd.index(lotus) + 1] + ["probes"], capture_output=True, text=True,
                                timeout=120, cwd=home, env={**os.environ, "HOME": home})
        said = probes_capabilities(probes.stdout)
        self.assertIsNotNone(said, probes.stdout + probes.stderr)
        figure("reduced_caps_probes", "; ".join(x for x in said if x))
        if r.returncode != 0:
            lines = [line for line in r.stderr.splitlines() if line.strip()]
            self.assertEqual(len(lines), 1, f"a refusal is one line; stderr:\n{r.stderr[-3000:]}")
            self.assertRegex(lines[0], r"CAP_[A-Z_]+", "the refusal names the capability")
            self.assertFalse(os.path.exists(out), "an output was written")
            figure("reduced_caps", f"refused: {lines[0]!r}")
            reason, verdict = said
            self.assertEqual(verdict, CAPS_REFUSED)
            self.assertIn(reason, lines[0], "probes names the refusal in the run's own words")
            return
        self.assertEqual(said, (None, CAPS_SUFFICE))
        trace = load_trace(out)
        figure("reduced_caps", "traced")
        attach_figures(trace, "reduced_caps_")
        assert_pure_exact(self, trace, n)


# A pipeline of object calls (each a call through the type's tp_call slot, where lotus-bpf's Python probes are):
# the traced job calls it now and then until told to stop; the unrelated process times N calls of its own.
PIPE = ("class Scale:\n    def __call__(self, x): return x * 2\n"
        "class Shift:\n    def __call__(self, x): return x + 1\n"
        "class Pipe:\n    def __init__(self, ops): self.ops = ops\n"
        "    def __call__(self, x):\n        for op in self.ops: x = op(x)\n        return x\n"
        "p = Pipe([Scale(), Shift()])\n")
JOB = PIPE + ("import os, sys, time\n"
              "for i in range(20): p(i)\n"
              "open(sys.argv[1], 'w').close()\n"
              "while not os.path.exists(sys.argv[2]):\n    for i in range(20): p(i)\n    time.sleep(0.05)\n")
UNRELATED = PIPE + ("import sys, time\nn = int(sys.argv[1])\nprint('go', flush=True)\nt = time.process_time()\n"
                    "for i in range(n): p(i)\nprint(time.process_time() - t)\n")


class Bystander(BpfTestCase):
    """Others pay nothing: an unrelated process of the same interpreter, making object calls, takes as much CPU
    time beside a traced job as beside the same job untraced. The two arms are interleaved (ABBA), so drift of the
    machine (a busy host under a VM) falls on both. Its CPU time, not wall time: a trap its calls took would be
    charged to it, while the other processes' use of the CPUs is not. All of it on one vCPU (the job, the tracer and
    the unrelated process): under single-threaded TCG the guest's clock runs on while the host thread executes the
    other vCPU, so a process's CPU time on one vCPU grew with whatever ran on the other (the tracer's own work beside
    the traced job read as the unrelated process's cost: 1.26-1.46x in a CI run, with no trap of its own).
    Two measures: (1) no breakpoint in the unrelated process: the first byte of each function lotus-bpf probes (the
    type slots, as `lotus-bpf probes` lists them) read from its memory while it runs beside the traced job is not
    int3: exact; (2) its CPU time, the medians of the two arms, within 2x: a guard against gross costs (system-wide
    probes made it 3.5-6 times slower), not a fine measure. Under TCG a guest process's CPU time takes in whatever
    keeps the host thread from the guest (host load, device emulation, a slow first round while the VM warms): one
    run's untraced arm spread 1.30-2.04 s. Medians' ratios seen: 1.00-1.18 on 6.1, 1.03-1.34 on 6.12 (1.32-1.34 in
    two full matrix runs, the untraced arm tight at 1.29-1.36 s: not explained; the earlier bound, 1.1x the slowest
    untraced run, failed them)."""
    ROUNDS = 4
    BOUND = 2.0

    @staticmethod
    def one_cpu():
        os.sched_setaffinity(0, {0})

    def unrelated(self, n, while_running=None):
        proc = subprocess.Popen([PY, "-c", UNRELATED, str(n)], stdout=subprocess.PIPE, text=True,
                                preexec_fn=self.one_cpu)
        try:
            self.assertEqual(proc.stdout.readline().strip(), "go")
            if while_running:
                while_running(proc.pid)
            out, _ = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.assertEqual(proc.returncode, 0)
        return float(out)

    def assert_no_breakpoint(self, pid):
        path, slots = self.slots
        seen = first_bytes(pid, path, slots)
        self.assertEqual(set(seen), set(slots), f"not all probed functions found in {path} as mapped")
        traps = [name for name, byte in seen.items() if byte == INT3]
        figure("unrelated_breakpoints", f"{len(traps)} of {len(seen)}")
        self.assertEqual(traps, [], "the unrelated process has lotus-bpf's breakpoints")

    def beside_job(self, traced, n):
        ready, stop, out = self.path("ready"), self.path("stop"), self.path("trace.json")
        for f in (ready, stop):
            if os.path.exists(f):
                os.remove(f)
        cmd = [PY, "-c", JOB, ready, stop]
        if traced:
            cmd = [LOTUS, "-q", "-o", out, "--pipeline", "Pipe", "--"] + cmd
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, preexec_fn=self.one_cpu)
        try:
            wait_for_file(ready, timeout=300)
            seconds = self.unrelated(n, self.assert_no_breakpoint if traced else None)
            open(stop, "w").close()
            _, err = proc.communicate(timeout=120)
            self.assertEqual(proc.returncode, 0, err[-3000:])
        finally:
            kill_group(proc)
            proc.stderr.close()
        if traced:  # the tracer did trace the job beside which the unrelated process ran
            self.assertGreater(Counter(s["name"] for s in spans(load_trace(out), "op"))["Scale"], 0)
        return seconds

    def test_unrelated_process_pays_nothing(self):
        self.slots = probe_offsets(PY)  # read once: the unrelated process's loop is short
        self.assertTrue(self.slots[1], "lotus-bpf probes listed no type slot")
        n = 20000
        while self.unrelated(n) < 0.5:  # about a second of CPU for each measure, whatever the machine's speed
            n *= 2
        n *= 2
        alone, beside = [], []
        for r in range(self.ROUNDS):
            for traced in ((False, True) if r % 2 == 0 else (True, False)):
                (beside if traced else alone).append(self.beside_job(traced, n))
        figure("unrelated_cpu_s_untraced", ",".join(f"{s:.3f}" for s in alone))
        figure("unrelated_cpu_s_traced", ",".join(f"{s:.3f}" for s in beside))
        figure("unrelated_slowdown", f"{statistics.median(beside) / statistics.median(alone):.3f}")
        self.assertLessEqual(statistics.median(beside), self.BOUND * statistics.median(alone),
                             f"CPU s of {n} calls, traced job: {beside}; untraced job: {alone}")


class NativeProbes(BpfTestCase):
    def test_exceptions_through_probed_calls(self):
        """--native-map on a job whose samples catch torch.stack's C++ exception (thrown inside a probed op call):
        every sample completes (the probes on return instructions leave the unwinder's stack alone: per-point
        perf-event uprobes before 6.6, per-process uprobe_multi links from 6.10); the stacks that returned are
        spans, exactly, and the thrown ones are counted unended, against the workers' own counts."""
        job = os.path.join(os.path.dirname(WORKLOAD), "exceptions_job.py")
        log, out, samples = self.path("counts.log"), self.path("t.json"), 64
        r = run_lotus(["-q", "-o", out, "--native-map", "--", PY, job, str(samples), log], timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn(f"{samples} samples", r.stdout)
        rows = [list(map(int, fields)) for fields in read_lines(log)]
        self.assertEqual(len(rows), 2, rows)
        caught_torch, stacks = sum(x[1] for x in rows), sum(x[3] for x in rows)
        self.assertEqual((caught_torch, stacks), (2 * samples, samples))
        trace = load_trace(out)
        count = Counter(n["name"] for n in spans(trace, "native"))
        self.assertEqual(count["at::_ops::stack::call"], stacks)
        self.assertEqual(trace["otherData"]["native_calls_unended"], caught_torch // 2)
        figure("native_probe_links", trace["otherData"]["native_probe_links"])


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {int(c) for c in f.read().split()}
    except FileNotFoundError:
        return set()


class KilledTracer(BpfTestCase):
    """kill -9 of the tracer with a fork in flight: the job runs to its end, every epoch, and none of its processes
    is left stopped. The tracer is stopped (SIGSTOP) when the job forks the next epoch's workers, so the fork is
    certainly one it has not dealt with: the new worker held, where the kernel lets lotus-bpf hold a new process
    (LOTUS_TEST_HOLD_WHILE_STOPPED makes that hold certain), running on untraced where it cannot."""

    def test_killed_at_a_fork_the_job_finishes(self):
        epochs = 4
        ready, hold = self.path("ready"), self.path("hold")
        # 16 images in batches of 4: epoch 0 is all prefetched (2 workers x 2 batches) before --ready.
        job = subprocess.Popen([PY, WORKLOAD, dataset(16), "--workers", "2", "--batch-size", "4", "--epochs",
                                str(epochs), "--sample-log", self.path("samples.log"), "--ready", ready, "--hold", hold],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.addCleanup(lambda: (kill_group(job), job.stdout.close()))
        wait_for_file(ready, timeout=300)
        tracer = start_lotus(["-q", "-o", "/dev/null", "--hold-deadline", "60000", "--pid", str(job.pid)],
                             env={**os.environ, "LOTUS_TEST_HOLD_WHILE_STOPPED": "1"})
        self.addCleanup(lambda: tracer.poll() is None and tracer.kill())
        wait_for_attach(tracer, timeout=300)
        first = children(job.pid)
        tracer.send_signal(signal.SIGSTOP)
        open(hold, "w").close()
        deadline = time.time() + 300
        while not children(job.pid) - first:  # epoch 1's workers: forked while the tracer cannot see to them
            self.assertLess(time.time(), deadline, "the job forked no new worker")
            time.sleep(0.01)
        time.sleep(0.3)
        states = session_states(job.pid)
        figure("held_at_kill", sum(1 for p in children(job.pid) - first if states.get(p) == "T"))
        tracer.kill()
        tracer.communicate(timeout=60)
        out, _ = job.communicate(timeout=300)
        self.assertEqual(job.returncode, 0)
        self.assertEqual(out.count(": epoch "), epochs, out)
        self.assertEqual({p: s for p, s in session_states(job.pid).items() if s in "Tt"}, {},
                         "processes of the job left stopped")


# A job that marks its own end, for the refusal checks: the tracer's refusal must not keep it from running on.
MARKED = PIPE + ("import os, sys, time\nfor i in range(1000): p(i)\n"
                 "while len(sys.argv) > 2 and not os.path.exists(sys.argv[2]): time.sleep(0.05)\n"
                 "open(sys.argv[1], 'w').close()\n")


class Refusal(BpfTestCase):
    """On a kernel below lotus-bpf's minimum (the matrix sets LOTUS_KERNEL_REFUSED=1 there): one line on stderr
    that names the kernel and what it lacks, a non-zero exit; attached, the job runs on to its end; asked to launch
    one, lotus-bpf starts nothing."""

    @classmethod
    def setUpClass(cls):
        if os.environ.get("LOTUS_KERNEL_REFUSED") != "1":
            raise unittest.SkipTest("for kernels lotus-bpf refuses (LOTUS_KERNEL_REFUSED=1, set by the matrix)")
        super().setUpClass()

    def assert_one_line(self, r):
        self.assertNotEqual(r.returncode, 0, r.stderr)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        self.assertEqual(len(lines), 1, f"stderr:\n{r.stderr}")
        release = ".".join(os.uname().release.split(".")[:2])
        self.assertIn(release, lines[0], "the line names the kernel")
        self.assertRegex(lines[0], r"(?i)kernel|linux")
        print(f"FIGURE refusal={lines[0]!r}", flush=True)

    def test_launch_refused_in_one_line_before_the_job_starts(self):
        # Launch mode refuses before it starts anything (a job it cannot trace is the user's to start), writes no
        # output, and leaves nothing behind.
        done, out = self.path("done"), self.path("t.json")
        r = run_lotus(["-q", "-o", out, "--", PY, "-c", MARKED, done], timeout=300)
        self.assert_one_line(r)
        self.assertFalse(os.path.exists(done), "the launched job ran although lotus-bpf refused the kernel")
        self.assertFalse(os.path.exists(out), "an output was written")

    def test_attach_refused_in_one_line_the_job_runs_to_its_end(self):
        done, stop = self.path("done"), self.path("stop")
        job = subprocess.Popen([PY, "-c", MARKED, done, stop], start_new_session=True)
        self.addCleanup(lambda: kill_group(job))
        r = run_lotus(["-q", "-o", self.path("t.json"), "--pid", str(job.pid)], timeout=300)
        self.assert_one_line(r)
        with open(f"/proc/{job.pid}/stat") as f:
            self.assertNotIn(f.read().rsplit(")", 1)[1].split()[0], "Tt", "the target was left stopped")
        open(stop, "w").close()
        self.assertEqual(job.wait(timeout=60), 0)
        self.assertTrue(os.path.exists(done))


if __name__ == "__main__":
    unittest.main()
