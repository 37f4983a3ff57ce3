"""Attach mode (lotus-bpf --pid) to jobs whose DataLoader workers are already alive."""
import os
import signal
import subprocess
import time
import unittest
from collections import Counter

from harness import (OPS, PY, WORKLOAD, BpfTestCase, assert_nested, assert_true_ids, dataset, load_trace, read_lines,
                     spans, start_lotus, wait_for_attach, wait_for_file)


class AttachMode(BpfTestCase):
    def start_job(self, n, *extra):
        self.sample_log = self.path("samples.log")
        self.ready = self.path("ready")
        self.hold = self.path("hold")
        job = subprocess.Popen([PY, WORKLOAD, dataset(n), "--workers", "2", "--batch-size", "32",
                                "--sample-log", self.sample_log, "--hold", self.hold, "--ready", self.ready, *extra],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (job.poll() is None and job.kill(), job.wait(), job.stderr.close()))
        return job

    def attach_and_release(self, job, out):
        """Attaches to the held job, lets it go on and waits for both to end; returns the summary printed."""
        tracer = start_lotus(["-q", "-o", out, "--pid", str(job.pid)])
        wait_for_attach(tracer)
        open(self.hold, "w").close()
        self.assertEqual(job.wait(timeout=120), 0, job.stderr.read())
        stdout, stderr = tracer.communicate(timeout=60)
        self.assertEqual(tracer.returncode, 0, stderr)
        return stdout

    def test_attach_after_batches_were_consumed_ids_are_true_or_absent(self):
        # 3 of 8 batches of the first epoch consumed before attaching: the rest of that epoch is traced with the
        # ids it can know (the first batch message the training loop reads names the batch), the next epoch whole.
        waits = self.path("waits.log")
        job = self.start_job(256, "--epochs", "2", "--pause-after", "3", "--wait-log", waits)
        wait_for_file(self.hold + ".paused")
        out = self.path("trace.json")
        stdout = self.attach_and_release(job, out)
        trace = load_trace(out)
        assert_true_ids(self, trace, waits)
        waits_traced = spans(trace, "wait")
        self.assertEqual(len(waits_traced), 5 + 8)
        self.assertEqual(sum(1 for w in waits_traced if w["args"].get("epoch") == 0), 8)  # the first whole epoch
        if any("batch" not in w["args"] for w in waits_traced):
            self.assertIn("before their index could be known", stdout)
        # one loader, one section: the pass in flight is its DataLoader's (its iterator held its dataset and sampler)
        self.assertIn("Includes the pass that was in flight when tracing began (5 of its batches consumed", stdout)
        self.assertNotIn("DataLoader ?", stdout)

    def test_two_loaders_holding_the_same_objects_stay_apart(self):
        # a val loader over the train loader's own dataset and batch_sampler: the pass in flight at attach could
        # be either's, so it is a section of its own, which says why (never joined on a guess)
        job = self.start_job(256, "--epochs", "2", "--pause-after", "3", "--val", "--val-same-sampler")
        wait_for_file(self.hold + ".paused")
        stdout = self.attach_and_release(job, self.path("trace.json"))
        self.assertIn("DataLoader ? of main (its iterator was made before tracing began)", stdout, stdout)
        # (or, where the second loader's holdings were read only after its __iter__ ended, that they could not be
        # told: under load the reading may come late)
        self.assertRegex(" ".join(stdout.split()), r"Not joined to a DataLoader: (DataLoaders 0 and 1 hold the same "
                         r"dataset and sampler: it could be either|what DataLoader 1 holds was not read while it ran: "
                         r"it could be that one)\.")
        self.assertNotIn("Includes the pass", stdout)

    def test_idle_prefetched_workers_exactly_the_samples_after_attach(self):
        n = 256
        job = self.start_job(n)
        wait_for_file(self.ready)
        before = read_lines(self.sample_log)
        self.assertEqual(len(before), 128)  # 2 workers x prefetch 2 x batch 32, all done before attach
        out = self.path("trace.json")
        stdout = self.attach_and_release(job, out)
        after = read_lines(self.sample_log)[len(before):]
        expected = sorted(int(i) for pid, i, ts in after)
        self.assertEqual(len(expected), n - 128)
        trace = load_trace(out)
        samples = spans(trace, "sample")
        self.assertEqual(sorted(s["args"]["sample"] for s in samples), expected)
        # op by op: each op once per sample, for exactly those samples
        by_op = Counter((s["name"], s["args"]["sample"]) for s in spans(trace, "op"))
        for op in OPS:
            self.assertEqual(sorted(i for (name, i), c in by_op.items() if name == op and c == 1), expected, op)
        self.assertEqual(sum(by_op.values()), len(OPS) * len(expected))
        # the workers that did the work were alive before attach, and are told apart by worker id
        pids = {int(pid) for pid, i, ts in after}
        self.assertEqual({s["pid"] for s in samples}, pids)
        names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(sorted(names[p] for p in pids), ["worker 0", "worker 1"])
        assert_nested(self, trace)
        self.assertIn("worker 0", stdout)
        self.assert_detached()

    def test_later_epochs_new_workers_are_followed(self):
        """Workers forked after attach (a new iterator per epoch) are traced from their first sample."""
        n = 64
        job = self.start_job(n, "--epochs", "3")
        wait_for_file(self.ready)
        before = len(read_lines(self.sample_log))
        out = self.path("trace.json")
        tracer = start_lotus(["-q", "-o", out, "--pid", str(job.pid)])
        wait_for_attach(tracer)
        open(self.hold, "w").close()
        self.assertEqual(job.wait(timeout=120), 0)
        tracer.communicate(timeout=60)
        self.assertEqual(tracer.returncode, 0)
        trace = load_trace(out)
        samples = spans(trace, "sample")
        self.assertEqual(before, n)  # epoch 0 was entirely prefetched before attach
        self.assertEqual(len(samples), 2 * n)
        self.assertEqual(len({s["pid"] for s in samples}), 4)  # two new workers per epoch
        self.assertEqual(Counter(s["args"]["sample"] for s in samples), Counter({i: 2 for i in range(n)}))


if __name__ == "__main__":
    unittest.main()
