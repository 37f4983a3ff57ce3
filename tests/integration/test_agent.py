"""lotus-bpf agent: the node's service attaches by itself to each PyTorch training process as it starts, serves
every job's metrics with its own labels on one endpoint, detaches from each when it ends, keeps a record file per
job, and on SIGTERM detaches from everything while the jobs go on."""
import json
import os
import resource
import signal
import socket
import subprocess
import time
import urllib.request

from harness import (AGENT_PROGRAMS, BpfTestCase, EXAMPLE, LOTUS, PY, dataset, free_port, lotus_programs_loaded,
                     read_lines, run_lotus)

IMAGES = 128
PROMTOOL = "/usr/bin/promtool"  # Debian's prometheus package, as test_metrics.py
# A hard limit of open files with room for the agent (7 idle, 9 while it scans) and the 32 it wants free before a job
# starts, but not for a session's attach (about 50 more): the job runs out while attaching. Below, it is not started.
FD_LIMIT_ATTACH, FD_LIMIT_SHORT = 44, 30
# Between one record of the example's job (128 images, one epoch: about 40 KB, with each open's file size and the
# workers' first seconds' PSS readings) and two.
RECORD_MAX_MB = "0.06"
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
    def start_agent(self, *extra, preexec_fn=None, scan="0.2"):
        self.port = free_port()
        self.agent_log = self.path("agent.log")
        self.agent_err = open(self.agent_log, "w")
        # --match: this test's own jobs only (their command lines name this test's directory)
        agent = subprocess.Popen([LOTUS, "agent", "--metrics", f"127.0.0.1:{self.port}", "--match", f"*{self.tmp}*",
                                  "--scan-interval", scan, *extra], stderr=self.agent_err, preexec_fn=preexec_fn)
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

    def lines_about(self, pid):
        return [l for l in self.said().splitlines() if f"PID {pid} " in l]

    def skipped(self, text):
        """lotus_agent_jobs_skipped_total by reason."""
        return {l["reason"]: v for l, v in series(text, "lotus_agent_jobs_skipped_total")}

    def torch_sleeper(self, *prefix):
        """A CPython process that loaded torch (a job to the agent) and does nothing else, its command line naming
        this test's directory; prefix: how it is started (setpriv for another user)."""
        proc = subprocess.Popen([*prefix, PY, "-c", "import time, torch; time.sleep(120)", self.tmp],
                                stdout=subprocess.DEVNULL)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        return proc

    def assert_promtool_clean(self, text):
        lint = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        self.assertEqual(lint.stdout + lint.stderr, "", lint.stdout + lint.stderr)

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
                self.assert_detached("the agent left a finished job's probes attached", running=AGENT_PROGRAMS)
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
        # (their default ids are their start times in seconds: two jobs started in one second share one, and the
        # pid label keeps their series apart, as it does srun's two tasks of one job)
        for pid, batches in seen:
            labels = by_pid[pid]
            self.assertEqual(labels["lotus_job"], "train.py")
            mine = lambda fam: sum(v for l, v in series(text, fam)
                                   if l.get("lotus_job_id") == labels["lotus_job_id"] and l.get("pid") == str(pid))
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

    def test_two_plain_jobs_one_after_the_other_every_sample_counted(self):
        # Not held: each job is found as it execs (the exec watch) and attached as it imports torch, before its first
        # batch, so every sample of both is counted. (The scans alone, at --scan-interval 5, would miss both.)
        agent = self.start_agent("--keep-finished", "600", scan="5")
        try:
            seen = []
            for name in ("first", "second"):
                log = self.path(f"{name}.log")
                proc = subprocess.Popen([PY, EXAMPLE, dataset(IMAGES), "--workers", "2", "--log", log],
                                        stdout=subprocess.DEVNULL)
                self.assertEqual(proc.wait(timeout=120), 0)
                self.wait_said(f"detached from PID {proc.pid} (status 0)")
                seen.append((proc.pid, len(read_lines(log))))
            text = self.metrics()
        finally:
            agent.send_signal(signal.SIGTERM)
            self.assertEqual(agent.wait(timeout=30), 0)
        self.assertNotIn("scanning /proc", self.said())
        for pid, batches in seen:
            mine = lambda fam: sum(v for l, v in series(text, fam) if l.get("pid") == str(pid))
            self.assertEqual(mine("lotus_samples_total"), IMAGES, self.said())
            self.assertEqual(mine("lotus_batches_consumed_total"), batches)

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

    def test_max_jobs_skips_the_job_beyond_it_said_once_and_counted_and_the_first_goes_on(self):
        """--max-jobs 1, two jobs: the second is skipped (one line, the max_jobs count), for good: once the first
        ended, the second's next epoch's workers are not taken for jobs either. The first's figures are exact."""
        agent = self.start_agent("--max-jobs", "1", "--keep-finished", "600")
        first, steps0, log0 = self.job("first")
        second = None
        try:
            self.wait_said(f"tracing PID {first.pid} ")
            second, steps1, log1 = self.job("second", epochs=2)
            self.wait_said(f"PID {second.pid} (train.py ")
            open(os.path.join(steps0, "go-0"), "w").close()
            open(os.path.join(steps1, "go-0"), "w").close()
            self.assertEqual(first.wait(timeout=120), 0)
            self.wait_said(f"detached from PID {first.pid} (status 0)")
            while len(read_lines(log1)) < IMAGES // 32:  # the second's first epoch, then its second's workers
                self.assertIsNone(second.poll(), "the second job ended before its second epoch")
                time.sleep(0.05)
            open(os.path.join(steps1, "go-1"), "w").close()
            self.assertEqual(second.wait(timeout=120), 0)
            time.sleep(1)  # (scans after its last workers)
            text = self.metrics()
        finally:
            agent.send_signal(signal.SIGTERM)
            rc = agent.wait(timeout=30)
            for proc in (first, second):
                if proc and proc.poll() is None:
                    proc.kill()
        self.assertEqual(rc, 0, self.said())
        said = self.said()
        skips = [l for l in said.splitlines() if "skipped" in l]
        self.assertEqual(len(skips), 1, said)
        self.assertIn(f"PID {second.pid} (train.py ", skips[0])
        self.assertIn("skipped: --max-jobs 1 are traced already", skips[0])
        self.assertEqual(said.count("attaching to PID"), 1, said)
        self.assertEqual(self.skipped(text), {"max_jobs": 1, "user": 0, "cgroup": 0, "fds": 0}, text)
        mine = series(text, "lotus_samples_total")
        self.assertEqual({l["pid"] for l, v in mine}, {str(first.pid)}, text)
        self.assertEqual(sum(v for l, v in mine), IMAGES)
        self.assertEqual(sum(v for l, v in series(text, "lotus_batches_consumed_total")), len(read_lines(log0)))
        self.assertEqual(series(text, "lotus_agent_jobs"), [({"node": series(text, "lotus_job_info")[0][0]["node"]}, 0)])
        self.assertEqual(len(read_lines(log1)), 2 * IMAGES // 32)
        self.assertIn("stopped (1 job(s) traced)", said)
        self.assert_promtool_clean(text)
        self.assert_detached()

    def test_users_and_cgroup_choose_whose_jobs_are_traced(self):
        """--users root: a torch process of nobody's is skipped (user) while root's job, in the --cgroup given (the
        test's own), is traced with exact figures. A --cgroup the job is not under: skipped (cgroup)."""
        with open("/proc/self/cgroup") as f:
            own = f.read().splitlines()[0].split(":", 2)[2]  # (v2's one line, or a v1 controller's)
        agent = self.start_agent("--users", "root", "--cgroup", own, "--keep-finished", "600")
        theirs = self.torch_sleeper("setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups")
        proc, steps, log = self.job("mine")
        try:
            self.wait_said(f"tracing PID {proc.pid} ")
            open(os.path.join(steps, "go-0"), "w").close()
            self.assertEqual(proc.wait(timeout=120), 0)
            self.wait_said(f"detached from PID {proc.pid} (status 0)")
            self.wait_said(f"PID {theirs.pid} (")
            text = self.metrics()
        finally:
            agent.send_signal(signal.SIGTERM)
            self.assertEqual(agent.wait(timeout=30), 0)
            if proc.poll() is None:
                proc.kill()
        self.assertIsNone(theirs.poll())  # left alone: still running
        (line,) = self.lines_about(theirs.pid)
        self.assertIn("skipped: its user, 65534 (nobody), is not one of --users", line)
        self.assertEqual(self.skipped(text), {"user": 1, "cgroup": 0, "max_jobs": 0, "fds": 0}, text)
        self.assertEqual(sum(v for l, v in series(text, "lotus_samples_total") if l["pid"] == str(proc.pid)), IMAGES)
        self.assertEqual({l["pid"] for l, v in series(text, "lotus_job_info")}, {str(proc.pid)})
        theirs.kill()
        theirs.wait()

        agent = self.start_agent("--cgroup", "/lotus-test-no-such-cgroup")
        mine = self.torch_sleeper()
        try:
            self.wait_said(f"PID {mine.pid} (")
            text = self.metrics()
        finally:
            agent.send_signal(signal.SIGTERM)
            self.assertEqual(agent.wait(timeout=30), 0)
        (line,) = self.lines_about(mine.pid)
        self.assertIn("skipped: its cgroup is under no --cgroup", line)
        self.assertEqual(self.skipped(text)["cgroup"], 1, text)
        self.assertNotIn("attaching to", self.said())
        self.assert_detached()

    def test_a_job_short_of_file_descriptors_is_skipped_in_one_line_and_the_agent_goes_on(self):
        """Under a hard limit too low for a session: the job's attach runs out of descriptors (EMFILE), it is undone
        and skipped with one line (fds); the agent serves on, nothing stays attached, the job ends well, its next
        processes are no jobs. Lower still, the job is not started at all."""
        for limit, why in ((FD_LIMIT_ATTACH, f"skipped: file descriptors ran out while attaching (the agent's limit: "
                                             f"{FD_LIMIT_ATTACH}): raise its hard limit"),
                           (FD_LIMIT_SHORT, f"open of the agent's limit of {FD_LIMIT_SHORT}, and a job takes more "
                                            f"than 32): raise its hard limit")):
            agent = self.start_agent(preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit)))
            self.assertIn(f"file descriptors: {limit})", self.said())
            proc, steps, log = self.job(f"starved-{limit}", epochs=2)
            try:
                self.wait_said(f"PID {proc.pid} (train.py ")
                self.wait_said("skipped")
                for epoch in range(2):
                    open(os.path.join(steps, f"go-{epoch}"), "w").close()
                self.assertEqual(proc.wait(timeout=120), 0)
                time.sleep(1)  # (scans after its last workers)
                text = self.metrics()
                self.assertIsNone(agent.poll(), self.said())
                self.assert_detached("a session undone for file descriptors left programs attached",
                                     running=AGENT_PROGRAMS)
            finally:
                agent.send_signal(signal.SIGTERM)
                rc = agent.wait(timeout=30)
                if proc.poll() is None:
                    proc.kill()
            self.assertEqual(rc, 0, self.said())
            skips = [l for l in self.said().splitlines() if "skipped" in l]
            self.assertEqual(len(skips), 1, self.said())
            self.assertIn(f"PID {proc.pid} (train.py ", skips[0])
            self.assertIn(why, skips[0])
            self.assertEqual(self.skipped(text), {"fds": 1, "user": 0, "cgroup": 0, "max_jobs": 0}, text)
            self.assertNotIn("lotus_samples_total{", text)
            self.assertNotIn("tracing PID", self.said())
            self.assertNotIn("detached from", self.said())
            self.assertEqual(len(read_lines(log)), 2 * IMAGES // 32)
            self.assertIn("stopped (0 job(s) traced)", self.said())

    def test_record_max_mb_deletes_the_oldest_record_and_never_a_file_it_did_not_write(self):
        records = self.path("records")
        os.makedirs(records)
        decoy = os.path.join(records, "train.py-2020-01-01T00_00_00Z.lbt")  # the agent's pattern, not its file
        with open(decoy, "wb") as f:
            f.write(b"\0" * (3 << 20))
        os.utime(decoy, (0, 0))
        agent = self.start_agent("--record-dir", records, "--record-max-mb", RECORD_MAX_MB)
        files = []
        try:
            for name in ("older", "newer"):
                proc, steps, log = self.job(name)
                self.wait_said(f"tracing PID {proc.pid} ")
                (line,) = [l for l in self.lines_about(proc.pid) if "attaching to" in l]
                files.append(line.rsplit(", record ", 1)[1])
                open(os.path.join(steps, "go-0"), "w").close()
                self.assertEqual(proc.wait(timeout=120), 0)
                self.wait_said(f"detached from PID {proc.pid} (status 0)")
            self.wait_said(f"removed record {os.path.basename(files[0])} (")
        finally:
            agent.send_signal(signal.SIGTERM)
            self.assertEqual(agent.wait(timeout=30), 0)
        self.assertEqual(sorted(os.listdir(records)),
                         sorted([".lotus-agent-records", os.path.basename(decoy), os.path.basename(files[1])]))
        self.assertEqual(os.path.getsize(decoy), 3 << 20)
        self.assertLessEqual(os.path.getsize(files[1]), float(RECORD_MAX_MB) * (1 << 20))
        r = run_lotus(["report", files[1], "--summary-json", self.path("s.json")])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.said().count("removed record"), 1, self.said())
        # A later run takes the notes up: a smaller bound deletes the newer one too, never the decoy.
        agent = self.start_agent("--record-dir", records, "--record-max-mb", "0.001")
        agent.send_signal(signal.SIGTERM)
        self.assertEqual(agent.wait(timeout=30), 0)
        self.assertIn(f"removed record {os.path.basename(files[1])} (", self.said())
        self.assertEqual(sorted(os.listdir(records)), sorted([".lotus-agent-records", os.path.basename(decoy)]))

    def test_bad_users_cgroup_max_jobs_or_record_size_is_a_usage_error(self):
        for args in (["--users", "lotus-no-such-user"], ["--users", "root,lotus-no-such-user"],
                     ["--cgroup", "slurm/job_1"], ["--cgroup", "/slurm/../x"], ["--max-jobs", "0"],
                     ["--max-jobs", "-3"], ["--record-dir", self.tmp, "--record-max-mb", "-1"],
                     ["--record-dir", self.tmp, "--record-max-mb", "0"], ["--record-max-mb", "5"]):
            r = run_lotus(["agent", "--metrics", "127.0.0.1:0", *args], timeout=30)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, (args, r.stderr))
            self.assertTrue(r.stderr.startswith("lotus-bpf: --"), (args, r.stderr))
