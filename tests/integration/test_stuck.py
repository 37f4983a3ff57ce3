"""Stuck workers: `lotus-bpf dump PID` on a running DataLoader job one of whose workers sleeps in one sample, read
from outside (no probe, no stop); the job logs the sample's index and the worker's pid as the sleep starts."""
import json
import os
import re
import subprocess
import time

from harness import LOTUS, PY, SOURCE, BpfTestCase, kill_group, run_lotus

JOB = os.path.join(SOURCE, "tests", "integration", "workloads", "stuck_job.py")


def line_of(text):
    """The workload's line (1-based) that holds `text`."""
    with open(JOB) as f:
        for n, line in enumerate(f, 1):
            if text in line:
                return n
    raise AssertionError(f"{text!r} is not in {JOB}")


def processes(out):
    """dump's output as {pid: its block's text}."""
    blocks = {}
    for block in re.split(r"\n(?=Process \d+ )", out):
        m = re.match(r"Process (\d+) ", block)
        if m:
            blocks[int(m.group(1))] = block
    return blocks


def thread_stacks(block):
    """A process block's threads as lists of frame lines (innermost first)."""
    stacks = []
    for part in re.split(r"\n(?=Thread )", block)[1:]:
        stacks.append([l.strip() for l in part.splitlines()[1:] if l.startswith("    ")])
    return stacks


class StuckJob(BpfTestCase):
    def start_job(self, sleep, *extra):
        self.log = self.path("job.log")
        self.job = subprocess.Popen([PY, JOB, "--log", self.log, "--sleep", str(sleep)] + list(extra),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)

    def tearDown(self):
        if getattr(self, "job", None):
            kill_group(self.job)
            self.job.stderr.close()
        super().tearDown()

    def job_log(self, want, timeout=60):
        deadline = time.time() + timeout
        while True:
            lines = []
            if os.path.exists(self.log):
                with open(self.log) as f:
                    lines = f.read().split("\n")
            found = [l.split() for l in lines if l.startswith(want)]
            if found:
                return found[0]
            self.assertLess(time.time(), deadline, f"the job never logged {want!r}")
            self.assertIsNone(self.job.poll(), "the job ended early")
            time.sleep(0.05)


class Dump(StuckJob):
    def test_dump_names_the_sleeping_workers_stack_and_the_loops(self):
        self.start_job(8)
        main = int(self.job_log("main")[1])
        _, index, worker, _, _ = self.job_log("stuck")
        time.sleep(0.3)  # into the sleep
        r = run_lotus(["dump", str(main)], timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        blocks = processes(r.stdout)
        self.assertIn(main, blocks)
        self.assertIn(int(worker), blocks, r.stdout)
        # The worker's stack: the sleeping function at its time.sleep line, called by __getitem__ for that index.
        sleeping = [s for s in thread_stacks(blocks[int(worker)]) if s and s[0].startswith("stall ")]
        self.assertEqual(len(sleeping), 1, blocks[int(worker)])
        stack = sleeping[0]
        self.assertTrue(stack[0].startswith(f"stall ({JOB}:{line_of('time.sleep(seconds)')})"), stack[0])
        self.assertEqual(stack[1], f"StuckDataset.__getitem__ ({JOB}:{line_of('stall(self.seconds)')}) idx={index}")
        self.assertTrue(any(f.startswith("_worker_loop ") for f in stack), stack)
        self.assertIn(", in clock_nanosleep", blocks[int(worker)])
        self.assertIn("__clock_nanosleep", blocks[int(worker)])  # its native stack
        # The training loop waits for the batch: its stack runs from main's for loop into the DataLoader.
        loop = [s for s in thread_stacks(blocks[main]) if any(f.startswith(f"main ({JOB}:") for f in s)]
        self.assertEqual(len(loop), 1, blocks[main])
        self.assertTrue(any("_next_data" in f for f in loop[0]), loop[0])
        self.assertIn(f"main ({JOB}:{line_of('for batch in loader')})", loop[0])
        # Nothing was attached or stopped: the job runs to its end after its sleep.
        self.assert_detached()
        self.job_log("done", timeout=60)
        self.assertEqual(self.job.wait(timeout=30), 0, self.job.stderr.read().decode())

    def test_bad_input(self):
        r = run_lotus(["dump"])
        self.assertEqual(r.returncode, 2, r.stderr)
        r = run_lotus(["dump", "abc"])
        self.assertEqual(r.returncode, 2, r.stderr)
        r = run_lotus(["dump", "999999999"])
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertEqual(r.stderr, "lotus-bpf: no such process: 999999999\n")
        sleeper = subprocess.Popen(["sleep", "30"])
        try:
            r = run_lotus(["dump", str(sleeper.pid)])
        finally:
            sleeper.kill()
            sleeper.wait()
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("is not a CPython process", r.stderr)


class LiveWatch(StuckJob):
    def trace(self, sleep, *flags, job_args=()):
        """Launches the job under lotus-bpf; returns (stuck lines with the monotonic time each arrived, stderr,
        stdout, exit status)."""
        self.log = self.path("job.log")
        proc = subprocess.Popen([LOTUS, "-o", self.path("t.json")] + list(flags) +
                                ["--", PY, JOB, "--log", self.log, "--sleep", str(sleep)] + list(job_args),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.job = proc
        said, err = [], []
        for line in proc.stderr:
            err.append(line)
            if " stuck: " in line or " resumed at " in line:
                said.append((time.monotonic(), line))
        out = proc.stdout.read()
        proc.stdout.close()
        return said, "".join(err), out, proc.wait(timeout=60)

    def test_a_worker_sleeping_in_one_sample_is_named_live_with_its_stack(self):
        said, err, out, rc = self.trace(8, "--stuck-after", "3s", "--summary-json", self.path("s.json"), "--html",
                                        self.path("r.html"))
        self.assertEqual(rc, 0, err)
        _, index, worker, started, _ = self.job_log("stuck")
        stuck = [(t, l) for t, l in said if " stuck: " in l]
        self.assertEqual(len(stuck), 1, err)  # the worker alone: the loop waits, the other worker is idle
        t, line = stuck[0]
        self.assertIn(f"(PID {worker}) stuck: ", line)
        self.assertIn("threshold 3.0 s: --stuck-after", line)
        # Named within 15 s of the sleep's start (the job's own CLOCK_MONOTONIC stamp), and not before 3 s.
        delay = t - float(started)
        self.assertGreaterEqual(delay, 2.9, err)
        self.assertLess(delay, 5.0, err)
        # Its stack follows that line: the sleeping function at its time.sleep line, __getitem__ with the index.
        after = err[err.index(line) + len(line):]
        self.assertIn(f"    stall ({JOB}:{line_of('time.sleep(seconds)')})\n", after)
        self.assertIn(f"    StuckDataset.__getitem__ ({JOB}:{line_of('stall(self.seconds)')}) idx={index}\n", after)
        self.assertIn("native (in clock_nanosleep):", after)
        resumed = [l for _, l in said if " resumed at " in l]
        self.assertEqual(len(resumed), 1, err)
        self.assertIn(f"(PID {worker}) resumed at ", resumed[0])
        seconds = float(re.search(r"after ([\d.]+) s without", resumed[0]).group(1))
        self.assertGreater(seconds, 7.5, resumed[0])
        self.assertLess(seconds, 9.5, resumed[0])
        # The summary's note: which process, from when, how long, where.
        notes = [l for l in out.splitlines() if f"(PID {worker}) was stuck" in l]
        self.assertEqual(len(notes), 1, out)
        self.assertIn(f"idx={index}", notes[0])
        self.assertIn("stall (", notes[0])
        # The summary JSON and the HTML report say the same.
        with open(self.path("s.json")) as f:
            (row,) = json.load(f)["stuck"]
        self.assertEqual((row["pid"], row["op"]), (int(worker), None))
        self.assertIn(f"StuckDataset.__getitem__ ({JOB}:{line_of('stall(self.seconds)')}) idx={index}", row["stack"])
        self.assertAlmostEqual(row["end_s"] - row["since_s"], seconds, delta=0.2)
        self.assertEqual(row["threshold_s"], 3.0)
        self.assertLess(row["said_s"] - row["since_s"], 5.0)
        with open(self.path("r.html")) as f:
            page = f.read()
        self.assertIn('<h2 id="stuck">Stuck processes</h2>', page)
        self.assertIn(f"(PID {worker})", page[page.index('id="stuck"'):])

    def test_a_worker_sleeping_in_an_op_is_named_with_its_sample_and_op(self):
        said, err, out, rc = self.trace(5, "--stuck-after", "2", "--summary-json", self.path("s.json"),
                                        job_args=["--stuck-in", "op"])
        self.assertEqual(rc, 0, err)
        _, index, worker, started, _ = self.job_log("stuck")
        stuck = [(t, l) for t, l in said if " stuck: " in l]
        self.assertEqual(len(stuck), 1, err)
        t, line = stuck[0]
        self.assertIn(f"(PID {worker}) stuck: ", line)
        self.assertIn(f", sample {index}, op Stall;", line)
        self.assertLess(t - float(started), 4.0, err)
        after = err[err.index(line) + len(line):]
        self.assertIn(f"    Stall.__call__ ({JOB}:{line_of('stall(seconds=self.seconds)')})\n", after)
        notes = [l for l in out.splitlines() if f"(PID {worker}) was stuck" in l]
        self.assertEqual(len(notes), 1, out)
        self.assertIn(f"sample {index}, op Stall", notes[0])
        with open(self.path("s.json")) as f:
            (row,) = json.load(f)["stuck"]
        self.assertEqual((row["pid"], row["sample"], row["op"]), (int(worker), int(index), "Stall"))

    def test_a_pause_under_the_default_threshold_is_not_named(self):
        said, err, out, rc = self.trace(4)
        self.assertEqual(rc, 0, err)
        self.job_log("stuck")
        self.assertEqual(said, [], err)
        self.assertNotIn("was stuck", out)
