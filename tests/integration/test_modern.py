"""The stack users run today, on these machines: Debian unstable's CPython 3.14, torch 2.x and torchvision with
transforms v2, in the root that scripts/install-modern-stack.sh builds and keeps, run through chroot (the tracer
finds the interpreter through /proc/PID/root). v1 and v2 pipelines, PIL and torchvision.io decoding, 0/2/4
workers, persistent workers, pin_memory, spawn; launch and attach mode; exact against in-process ground truth."""
import os
import subprocess
import unittest

from harness import (HERE, OPS, WORKLOAD, BpfTestCase, assert_containers, assert_dataloader_exact, assert_true_ids,
                     dataset, kill_group, load_trace, read_lines, run_lotus, spans, start_lotus, wait_for_attach,
                     wait_for_file)

ROOT = os.environ.get("LOTUS_MODERN_ROOT", "/var/cache/lotus-bpf/sid-root")
IN_ROOT = os.path.join(HERE, "in_root.sh")
V2_OPS = ["RandomResizedCrop", "RandomHorizontalFlip", "ToImage", "ToDtype", "Normalize"]
IMAGES, BATCH = 256, 32


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

    def test_v2_container_transforms(self):
        data, trace, stdout, summary, logs = self.job("--v2", "--containers", epochs=1)
        assert_containers(self, trace, IMAGES, V2_OPS, summary)

    def test_v2_spawn(self):
        data, trace, stdout, summary, logs = self.job("--v2", "--context", "spawn", epochs=1)
        self.exact(data, trace, stdout, summary, 1, 2, V2_OPS)

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
        for pid, ns in read_lines(put_log):
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

    def waits_match_in_process_next(self, trace, wait_log):
        measured = {(int(l[0]), int(l[1])): int(l[2]) / 1000.0 for l in read_lines(wait_log)}
        traced = {(w["args"]["epoch"], w["args"]["batch"]): w["dur"] for w in spans(trace, "wait")}
        self.assertEqual(set(measured), set(traced))
        bad = [(k, traced[k], measured[k]) for k in measured
               if abs(traced[k] - measured[k]) > max(0.10 * measured[k], 500.0)]
        self.assertEqual(bad, [], "wait spans vs in-process next() (us)")


if __name__ == "__main__":
    unittest.main()
