"""The stack users run today, on these machines: Debian unstable's CPython 3.14, torch 2.x and torchvision with
transforms v2, in the root that scripts/install-modern-stack.sh builds and keeps, run through chroot (the tracer
finds the interpreter through /proc/PID/root). The scenarios every stack runs (harness.DataLoaderScenarios, in
transforms v2; test_dataloader runs them on Debian's torch 1.13) and this stack's own: a v1 pipeline, torchvision.io
decoding, in_order=False, detection, __getitems__, attach mode; exact against in-process ground truth."""
import dataclasses
import json
import os
import unittest
from collections import Counter

from harness import (BATCH, HERE, IMAGES, OPS, PIN_THREAD_SLACK_US, V2_OPS, BpfTestCase, DataLoaderScenarios,
                     Stack, assert_true_ids, dataset, load_trace, read_lines, run_lotus, spans)

ROOT = os.environ.get("LOTUS_MODERN_ROOT", "/var/cache/lotus-bpf/sid-root")
IN_ROOT = os.path.join(HERE, "in_root.sh")
DETECTION_OPS = ["ToImage", "RandomPhotometricDistort", "RandomZoomOut", "RandomHorizontalFlip", "SanitizeBoundingBoxes",
                 "ToDtype"]  # workloads/detection_job.py
GETITEMS_OPS = ["RandomResizedCrop", "ToImage", "ToDtype"]  # workloads/getitems_job.py


def in_root(*argv):
    return [IN_ROOT, ROOT, *argv]


# (integration.modern took 405 s of a 1278 s ctest: some scenarios run fewer ways here than on Debian's stack)
MODERN = Stack(
    name="modern", python=tuple(in_root("python3")), transforms=("--v2",), ops=tuple(V2_OPS),
    op_past_flaky="Normalize", hand_over_logs=True, lossless=True,
    pin_thread_runs=(((), 2),),
    # the pin-memory thread's drain only (the loop's own is tested on torch 1.13 by test_dataloader)
    left_mid_epoch_runs=(("--pin-memory", "--pin-thread"),),
    persistent_args=("--pin-memory",),  # (pin_memory without an accelerator: torch keeps the option and pins nothing)
    worker_runs=((0, 1), (4, 1)),
    sample_ends_at_own_call=False)


class ModernStack(DataLoaderScenarios, BpfTestCase):
    stack = MODERN

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not os.path.exists(os.path.join(ROOT, ".lotus-ready")):
            raise AssertionError(f"no modern stack at {ROOT}: scripts/install-modern-stack.sh builds it "
                                 "(scripts/test.sh runs it)")
        with open(os.path.join(ROOT, ".lotus-ready")) as f:
            cls.versions = f.read().split()  # python torch torchvision pillow
        cls.stack = dataclasses.replace(MODERN, interpreter=f"CPython {cls.versions[0]}")

    def test_v1_transforms(self):
        data, trace = self.job(transforms=())
        self.exact(data, trace, 2, 2, OPS)
        # CPython 3.14 starts DataLoader workers through multiprocessing's forkserver: shown by its role
        with open(self.summary) as f:
            roles = {r["role"] for r in json.load(f)["resources"]["roles"]}
        self.assertIn("forkserver", roles)
        self.assertNotIn("child", roles)

    def test_v2_transforms_tensor_decode(self):
        # torchvision.io reads and decodes the JPEG (its C++ opens the file): the loader still has its path
        data, trace = self.job("--decode", "tensor")
        self.exact(data, trace, 2, 2)

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
        data, trace = self.job("--no-in-order", "--pin-memory", "--pin-thread", "--step-ms", step)
        waits = read_lines(self.logs["waits"])
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
        with open(self.summary) as f:
            loader = [x for x in json.load(f)["loaders"] if x["loader"] == 0][0]["batches"]
        self.assertTrue(loader["arrival_order"])
        self.assertEqual(loader["misnamed"], wrong)
        self.assertIn("as they arrived (DataLoader(in_order=False))", self.stdout)

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

    def test_v2_in_order_false(self):
        """DataLoader(in_order=False) (torch 2.6+): the loop takes each batch as it arrives, and worker 1's arrive
        ahead of the slower worker 0's. Every wait names the batch its next() returned (known in-process by the
        indices in it), and out_of_order says whether a later batch was handed over first (the workers' own
        clock: when their data_queue.put returned)."""
        data, trace = self.job("--no-in-order")
        self.exact(data, trace, 2, 2)
        self.waits_match_in_process_next(trace)
        waits = [(int(e), int(b), int(ns), int(began)) for e, b, ns, began in read_lines(self.logs["waits"])]
        taken_early = [w for prev, w in zip(waits, waits[1:]) if prev[0] == w[0] and w[1] < prev[1]]
        self.assertGreater(len(taken_early), 0, "the loop never got a later batch first: nothing tested")
        # Each put by its epoch: epoch 0's all came before its last next() returned, epoch 1's after.
        end0 = max(began + ns for e, b, ns, began in waits if e == 0)
        put = {}
        for pid, ns, idx in read_lines(self.logs["puts"]):
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
        waits = self.path("waits.log")
        _, out, _, stdout = self.attach_after_3_batches(dataset(IMAGES), waits)
        trace = load_trace(out)
        assert_true_ids(self, trace, waits)
        # the first epoch's rest and the whole second one
        waits_with_ids = [w for w in spans(trace, "wait") if "batch" in w["args"]]
        self.assertGreaterEqual(len(waits_with_ids), IMAGES // BATCH)
        # one loader, one section: the pass in flight is its DataLoader's
        self.assertIn(f"Includes the pass that was in flight when tracing began ({IMAGES // BATCH - 3} of its", stdout)
        self.assertNotIn("DataLoader ?", stdout)


if __name__ == "__main__":
    unittest.main()
