"""Why the training loop waited (docs/wait-causes.md): jobs built to wait for one cause each (too few workers, a
slow file, a slow op), traced; the causes must add up to the waits the job itself timed, and name that cause."""
import json
import os
import unittest

from harness import PY, BpfTestCase, assert_waits_as_timed, load_trace, read_lines, run_lotus, spans

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads", "wait_causes_job.py")
BATCH = 16


class WaitCauses(BpfTestCase):
    def files(self, n, big=(), kb=1, big_kb=320):
        root = self.path("data")
        os.makedirs(root)
        for i in range(n):
            with open(os.path.join(root, f"{i:04d}.bin"), "wb") as f:
                f.write(b"x" * 1024 * (big_kb if i in big else kb))
        return root

    def trace(self, data, *job_args):
        out, summary, log = self.path("t.json"), self.path("s.json"), self.path("waits.log")
        r = run_lotus(["-q", "-o", out, "--summary-json", summary, "--", PY, JOB, data, "--wait-log", log,
                       "--ms-per-kb", "0.5", *job_args])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(summary) as f:
            s = json.load(f)
        waits = {w["args"]["batch"]: w for w in spans(load_trace(out), "wait")}
        timed = {int(b): int(ns) for b, ns in read_lines(log)}
        causes, rows = assert_waits_as_timed(self, waits, timed, s)
        self.assertEqual(s["waits"]["seen"], len(waits))
        return waits, causes, rows

    def test_one_worker_for_a_fast_loop_is_too_few_workers(self):
        data = self.files(256)
        waits, causes, rows = self.trace(data, "--workers", "1")
        self.assertEqual(max(causes, key=causes.get), ("too_few_workers", None), causes)
        # the first batch: no number of workers would have had it sooner
        self.assertEqual(waits[0]["args"]["cause"], "late start", waits[0]["args"])
        later = [w for b, w in waits.items() if b > 0]
        mostly = [w for w in later if w["args"]["cause"] == "too few workers"]
        self.assertGreaterEqual(len(mostly), 0.8 * len(later), [w["args"]["causes"] for w in later])
        self.assertTrue(all(w["args"]["worker"] == 0 for w in later))

    def test_a_slow_file_is_a_slow_sample_named_with_its_path(self):
        big = {i for i in range(320) if i % 50 == 40}  # 320 KB among 1 KB files: 160 ms of "decoding" against 0.5
        data = self.files(320, big)
        waits, causes, rows = self.trace(data, "--workers", "2", "--step-ms", "30")
        slow_batches = {i // BATCH: i for i in big}
        named = 0
        for b, w in waits.items():
            if b in slow_batches and w["dur"] > 20000:
                a, row = w["args"], rows[b]
                # of the wait's overlap with the batch's preparation (not its hand-over: on two busy CPUs the loop
                # may wait for one to take the batch), the slow sample is the most
                part = {c["cause"]: c["ms"] for c in row["causes"]}
                overlap = row["ms"] - part.get("hand_over", 0) - part.get("late_start", 0)
                self.assertGreaterEqual(part.get("slow_sample", 0), 0.7 * overlap, row)
                self.assertEqual(a["slowest_sample"], slow_batches[b], a)
                self.assertEqual(a["slowest_path"], os.path.join(data, f"{slow_batches[b]:04d}.bin"), a)
                self.assertEqual(a["slowest_op"], "loading", a)
                named += 1
        self.assertGreaterEqual(named, 3, {b: w["args"].get("causes") for b, w in waits.items()})
        # slow samples are those files': little of it anywhere else (a sample preempted at its start, uncounted)
        elsewhere = sum(c["ms"] for r in rows.values() if r["batch"] not in slow_batches for c in r["causes"]
                        if c["cause"] == "slow_sample")
        self.assertLessEqual(elsewhere, 0.1 * causes[("slow_sample", None)] * 1000, rows)

    def test_an_op_slow_in_some_batches_is_that_op(self):
        data = self.files(320)
        waits, causes, rows = self.trace(data, "--workers", "2", "--step-ms", "30", "--heavy-every", "4",
                                         "--heavy-factor", "20")
        self.assertEqual(max(causes, key=causes.get), ("op", "Heavy"), causes)
        named = 0
        for b, w in waits.items():
            if b % 4 == 3 and w["dur"] > 20000:
                row = rows[b]
                part = {(c["cause"], c["op"]): c["ms"] for c in row["causes"]}
                overlap = row["ms"] - part.get(("hand_over", None), 0) - part.get(("late_start", None), 0)
                self.assertGreaterEqual(part.get(("op", "Heavy"), 0), 0.7 * overlap, row)
                named += 1
        self.assertGreaterEqual(named, 3, {b: w["args"].get("causes") for b, w in waits.items()})
        # no sample of its own is slow (a batch's first sample, whose loading carries no CPU time, may read as one
        # where it waited for a CPU: a few per cent at most)
        self.assertLessEqual(causes.get(("slow_sample", None), 0), 0.05 * sum(causes.values()), causes)


if __name__ == "__main__":
    unittest.main()
