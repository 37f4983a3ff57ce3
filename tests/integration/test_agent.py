"""lotus-bpf agent: the node's service attaches by itself to each PyTorch training process as it starts, serves
every job's metrics with its own labels on one endpoint, detaches from each when it ends, keeps a record file per
job, and on SIGTERM detaches from everything while the jobs go on."""
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

from harness import EXAMPLE, LOTUS, PY, BpfTestCase, dataset, lotus_programs_loaded, read_lines, run_lotus

IMAGES = 128
PROMTOOL = "/usr/bin/promtool"  # Debian's prometheus package, as test_metrics.py
# Runs a script as `python3 SCRIPT ARGS` would, its command line first rewritten in place as setproctitle does (the
# process's argument area, through /proc/self/mem): TITLE_HEX's bytes, NUL-padded to the area's length.
RETITLE = """
import os, runpy, sys
title = bytes.fromhex(os.environ.pop("TITLE_HEX"))
with open("/proc/self/stat", "rb") as f:
    fields = f.read().rsplit(b")", 1)[1].split()
start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48 and 49
assert len(title) < end - start, (title, end - start)
with open("/proc/self/mem", "r+b", buffering=0) as mem:
    mem.seek(start)
    mem.write(title.ljust(end - start, b"\\0"))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def series(text, family):
    """[(labels dict, value)] of a family's samples in an exposition."""
    out = []
    for line in text.splitlines():
        if not line.startswith(family + "{"):
            continue
        labels, value = line[len(family) + 1:].rsplit("} ", 1)
        d = {}
        for part in labels.split('",'):
            k, v = part.split('="', 1)
            d[k] = v.rstrip('"')
        out.append((d, float(value)))
    return out


class AgentTest(BpfTestCase):
    def start_agent(self, *extra):
        self.port = free_port()
        self.agent_log = self.path("agent.log")
        self.agent_err = open(self.agent_log, "w")
        # --match: this test's own jobs only (their command lines name this test's directory)
        agent = subprocess.Popen([LOTUS, "agent", "--metrics", f"127.0.0.1:{self.port}", "--match", f"*{self.tmp}*",
                                  "--scan-interval", "0.2", *extra], stderr=self.agent_err)
        self.addCleanup(self.agent_err.close)
        self.wait_said("watching for PyTorch training processes")
        return agent

    def said(self):
        with open(self.agent_log) as f:
            return f.read()

    def wait_said(self, text, timeout=60):
        deadline = time.time() + timeout
        while text not in self.said():
            self.assertLess(time.time(), deadline, f"the agent did not say {text!r}:\n{self.said()}")
            time.sleep(0.1)

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            return r.read().decode()

    def job(self, name, epochs=1, env=None, title=None):
        """The example, held before its first epoch until DIR/go-0 exists (so the agent is attached first); title:
        the command line it shows instead of its own (bytes), set before it imports torch."""
        steps = self.path(name)
        os.makedirs(steps)
        log = os.path.join(steps, "batches.log")
        pre = []
        if title is not None:
            pre = [self.path(f"retitle-{name}.py")]
            with open(pre[0], "w") as f:
                f.write(RETITLE)
            env = {**(env or os.environb), b"TITLE_HEX": title.hex().encode()}
        proc = subprocess.Popen([PY, *pre, EXAMPLE, dataset(IMAGES), "--epochs", str(epochs), "--workers", "2",
                                 "--steps", steps, "--log", log], stdout=subprocess.DEVNULL, env=env)
        return proc, steps, log

    def test_two_jobs_one_after_the_other_each_with_its_labels(self):
        records = self.path("records")
        os.makedirs(records)
        agent = self.start_agent("--record-dir", records, "--keep-finished", "600")
        try:
            # A CPython process of this test without torch: not a job.
            bystander = subprocess.Popen([PY, "-c", "import time; time.sleep(3)", self.tmp])
            seen = []
            for name in ("first", "second"):
                proc, steps, log = self.job(name)
                self.wait_said(f"tracing PID {proc.pid} ")
                open(os.path.join(steps, "go-0"), "w").close()
                self.assertEqual(proc.wait(timeout=120), 0)
                self.wait_said(f"detached from PID {proc.pid} (status 0)")
                # Detached: nothing of lotus-bpf stays loaded between jobs.
                self.assert_detached("the agent left a finished job's probes attached")
                seen.append((proc.pid, len(read_lines(log))))
            bystander.wait(timeout=30)
            text = self.metrics()
        finally:
            agent.send_signal(signal.SIGTERM)
            self.assertEqual(agent.wait(timeout=30), 0)
        self.assertNotIn(f"PID {bystander.pid}", self.said())
        # Each job's series carry its own labels, with its own exact figures.
        info = series(text, "lotus_job_info")
        by_pid = {int(l["pid"]): l for l, v in info}
        self.assertEqual(sorted(by_pid), sorted(pid for pid, n in seen), info)
        ids = {by_pid[pid]["lotus_job_id"] for pid, n in seen}
        self.assertEqual(len(ids), 2, info)
        for pid, batches in seen:
            labels = by_pid[pid]
            self.assertEqual(labels["lotus_job"], "train.py")
            mine = lambda fam: sum(v for l, v in series(text, fam) if l.get("lotus_job_id") == labels["lotus_job_id"])
            self.assertEqual(mine("lotus_samples_total"), IMAGES)
            self.assertEqual(mine("lotus_batches_consumed_total"), batches)
            self.assertEqual(batches, IMAGES // 32)
        # One record file per job, which replays to the same figures.
        files = sorted(os.listdir(records))
        self.assertEqual(len(files), 2, files)
        for f in files:
            r = run_lotus(["report", os.path.join(records, f), "--summary-json", self.path("s.json")])
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(self.path("s.json")) as fh:
                self.assertEqual(json.load(fh)["throughput"]["samples"], IMAGES)
        self.assertIn("stopped (2 job(s) traced)", self.said())
        self.assert_detached()

    def test_two_jobs_of_equal_labels_one_ending_first(self):
        """srun's two tasks of one job on a node: one script, one SLURM_JOB_ID. The first ends while the second
        works, its series taken out at once (--keep-finished 0): the agent stays up, the second's series go on."""
        agent = self.start_agent("--keep-finished", "0")
        env = {**os.environ, "SLURM_JOB_ID": "4242"}
        (first, steps0, log0), (second, steps1, log1) = jobs = [self.job("task0", env=env),
                                                                  self.job("task1", epochs=2, env=env)]
        try:
            for proc, steps, log in jobs:
                self.wait_said(f"tracing PID {proc.pid} ")
            for steps in (steps0, steps1):
                open(os.path.join(steps, "go-0"), "w").close()
            self.assertEqual(first.wait(timeout=120), 0)
            self.wait_said(f"detached from PID {first.pid} (status 0)")
            deadline = time.time() + 30  # its series gone (the agent's next reap)
            while f'pid="{first.pid}"' in self.metrics():
                self.assertLess(time.time(), deadline, "the first job's series stayed")
                time.sleep(0.2)
            # The second, between its epochs: its own series, exact, from one endpoint still up.
            while len(read_lines(log1)) < IMAGES // 32:
                self.assertIsNone(second.poll(), "the second job ended before its second epoch")
                time.sleep(0.05)
            deadline = time.time() + 30
            while True:
                text = self.metrics()
                mine = series(text, "lotus_samples_total")
                if sum(v for l, v in mine) == IMAGES or time.time() > deadline:
                    break
                time.sleep(0.2)
            self.assertEqual({l["pid"] for l, v in mine}, {str(second.pid)}, text)
            self.assertEqual(sum(v for l, v in mine), IMAGES, text)
            self.assertEqual({(l["lotus_job"], l["lotus_job_id"]) for l, v in mine}, {("train.py", "4242")})
            open(os.path.join(steps1, "go-1"), "w").close()
            self.assertEqual(second.wait(timeout=120), 0)
            self.wait_said(f"detached from PID {second.pid} (status 0)")
            self.assertIsNone(agent.poll(), self.said())
        finally:
            agent.send_signal(signal.SIGTERM)
            rc = agent.wait(timeout=30)
            for proc, steps, log in jobs:
                if proc.poll() is None:
                    proc.kill()
        self.assertEqual(rc, 0, self.said())
        self.assertEqual(len(read_lines(log1)), 2 * IMAGES // 32)
        self.assertIn("stopped (2 job(s) traced)", self.said())

    def test_a_job_naming_a_path_or_bytes_keeps_its_record_in_the_dir_and_promtool_clean(self):
        """A job that shows itself as `python3 -m ../../x<0xff><ESC>]0;x<BEL>` (setproctitle can), with such a
        SLURM_JOB_ID too: its record stays in --record-dir under a safe name, 0600; its labels are UTF-8."""
        records = self.path("records")
        os.makedirs(records)
        agent = self.start_agent("--record-dir", records, "--keep-finished", "600")
        hostile = b"\xff\x1b]0;x\x07"
        title = b"python3\0-m\0../../x" + hostile + b"\0" + self.tmp.encode() + b"\0"
        env = {**os.environb, b"SLURM_JOB_ID": hostile}
        proc, steps, log = self.job("hostile", env=env, title=title)
        try:
            self.wait_said(f"tracing PID {proc.pid} ")
            open(os.path.join(steps, "go-0"), "w").close()
            self.assertEqual(proc.wait(timeout=120), 0)
            self.wait_said(f"detached from PID {proc.pid} (status 0)")
            text = self.metrics()
        finally:
            agent.send_signal(signal.SIGTERM)
            self.assertEqual(agent.wait(timeout=30), 0)
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(os.listdir(records), ["x___0_x_-___0_x_.lbt"])
        path = os.path.join(records, "x___0_x_-___0_x_.lbt")
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        # (where the name taken as it was would have put it: two levels up from the directory)
        up = os.path.dirname(os.path.dirname(records)).encode()
        self.assertFalse([f for f in os.listdir(up) if f.startswith(b"x" + hostile)])
        r = run_lotus(["report", path, "--summary-json", self.path("s.json")])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("s.json")) as fh:
            self.assertEqual(json.load(fh)["throughput"]["samples"], IMAGES)
        # The labels: the bytes that are no UTF-8 and the controls as U+FFFD; promtool finds nothing to say.
        info = [l for l, v in series(text, "lotus_job_info") if l["pid"] == str(proc.pid)]
        self.assertEqual(len(info), 1, text)
        self.assertEqual(info[0]["lotus_job"], "../../x\ufffd\ufffd]0;x\ufffd")
        self.assertEqual(info[0]["lotus_job_id"], "\ufffd\ufffd]0;x\ufffd")
        self.assertNotIn("\x1b", text)
        lint = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        self.assertEqual(lint.stdout + lint.stderr, "", lint.stdout + lint.stderr)

    def test_sigterm_detaches_everything_and_the_job_goes_on(self):
        agent = self.start_agent()
        proc, steps, log = self.job("long", epochs=3)
        try:
            self.wait_said(f"tracing PID {proc.pid} ")
            open(os.path.join(steps, "go-0"), "w").close()
            while not read_lines(log):
                self.assertIsNone(proc.poll(), "the job ended before its first batch")
                time.sleep(0.05)
            agent.send_signal(signal.SIGTERM)
            self.assertEqual(agent.wait(timeout=30), 0)
            self.assertIn(f"detached from PID {proc.pid}", self.said())
            self.assert_detached("the agent left probes attached after SIGTERM")
            # Progress, not liveness: the job goes on to its last batch without the agent.
            open(os.path.join(steps, "go-1"), "w").close()
            open(os.path.join(steps, "go-2"), "w").close()
            self.assertEqual(proc.wait(timeout=180), 0)
        finally:
            if proc.poll() is None:
                proc.kill()
        self.assertEqual(len(read_lines(log)), 3 * IMAGES // 32)

    def test_a_port_in_use_or_a_missing_record_dir_is_one_line(self):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            r = run_lotus(["agent", "--metrics", f"127.0.0.1:{busy.getsockname()[1]}"], timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        r = run_lotus(["agent", "--metrics", "127.0.0.1:0", "--record-dir", self.path("nowhere")], timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a directory", r.stderr)
