"""Targets in containers: another pid namespace (unshare --pid --fork --mount-proc), launched and attached, and a
chroot'ed root (the modern stack's tests run there: test_modern). The trace names processes by the pids the host
sees, and the interpreter is found through /proc/PID/root or as the host names it."""
import os
import subprocess
import unittest
from collections import Counter

from harness import BpfTestCase, HERE, INTERPRETERS, children, load_trace, run_lotus, spans

PURE = os.path.join(HERE, "workloads", "pure_pipeline.py")
PY312 = INTERPRETERS["3.12"]
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc"]


class Containers(BpfTestCase):
    def check(self, trace, n, root):
        self.assertEqual(trace["otherData"]["target_pid"], root)
        per_pid = Counter(s["pid"] for s in spans(trace, "sample"))
        self.assertEqual(per_pid.pop(root), n)
        self.assertEqual(sorted(per_pid.values()), [n // 2, n // 2])
        self.assertEqual(Counter(s["name"] for s in spans(trace, "op")),
                         Counter({"Scale": 2 * n, "Shift": 2 * n, "Clip": 2 * n}))

    def test_launch_into_a_pid_namespace(self):
        # unshare forks the interpreter (pid 1 inside): launch mode follows the fork, and reports host pids
        n = 100
        out = self.path("ns.json")
        r = run_lotus(["-q", "-o", out, "--pipeline", "Pipeline", "--", *UNSHARE, PY312, PURE, str(n)])
        self.assertEqual(r.returncode, 0, r.stderr)
        trace = load_trace(out)
        root = trace["otherData"]["target_pid"]
        self.assertNotEqual(root, 1)
        self.check(trace, n, root)
        self.assert_detached()

    def test_attach_to_a_pid_namespace(self):
        job = subprocess.Popen([*UNSHARE, PY312, PURE, "--loop", "30"], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
        try:
            self.assertEqual(job.stdout.readline().strip(), "ready")
            host_pid = children(job.pid)[0]  # the interpreter, as the host sees it
            out = self.path("ns-attach.json")
            r = run_lotus(["-q", "-o", out, "--pipeline", "Pipeline", "--pid", str(host_pid), "-d", "2"])
            self.assertEqual(r.returncode, 0, r.stderr)
            trace = load_trace(out)
            self.assertEqual(trace["otherData"]["target_pid"], host_pid)
            samples = spans(trace, "sample")
            self.assertGreater(len(samples), 500)
            self.assertEqual({s["pid"] for s in samples}, {host_pid})
            ops = Counter(s["name"] for s in spans(trace, "op"))
            for op in ("Scale", "Shift", "Clip"):
                self.assertLessEqual(abs(ops[op] - len(samples)), 1)
            self.assert_detached()
        finally:
            os.killpg(job.pid, 9)
            job.wait()
            job.stdout.close()


if __name__ == "__main__":
    unittest.main()
