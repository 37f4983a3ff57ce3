"""Every supported CPython: a pure-Python pipeline (a user's Compose-like class of transform classes, run in the
main process and in two multiprocessing workers) gives exact span counts on each interpreter, static
(Debian's /usr/bin/python3.11) or shared libpython (pyenv)."""
import os
import unittest
from collections import Counter

from harness import WORKLOAD, BpfTestCase, assert_nested, load_trace, run_lotus, spans

PURE = os.path.join(os.path.dirname(WORKLOAD), "pure_pipeline.py")
INTERPRETERS = {
    "3.10": "/root/.pyenv/versions/3.10.13/bin/python3.10",
    "3.11": "/root/.pyenv/versions/3.11.7/bin/python3.11",
    "3.11-static": "/usr/bin/python3.11",
    "3.12": "/root/.pyenv/versions/3.12.1/bin/python3.12",
    "3.13": "/root/.pyenv/versions/3.13.0/bin/python3.13",
}


class Versions(BpfTestCase):
    def test_pure_python_pipeline_exact_on_every_interpreter(self):
        n = 200
        for name, exe in INTERPRETERS.items():
            with self.subTest(interpreter=name):
                if not os.access(exe, os.X_OK):
                    self.fail(f"{exe} is expected on these machines")
                out = self.path(f"trace-{name}.json")
                r = run_lotus(["-q", "-o", out, "--pipeline", "Pipeline", "--", exe, PURE, str(n)])
                self.assertEqual(r.returncode, 0, r.stderr)
                trace = load_trace(out)
                self.assertTrue(trace["otherData"]["python"].startswith(name.split("-")[0]), trace["otherData"])
                if name != "3.11-static":
                    self.assertIn("libpython", trace["otherData"]["interpreter"])
                self.assertEqual(trace["otherData"]["layout"], "_Py_DebugOffsets" if name == "3.13" else "table")
                root = trace["otherData"]["target_pid"]
                per_pid = Counter(s["pid"] for s in spans(trace, "sample"))
                self.assertEqual(per_pid.pop(root, 0), n)
                self.assertEqual(sorted(per_pid.values()), [n // 2, n // 2])
                self.assertEqual(Counter(s["name"] for s in spans(trace, "op")), Counter({"Scale": 2 * n, "Shift": 2 * n}))
                self.assertEqual(sorted(s["args"]["sample"] for s in spans(trace, "sample") if s["pid"] == root),
                                 list(range(n)))
                self.assertEqual(trace["otherData"]["lost_events"], 0)
                assert_nested(self, trace)
                self.assert_detached()

    def test_all_calls_sees_functions_called_only_from_python(self):
        work = os.path.join(os.path.dirname(WORKLOAD), "span_calls.py")
        for name in ("3.10", "3.12", "3.13"):
            with self.subTest(interpreter=name):
                out = self.path(f"all-{name}.json")
                r = run_lotus(["-q", "-o", out, "--all-calls", "--span", "helper", "--", INTERPRETERS[name], work])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(Counter(s["name"] for s in spans(load_trace(out), "py")), Counter({"helper": 300}))
                self.assertNotIn("never seen", r.stdout)
        # 3.11 has no way to un-inline calls here: refused with one line, nothing left attached or running
        r = run_lotus(["-q", "-o", self.path("x.json"), "--all-calls", "--", INTERPRETERS["3.11"], work])
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("not available for CPython 3.11", r.stderr)
        self.assert_detached()


if __name__ == "__main__":
    unittest.main()
