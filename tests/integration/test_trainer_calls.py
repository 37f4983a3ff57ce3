"""--trainer-calls: a training process that iterates DataLoaders with workers has its object calls (its model's
modules) left unprobed, while every batch, wait, collate, loader and op of the workers stays exact; a loader
without workers brings the probe back; the summary says from when and until when, and what that hides. On
Debian's CPython, torch 1.13 and torchvision 0.14; the workload's in-process logs are the ground truth."""
import json
import os
import unittest

from harness import (BATCH, IMAGES, OPS, PY, WORKLOAD, BpfTestCase, assert_dataloader_exact, assert_waits_match,
                     dataset, load_trace, read_lines, run_lotus, spans)

BATCHES = IMAGES // BATCH


class TrainerCalls(BpfTestCase):
    def job(self, *args, epochs=2, lotus=()):
        """The workload traced with 2 workers, its loop running Compose([BatchScale]) on each training batch (a
        pipeline of the training process itself, logged): (data, trace, summary JSON, stdout, batch-transform log
        lines, root pid)."""
        data = dataset(IMAGES)
        out, js = self.path("trace.json"), self.path("summary.json")
        self.waits, calls = self.path("waits.log"), self.path("calls.log")
        for log in (self.waits, calls):
            if os.path.exists(log):
                os.remove(log)
        r = run_lotus(["-q", "-o", out, "--summary-json", js, *lotus, "--", PY, WORKLOAD, data, "--workers", "2",
                       "--batch-size", str(BATCH), "--epochs", str(epochs), "--wait-log", self.waits,
                       "--batch-transform", calls, *args])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        trace = load_trace(out)
        with open(js) as f:
            summary = json.load(f)
        return data, trace, js, summary, r.stdout, read_lines(calls), trace["otherData"]["target_pid"]

    @staticmethod
    def loop_calls(trace, root):
        """The BatchScale ops the trace holds of the training process: their starts, in s after the trace's t0."""
        return sorted(s["ts"] / 1e6 for s in spans(trace, "op", "BatchScale") if s["pid"] == root)

    def test_auto_leaves_the_loops_calls_unprobed_and_the_workers_exact(self):
        rec = self.path("run.lbt")
        data, trace, js, summary, stdout, calls, root = self.job(lotus=["--record", rec])
        assert_dataloader_exact(self, data, trace, 2, 2, IMAGES, BATCH, OPS, stdout, js)
        assert_waits_match(self, trace, self.waits, outliers=2)
        od = trace["otherData"]
        self.assertEqual(od["trainer_calls"], "auto")
        self.assertIsNone(od["trainer_calls_unavailable"])
        self.assertEqual(summary["run"]["object_calls_unprobed"], od["object_calls_unprobed"])
        [off] = od["object_calls_unprobed"]
        self.assertEqual((off["pid"], off["until_s"], off["batches_unprobed"]), (root, None, 0))
        # The loop ran BatchScale on every batch: none begun after the probe went is in the trace, and the probe
        # went within the first epoch's first batches (its first next() asked for it).
        self.assertEqual(len(calls), 2 * BATCHES)
        seen = self.loop_calls(trace, root)
        self.assertEqual([t for t in seen if t >= off["from_s"]], [])
        self.assertLess(len(seen), BATCHES)
        self.assertIn(f"main (PID {root}): its object calls were not probed from {off['from_s']:.2f} s on "
                      "(--trainer-calls auto, as it iterated DataLoaders with workers)", stdout)
        # The record file keeps the change where it happened: its replay says the same.
        replayed = self.path("replayed.json")
        r = run_lotus(["export", rec, "-o", self.path("replayed-trace.json"), "--summary-json", replayed])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(replayed) as f:
            self.assertEqual(json.load(f)["run"]["object_calls_unprobed"], od["object_calls_unprobed"])

    def test_off_stops_at_a_loader_without_workers_too(self):
        """--trainer-calls off, one loader without workers: the probe goes at its first next(), so of its samples
        at most those begun before then are in the trace; every wait stays exact; the next() calls begun after it
        went are counted and said."""
        data = dataset(IMAGES)
        out, js, waits = self.path("t.json"), self.path("s.json"), self.path("w.log")
        r = run_lotus(["-q", "-o", out, "--summary-json", js, "--trainer-calls", "off", "--", PY, WORKLOAD, data,
                       "--workers", "0", "--batch-size", str(BATCH), "--epochs", "1", "--wait-log", waits])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        trace = load_trace(out)
        root = trace["otherData"]["target_pid"]
        [off] = trace["otherData"]["object_calls_unprobed"]
        self.assertEqual((off["pid"], off["until_s"]), (root, None))
        assert_waits_match(self, trace, waits, outliers=2)
        self.assertEqual([s for s in spans(trace, "sample") if s["ts"] / 1e6 >= off["from_s"]], [])
        self.assertLess(len(spans(trace, "sample")), BATCH)
        # every next() begun after the probe began to go: all but the first (in which it was asked to go), the
        # StopIteration one too. (Those begun while the close waited for the kernel's grace periods were read
        # before the stop's record and were once not counted: 6 and 7 of 8 were seen, issue 79 item 6.)
        self.assertEqual(off["batches_unprobed"], BATCHES)
        self.assertIn(f"{off['batches_unprobed']} next() call(s) of a DataLoader without workers ran then: those "
                      "batches' ops are not in the trace", r.stdout)

    def test_on_probes_every_call(self):
        data, trace, js, summary, stdout, calls, root = self.job(epochs=1, lotus=["--trainer-calls", "on"])
        assert_dataloader_exact(self, data, trace, 1, 2, IMAGES, BATCH, OPS, stdout, js)
        self.assertEqual(trace["otherData"]["trainer_calls"], "on")
        self.assertEqual(trace["otherData"]["object_calls_unprobed"], [])
        self.assertEqual(len(self.loop_calls(trace, root)), len(calls))
        self.assertEqual(len(calls), BATCHES)
        self.assertNotIn("object calls were not probed", stdout)

    def test_a_loader_without_workers_brings_the_probe_back(self):
        """Each epoch, a val pass over a loader without workers (its pipeline runs in the training process): the
        probe comes back at its first next() for good, so the second epoch's loop calls and the second val pass
        are all seen; of the first val pass, at most the batches begun before the probe was back lack ops."""
        data, trace, js, summary, stdout, calls, root = self.job("--val", "--val-workers", "0")
        assert_dataloader_exact(self, data, trace, 2, 2, IMAGES, BATCH, OPS, stdout, js)
        [off] = trace["otherData"]["object_calls_unprobed"]
        self.assertEqual(off["pid"], root)
        self.assertIsNotNone(off["until_s"])
        self.assertLess(off["from_s"], off["until_s"])
        self.assertGreaterEqual(off["batches_unprobed"], 1)  # (the first val next() asked for it back)
        seen = self.loop_calls(trace, root)
        self.assertEqual([t for t in seen if off["from_s"] <= t < off["until_s"]], [])
        self.assertEqual(len([t for t in seen if t >= off["until_s"]]), BATCHES)  # the whole second epoch
        val_ops = [s for s in spans(trace, "op", "Resize") if s["pid"] == root]
        val_batch = 2 * BATCH
        self.assertLessEqual(len(val_ops), 2 * IMAGES)
        self.assertGreaterEqual(len(val_ops), 2 * IMAGES - val_batch * off["batches_unprobed"])
        self.assertIn(f"its object calls were not probed from {off['from_s']:.2f} s to {off['until_s']:.2f} s",
                      stdout)

    def test_span_keeps_every_call_probed_and_says_so(self):
        data, trace, js, summary, stdout, calls, root = self.job(epochs=1, lotus=["--span", "LoggedFolder.__len__"])
        od = trace["otherData"]
        self.assertIn("--span", od["trainer_calls_unavailable"])
        self.assertEqual(od["object_calls_unprobed"], [])
        self.assertEqual(len(self.loop_calls(trace, root)), BATCHES)
        self.assertIn("--trainer-calls auto: every object call of the training processes stayed probed", stdout)


if __name__ == "__main__":
    unittest.main()
