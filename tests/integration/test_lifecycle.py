"""Stopping: target exit, Ctrl-C, SIGTERM, --duration; and Python processes that run no pipeline."""
import os
import signal
import subprocess
import threading
import time
import unittest

from harness import (PY, WORKLOAD, BpfTestCase, assert_nested, dataset, kill_group, load_trace, run_lotus, spans,
                     start_lotus, wait_for_attach)


class Lifecycle(BpfTestCase):
    def long_job(self):
        job = subprocess.Popen([PY, WORKLOAD, dataset(64), "--workers", "2", "--epochs", "1000"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        # Its whole group: a worker forked just before its parent was killed may never notice (torch's watchdog
        # takes the parent's pid from the worker's first getppid, 1 if the parent was already gone).
        self.addCleanup(lambda: kill_group(job))
        # Imports done (it prints its pid after them), then a first epoch: workers are running.
        while "epoch 0" not in job.stdout.readline():
            self.assertIsNone(job.poll(), "the job ended early")
        threading.Thread(target=lambda: job.stdout.read(), daemon=True).start()  # keep its pipe drained
        return job

    def stop_with(self, sig):
        job = self.long_job()
        out = self.path("trace.json.gz")
        tracer = start_lotus(["-q", "-o", out, "--pid", str(job.pid)])
        wait_for_attach(tracer)
        time.sleep(2)
        tracer.send_signal(sig)
        stdout, stderr = tracer.communicate(timeout=60)
        self.assertEqual(tracer.returncode, 0, stderr)
        self.assert_detached()
        trace = load_trace(out)
        self.assertGreater(len(spans(trace, "sample")), 10)
        assert_nested(self, trace)
        self.assertIn("RandomResizedCrop", stdout)
        time.sleep(0.5)
        self.assertIsNone(job.poll(), "the target must keep running after the tracer stops")
        return trace

    def test_sigint_flushes_and_detaches(self):
        trace = self.stop_with(signal.SIGINT)
        self.assertEqual(trace["otherData"]["stop_reason"], "interrupted")

    def test_sigterm_flushes_and_detaches(self):
        trace = self.stop_with(signal.SIGTERM)
        self.assertEqual(trace["otherData"]["stop_reason"], "terminated by signal")

    def test_duration(self):
        job = self.long_job()
        out = self.path("trace.json")
        t0 = time.time()
        r = run_lotus(["-q", "-o", out, "--pid", str(job.pid), "-d", "2"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(time.time() - t0, 30)
        self.assertGreater(len(spans(load_trace(out), "sample")), 10)
        self.assert_detached()

    def test_target_killed_mid_trace(self):
        job = self.long_job()
        out = self.path("trace.json")
        tracer = start_lotus(["-q", "-o", out, "--pid", str(job.pid)])
        wait_for_attach(tracer)
        time.sleep(2)
        job.kill()
        job.wait()
        stdout, stderr = tracer.communicate(timeout=60)
        self.assertEqual(tracer.returncode, 0, stderr)
        trace = load_trace(out)
        self.assertEqual(trace["otherData"]["stop_reason"], "target exited")
        self.assertGreater(len(spans(trace, "sample")), 10)
        self.assert_detached()

    def test_python_without_dataloader(self):
        out = self.path("trace.json")
        r = run_lotus(["-q", "-o", out, "--", PY, "-c", "import json\nfor i in range(2000): json.dumps({'a': i})"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("No pipeline was seen", r.stdout)
        trace = load_trace(out)
        self.assertEqual(spans(trace), [])
        self.assertEqual(trace["otherData"]["samples"], 0)
        self.assert_detached()

    def test_launch_mode_propagates_exit_status(self):
        r = run_lotus(["-q", "-o", self.path("t.json"), "--", PY, "-c", "raise SystemExit(3)"])
        self.assertEqual(r.returncode, 3)
        self.assertTrue(os.path.exists(self.path("t.json")))


if __name__ == "__main__":
    unittest.main()
