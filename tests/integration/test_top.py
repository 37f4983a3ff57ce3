"""`lotus-bpf top` in a real terminal: tmux runs it against the bundled example's training job (attach by PID);
the test reads the screen as a user sees it, requires live rows that refresh, quits with `q` (and with Ctrl-C),
and checks that the terminal is restored, the exit status is 0, nothing stays attached and the job runs on."""
import os
import re
import shutil
import subprocess
import time

from harness import EXAMPLE, LOTUS, OPS, PY, BpfTestCase, dataset, kill_group

SOCKET = "lotus-bpf-test"


def tmux(*args):
    return subprocess.run(["tmux", "-L", SOCKET] + list(args), capture_output=True, text=True, timeout=30)


def screen(session):
    return tmux("capture-pane", "-p", "-t", session).stdout


def fields(text, name):
    """The numbers of the row that starts with `name`."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return line[len(name):].split()
    return None


class Top(BpfTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not shutil.which("tmux"):
            raise AssertionError("tmux is missing: scripts/install-deps.sh installs it")

    def setUp(self):
        super().setUp()
        with open(self.path("job.log"), "w") as log:
            self.job = subprocess.Popen([PY, "-u", EXAMPLE, dataset(128), "--epochs", "1000", "--workers", "2"],
                                        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + 60
        while "train.py: pid" not in self.job_log():
            self.assertLess(time.time(), deadline, "the job did not start")
            time.sleep(0.1)

    def job_log(self):
        with open(self.path("job.log")) as f:
            return f.read()

    def tearDown(self):
        tmux("kill-server")
        kill_group(self.job)
        super().tearDown()

    def start_top(self, session):
        done = self.path(session + ".exit")
        # After top: its exit status, then the terminal's modes (to see that they were restored).
        tmux("new-session", "-d", "-s", session, "-x", "150", "-y", "45",
             f"{LOTUS} top --pid {self.job.pid}; echo EXIT=$? > {done}.tmp; stty -a >> {done}.tmp; "
             f"mv {done}.tmp {done}; sleep 600")
        return done

    def wait_for_rows(self, session, after_s=0.0):
        """The screen once it shows a frame with every op's row, the workers and a positive rate, taken later than
        `after_s` seconds of tracing."""
        deadline = time.time() + 60
        while time.time() < deadline:
            text = screen(session)
            head = re.search(r"lotus-bpf top\s+PID (\d+)\s+CPython \S+\s+([\d.]+) s", text)
            rate = re.search(r"samples/s ([\d.]+) \(last \d s\)\s+samples (\d+)", text)
            if head and rate and float(head.group(2)) > after_s and float(rate.group(1)) > 0 and \
                    all(fields(text, op) for op in OPS) and fields(text, "worker 0") and fields(text, "worker 1"):
                self.assertEqual(int(head.group(1)), self.job.pid)
                return text, float(head.group(2))
            time.sleep(0.3)
        self.fail("no live rows in time:\n" + screen(session))

    def wait_exit(self, done):
        deadline = time.time() + 30
        while not os.path.exists(done):
            self.assertLess(time.time(), deadline, "lotus-bpf top did not exit")
            time.sleep(0.1)
        with open(done) as f:
            return f.read()

    def test_live_rows_refresh_and_q_quits(self):
        done = self.start_top("q")
        first, t1 = self.wait_for_rows("q")
        second, t2 = self.wait_for_rows("q", after_s=t1 + 0.5)  # refreshed: a later frame
        self.assertGreater(t2, t1)
        for text in (first, second):
            # every sample runs each op once, so each op's calls equal the whole pipeline's (within the frame's
            # instant: at most one sample per worker may be between its ops)
            calls = int(fields(text, "sample (whole pipeline)")[3])
            for op in OPS:
                row = fields(text, op)  # calls/s, mean ms (window), mean ms (all), calls, time %
                self.assertGreater(float(row[0]), 0, text)
                self.assertLessEqual(abs(int(row[3]) - calls), 2, text)
            for w in ("worker 0", "worker 1"):
                busy = fields(text, w)[1]
                self.assertTrue(busy == "-" or 0 <= int(busy) <= 100, text)
        self.assertIn("main waiting for data", second)
        tmux("send-keys", "-t", "q", "q")
        out = self.wait_exit(done)
        self.assertIn("EXIT=0", out)
        # the terminal is back in canonical mode with echo
        self.assertRegex(out, r"(?<!-)icanon")
        self.assertRegex(out, r"(?<![-\w])echo(?!\w)")
        after = screen("q")
        self.assertIn("lotus-bpf top", after)  # the last view stays on the normal screen
        self.assert_detached()
        self.assertIsNone(self.job.poll(), "the traced job died")
        size = os.path.getsize(self.path("job.log"))
        time.sleep(2)
        self.assertGreater(os.path.getsize(self.path("job.log")), size, "the job stopped making progress")

    def test_ctrl_c_quits_too(self):
        done = self.start_top("c")
        self.wait_for_rows("c")
        tmux("send-keys", "-t", "c", "C-c")
        out = self.wait_exit(done)
        self.assertIn("EXIT=0", out)
        self.assertRegex(out, r"(?<!-)icanon")
        self.assert_detached()
        self.assertIsNone(self.job.poll(), "the traced job died")
