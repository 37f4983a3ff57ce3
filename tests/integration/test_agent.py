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

    def job(self, name, epochs=1):
        """The example, held before its first epoch until DIR/go-0 exists (so the agent is attached first)."""
        steps = self.path(name)
        os.makedirs(steps)
        log = os.path.join(steps, "batches.log")
        proc = subprocess.Popen([PY, EXAMPLE, dataset(IMAGES), "--epochs", str(epochs), "--workers", "2",
                                 "--steps", steps, "--log", log], stdout=subprocess.DEVNULL)
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
