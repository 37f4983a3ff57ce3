"""The stack users run today, on these machines: Debian unstable's CPython 3.14, torch 2.x and torchvision with
transforms v2, in the root that scripts/install-modern-stack.sh builds and keeps, run through chroot (the tracer
finds the interpreter through /proc/PID/root). v1 and v2 pipelines, PIL and torchvision.io decoding, 0/2/4
workers, persistent workers, pin_memory, spawn; launch and attach mode; exact against in-process ground truth."""
import json
import os
import subprocess
import unittest
from collections import Counter

from harness import (HERE, OPS, PIN_THREAD_SLACK_US, WORKLOAD, BpfTestCase, assert_containers, assert_dataloader_exact, assert_true_ids,
                     assert_retried_items, assert_two_views, assert_waits_match,
                     dataset, kill_group, load_trace, read_lines, run_lotus, spans, start_lotus, wait_for_attach,
                     wait_for_file)

ROOT = os.environ.get("LOTUS_MODERN_ROOT", "/var/cache/lotus-bpf/sid-root")
IN_ROOT = os.path.join(HERE, "in_root.sh")
V2_OPS = ["RandomResizedCrop", "RandomHorizontalFlip", "ToImage", "ToDtype", "Normalize"]
IMAGES, BATCH = 256, 32
DETECTION_OPS = ["ToImage", "RandomPhotometricDistort", "RandomZoomOut", "RandomHorizontalFlip", "SanitizeBoundingBoxes",
                 "ToDtype"]  # workloads/detection_job.py
GETITEMS_OPS = ["RandomResizedCrop", "ToImage", "ToDtype"]  # workloads/getitems_job.py


def in_root(*argv):
    return [IN_ROOT, ROOT, *argv]


class ModernStack(BpfTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not os.path.exists(os.path.join(ROOT, ".lotus-ready")):
            raise AssertionError(f"no modern stack at {ROOT}: scripts/install-modern-stack.sh builds it "
                                 "(scripts/test.sh runs it)")
        with open(os.path.join(ROOT, ".lotus-ready")) as f:
            cls.versions = f.read().split()  # python torch torchvision pillow

    def job(self, *args, epochs=2, workers=2, mode="launch"):
        """Runs the test workload in the root, traced; returns (trace, stdout, summary path, logs)."""
        data = dataset(IMAGES)
        out, summary = self.path("trace.json"), self.path("summary.json")
        logs = {k: self.path(f"{k}.log") for k in ("waits", "collates", "puts")}
        cmd = in_root("python3", WORKLOAD, data, "--workers", str(workers), "--batch-size", str(BATCH), "--epochs",
                      str(epochs), "--wait-log", logs["waits"], "--collate-log", logs["collates"],
                      "--put-log", logs["puts"], *args)
        r = run_lotus(["-q", "-o", out, "--summary-json", summary, "--", *cmd])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn(f"CPython {self.versions[0]}", r.stderr)
        trace = load_trace(out)
        self.assertEqual(trace["otherData"]["lost_events"], 0)
        return data, trace, r.stdout, summary, logs

    def exact(self, data, trace, stdout, summary, epochs, workers, ops):
        assert_dataloader_exact(self, data, trace, epochs, workers, IMAGES, BATCH, ops, stdout, summary)

    def test_v1_transforms(self):
        data, trace, stdout, summary, logs = self.job()
        self.exact(data, trace, stdout, summary, 2, 2, OPS)

    def test_v2_transforms_pil_decode(self):
        data, trace, stdout, summary, logs = self.job("--v2")
        self.exact(data, trace, stdout, summary, 2, 2, V2_OPS)
        self.batches_end_at_the_hand_over(trace, logs["collates"], logs["puts"])
        self.waits_match_in_process_next(trace, logs["waits"])

    def test_v2_transforms_tensor_decode(self):
        # torchvision.io reads and decodes the JPEG (its C++ opens the file): the loader still has its path
        data, trace, stdout, summary, logs = self.job("--v2", "--decode", "tensor")
        self.exact(data, trace, stdout, summary, 2, 2, V2_OPS)

    def test_v2_no_workers_and_four(self):
        for workers in (0, 4):
            with self.subTest(workers=workers):
                data, trace, stdout, summary, logs = self.job("--v2", workers=workers, epochs=1)
                self.exact(data, trace, stdout, summary, 1, workers, V2_OPS)

    def test_v2_persistent_workers_pin_memory(self):
        # (pin_memory without an accelerator: torch keeps the option and pins nothing)
        data, trace, stdout, summary, logs = self.job("--v2", "--persistent", "--pin-memory", epochs=3)
        self.exact(data, trace, stdout, summary, 3, 2, V2_OPS)
        self.assertEqual(len({b["pid"] for b in spans(trace, "batch")}), 2)

    def test_v2_pin_memory_thread(self):
        """pin_memory where an accelerator is (as in GPU training): torch's pin-memory thread reads every batch from
        the workers' result queue and hands it to next() through an in-process queue, so the training loop reads
        no batch message itself. Here torch is told an accelerator exists and its pinning hands batches over
        unchanged: the thread, its queues and next() are torch's own. Every wait is that next()'s batch."""
        data, trace, stdout, summary, logs = self.job("--v2", "--pin-memory", "--pin-thread")
        self.exact(data, trace, stdout, summary, 2, 2, V2_OPS)
        self.waits_match_in_process_next(trace, logs["waits"], PIN_THREAD_SLACK_US)

    def test_v2_in_order_false_pin_memory_thread(self):
        """in_order=False with torch's pin-memory thread: next() reads no batch message, and returns each batch as
        the thread relays it. lotus-bpf sees it when a next() returns before the batch next in index order was
        relayed (a loop that waits for each batch), or when a task goes to a worker out of turn (a loop with a
        300 ms step, which the thread keeps ahead of), and names the waits in arrival order from then on: every
        wait is that next()'s batch, except those named before it was seen, which the summary counts."""
        for step in ("0", "300"):
            with self.subTest(step_ms=step):
                self.in_order_false_pin_memory_thread(step)

    def in_order_false_pin_memory_thread(self, step):
        for k in ("waits", "collates", "puts"):  # the workload appends to them
            if os.path.exists(self.path(f"{k}.log")):
                os.remove(self.path(f"{k}.log"))
        data, trace, stdout, summary, logs = self.job("--v2", "--no-in-order", "--pin-memory", "--pin-thread",
                                                      "--step-ms", step)
        waits = read_lines(logs["waits"])
        self.assertTrue(any(int(b) < int(a[1]) for a, (e, b, *_) in zip(waits, waits[1:]) if a[0] == e),
                        "the loop never got a later batch first: nothing tested")
        measured = [(int(e), int(b), int(ns) / 1000.0) for e, b, ns, began in waits]
        traced = sorted(spans(trace, "wait"), key=lambda w: w["ts"])
        self.assertEqual(len(traced), len(measured))
        wrong = 0
        for w, (e, b, us) in zip(traced, measured):
            self.assertEqual(w["args"]["epoch"], e)
            self.assertLess(abs(w["dur"] - us), max(0.10 * us, PIN_THREAD_SLACK_US))
            wrong += w["args"].get("batch") != b
        with open(summary) as f:
            loader = [x for x in json.load(f)["loaders"] if x["loader"] == 0][0]["batches"]
        self.assertTrue(loader["arrival_order"])
        self.assertEqual(loader["misnamed"], wrong)
        self.assertIn("as they arrived (DataLoader(in_order=False))", stdout)

    def test_v2_target_transform_and_own_calls(self):
        """Two pipelines an item (v2 transform, target_transform) and an object of the dataset's own after
        super().__getitem__ (inlined Python-to-Python calls on 3.14): one sample an item, holding every op."""
        data, trace, stdout, summary, logs = self.job("--v2", "--target-transform", epochs=1)
        self.exact(data, trace, stdout, summary, 1, 2, V2_OPS + ["Offset", "LabelTensor", "Relabel"])

    def test_v2_two_views_of_each_item_are_one_sample(self):
        data, trace, stdout, summary, logs = self.job("--v2", "--two-views", epochs=1)
        assert_two_views(self, trace, IMAGES, BATCH, V2_OPS, summary)

    def test_v2_an_item_retried_after_its_pipeline_raised_is_one_sample(self):
        log = self.path("retries.log")
        data, trace, stdout, summary, logs = self.job("--v2", "--flaky", log, epochs=1)
        assert_retried_items(self, trace, log, IMAGES, BATCH, "RandomResizedCrop", "Normalize")

    def test_v2_no_batching(self):
        """DataLoader(batch_size=None): every sample a batch of one, with its wait, arrow and delay."""
        data, trace, stdout, summary, logs = self.job("--v2", "--no-batching", epochs=1)
        assert_dataloader_exact(self, data, trace, 1, 2, IMAGES, 1, V2_OPS, stdout, summary)
        self.waits_match_in_process_next(trace, logs["waits"], outliers=IMAGES // 50)  # as test_dataloader's
        self.assertIn("from a batch ready to its use", stdout)

    def test_v2_persistent_workers_left_mid_epoch(self):
        """The loop leaves every other epoch after 3 batches; the persistent iterator's next __iter__ drops what the
        workers still sent of it, here through torch's pin-memory thread, which relays the new epoch's batches (the
        loop's own drain, without it, is tested on torch 1.13 by test_dataloader: left out here for CI time).
        Every wait is its next()'s batch."""
        data, trace, stdout, summary, logs = self.job("--v2", "--persistent", "--break-after", "3", "--pin-memory",
                                                      "--pin-thread", epochs=4)
        self.waits_match_in_process_next(trace, logs["waits"], PIN_THREAD_SLACK_US)
        self.assertEqual(len(spans(trace, "wait")), 2 * (3 + IMAGES // BATCH))
        self.assertNotIn("as they arrived", stdout)

    def test_v2_detection_joint_transforms(self):
        """Detection: an image and its target dict (tv_tensors.BoundingBoxes) through one v2.Compose called with both,
        batched by a collate_fn function. Every item one sample with its six ops, in the process and with the index
        that made it, as long as the in-process timer around the pipeline call says."""
        data, log, out = dataset(IMAGES), self.path("samples.log"), self.path("detection.json")
        job = os.path.join(HERE, "workloads", "detection_job.py")
        r = run_lotus(["-q", "-o", out, "--", *in_root("python3", job, data, log, "--batch-size", "8")])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn(f"detection_job: {IMAGES} samples", r.stdout)
        trace = load_trace(out)
        self.assertEqual(trace["otherData"]["lost_events"], 0)
        measured = {(int(p), int(i)): (int(b) - int(a)) / 1000.0 for p, i, a, b in read_lines(log)}
        traced = {(s["pid"], s["args"]["sample"]): s["dur"] for s in spans(trace, "sample")}
        self.assertEqual(len(measured), IMAGES)
        self.assertEqual(set(traced), set(measured))
        apart = [(k, traced[k], measured[k]) for k in measured
                 if traced[k] > measured[k] + 50 or traced[k] < measured[k] - max(0.05 * measured[k], 200)]
        self.assertLessEqual(len(apart), IMAGES // 100, apart)  # (the timer's own preemption, as for the waits)
        ops = spans(trace, "op")
        self.assertEqual(Counter(o["name"] for o in ops), Counter({name: IMAGES for name in DETECTION_OPS}))
        self.assertEqual(set(Counter(o["args"]["sample_id"] for o in ops).values()), {len(DETECTION_OPS)})
        self.assertEqual([b["args"]["samples"] for b in spans(trace, "batch")], [8] * (IMAGES // 8))
        self.assertEqual(len(spans(trace, "wait")), IMAGES // 8)

    def test_getitems_samples_carry_no_index(self):
        """A dataset with __getitems__: the fetcher hands it a batch's indices at once, and no __getitem__ is above
        its pipeline calls. Every sample is there, with its ops, as long as the in-process timer says, in its
        worker's order; none carries an index, for none can be read."""
        data, log, out = dataset(IMAGES), self.path("samples.log"), self.path("getitems.json")
        job = os.path.join(HERE, "workloads", "getitems_job.py")
        r = run_lotus(["-q", "-o", out, "--", *in_root("python3", job, data, log)])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn(f"getitems_job: {IMAGES} samples", r.stdout)
        trace = load_trace(out)
        self.assertEqual(trace["otherData"]["lost_events"], 0)
        samples = spans(trace, "sample")
        self.assertEqual([s for s in samples if "sample" in s["args"]], [])
        measured, traced = {}, {}
        for pid, i, a, b in read_lines(log):
            measured.setdefault(int(pid), []).append((int(b) - int(a)) / 1000.0)
        for s in sorted(samples, key=lambda s: s["ts"]):
            traced.setdefault(s["pid"], []).append(s["dur"])
        self.assertEqual({p: len(d) for p, d in traced.items()}, {p: len(d) for p, d in measured.items()})
        apart = [(p, k, t, m) for p in measured for k, (t, m) in enumerate(zip(traced[p], measured[p]))
                 if t > m + 50 or t < m - max(0.05 * m, 200)]
        self.assertLessEqual(len(apart), IMAGES // 100, apart)
        self.assertEqual(Counter(o["name"] for o in spans(trace, "op")), Counter({op: IMAGES for op in GETITEMS_OPS}))
        self.assertEqual(len(spans(trace, "loader")), IMAGES)
        self.assertEqual([b["args"]["samples"] for b in spans(trace, "batch")], [16] * (IMAGES // 16))

    def test_v2_container_transforms(self):
        data, trace, stdout, summary, logs = self.job("--v2", "--containers", epochs=1)
        assert_containers(self, trace, IMAGES, V2_OPS, summary)

    def test_v2_spawn(self):
        data, trace, stdout, summary, logs = self.job("--v2", "--context", "spawn", epochs=1)
        self.exact(data, trace, stdout, summary, 1, 2, V2_OPS)

    def test_v2_in_order_false(self):
        """DataLoader(in_order=False) (torch 2.6+): the loop takes each batch as it arrives, and worker 1's arrive
        ahead of the slower worker 0's. Every wait names the batch its next() returned (known in-process by the
        indices in it), and out_of_order says whether a later batch was handed over first (the workers' own
        clock: when their data_queue.put returned)."""
        data, trace, stdout, summary, logs = self.job("--v2", "--no-in-order")
        self.exact(data, trace, stdout, summary, 2, 2, V2_OPS)
        self.waits_match_in_process_next(trace, logs["waits"])
        waits = [(int(e), int(b), int(ns), int(began)) for e, b, ns, began in read_lines(logs["waits"])]
        taken_early = [w for prev, w in zip(waits, waits[1:]) if prev[0] == w[0] and w[1] < prev[1]]
        self.assertGreater(len(taken_early), 0, "the loop never got a later batch first: nothing tested")
        # Each put by its epoch: epoch 0's all came before its last next() returned, epoch 1's after.
        end0 = max(began + ns for e, b, ns, began in waits if e == 0)
        put = {}
        for pid, ns, idx in read_lines(logs["puts"]):
            put[(0 if int(ns) < end0 else 1, int(idx))] = int(ns)
        self.assertEqual(len(put), 2 * (IMAGES // BATCH))
        flag = {(w["args"]["epoch"], w["args"]["batch"]): w["args"]["out_of_order"] for w in spans(trace, "wait")}
        compared, wrong = 0, []
        for (e, n), t in put.items():
            later = [put[(e, m)] for (f, m) in put if f == e and m > n]
            # the tracer's mark is the worker's next getppid, just after the put and its log line: a later batch
            # handed over within 2 ms of this one may fall on either side of it
            if any(abs(u - t) < 2_000_000 for u in later):
                continue
            compared += 1
            if flag[(e, n)] != any(u < t for u in later):
                wrong.append((e, n))
        self.assertGreaterEqual(compared, IMAGES // BATCH)
        self.assertEqual(wrong, [])
        self.assertTrue(any(flag.values()))

    def test_attach_mid_epoch(self):
        """Attached after batches were consumed: every id shown is the true one, every arrow joins one batch."""
        data = dataset(IMAGES)
        out, waits, hold = self.path("attach.json"), self.path("waits.log"), self.path("hold")
        job = subprocess.Popen(in_root("python3", WORKLOAD, data, "--v2", "--workers", "2", "--batch-size",
                                       str(BATCH), "--epochs", "2", "--wait-log", waits, "--pause-after", "3",
                                       "--hold", hold), stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            pid = int(job.stdout.readline().split()[-1])
            wait_for_file(hold + ".paused")
            tracer = start_lotus(["-q", "-o", out, "--pid", str(pid)])
            wait_for_attach(tracer)
            with open(hold, "w"):
                pass
            self.assertEqual(job.wait(timeout=300), 0)
            _, err = tracer.communicate(timeout=60)
            self.assertEqual(tracer.returncode, 0, err)
        finally:
            kill_group(job)
            job.stdout.close()
        trace = load_trace(out)
        assert_true_ids(self, trace, waits)
        # the first epoch's rest and the whole second one
        waits_with_ids = [w for w in spans(trace, "wait") if "batch" in w["args"]]
        self.assertGreaterEqual(len(waits_with_ids), IMAGES // BATCH)

    def batches_end_at_the_hand_over(self, trace, collate_log, put_log):
        """A worker's batch ends where its loop calls getppid, just after data_queue.put: after its collate_fn
        returned and after the put returned (in-process clock), by at most a few ms: the put log's own write lets the
        queue's feeder thread take the GIL to pickle the batch (about 1 ms), and on 2 cores with 3 busy processes the
        worker can be preempted. Between collate and put the worker frees the batch's samples, which takes ms too:
        the hand-over, not the collation's end, is the mark."""
        t0 = int(trace["otherData"]["t0_monotonic_ns"])
        collated, handed = {}, {}
        for pid, n, ns in read_lines(collate_log):
            collated.setdefault(int(pid), []).append((int(ns) - t0) / 1000.0)
        for pid, ns, *_ in read_lines(put_log):
            handed.setdefault(int(pid), []).append((int(ns) - t0) / 1000.0)
        per_pid = {}
        for b in spans(trace, "batch"):
            per_pid.setdefault(b["pid"], []).append(b)
        self.assertEqual(set(per_pid), set(collated))
        self.assertEqual(set(per_pid), set(handed))
        lags = []
        for pid, bs in per_pid.items():
            bs.sort(key=lambda b: b["ts"])
            self.assertEqual(len(bs), len(collated[pid]))
            self.assertEqual(len(bs), len(handed[pid]))
            for b, c, h in zip(bs, collated[pid], handed[pid]):
                end = b["ts"] + b["dur"]
                self.assertGreaterEqual(end, c, (b, c, h))
                lags.append(end - h)
        self.assertGreaterEqual(min(lags), 0, lags)
        self.assertLess(max(lags), 20000, lags)  # us
        self.assertLess(sorted(lags)[len(lags) // 2], 3000, lags)

    def waits_match_in_process_next(self, trace, wait_log, slack_us=500.0, outliers=0):
        assert_waits_match(self, trace, wait_log, slack_us, outliers)

if __name__ == "__main__":
    unittest.main()
