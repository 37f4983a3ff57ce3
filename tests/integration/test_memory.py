"""The tracer's memory is bounded by the job's shape, not by its length: attached to the example for many epochs
(2 non-persistent DataLoader workers: new processes every epoch) with no trace kept, its RSS stays flat once it
has described the job's code (bench/rss_over_time.py measures the same over longer). Exited workers are folded
into their role's row (model/process_fold.h): every output still counts each of them, exactly."""
import json
import os
import re
import subprocess
import threading
import time
import unittest

import statistics

from harness import (EXAMPLE, PY, BpfTestCase, dataset, kill_group, load_trace, read_lines, run_lotus, spans,
                     start_lotus, wait_for_attach)


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for PID {pid}")


class Memory(BpfTestCase):
    def test_rss_flat_over_a_long_attach(self):
        # 30 s of warm-up, then 60 s in which about 20,000 samples, 600 batches and 40 worker processes go by
        # (at ~330 samples/s traced on 2 cores): growth under 1 MB (before bounded statistics: ~140 B a sample,
        # about 2.8 MB in that window).
        job = subprocess.Popen([PY, "-u", EXAMPLE, dataset(512), "--epochs", "100000", "--workers", "2",
                                "--batch-size", "32"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               start_new_session=True)
        self.addCleanup(lambda: (kill_group(job), job.stdout.close()))
        for line in job.stdout:
            if "train.py: pid" in line:
                break
        threading.Thread(target=lambda: [None for _ in job.stdout], daemon=True).start()
        tracer = start_lotus(["-q", "--pid", str(job.pid), "-o", "/dev/null"])
        self.addCleanup(lambda: (tracer.poll() is None and tracer.kill(), tracer.wait()))
        wait_for_attach(tracer)
        threading.Thread(target=lambda: [None for _ in tracer.stderr], daemon=True).start()
        threading.Thread(target=lambda: [None for _ in tracer.stdout], daemon=True).start()
        start = time.monotonic()
        readings = {}
        for at in (30, 60, 90):
            # the median of three readings a second apart: one reading can catch a passing peak
            three = []
            for k in (-1, 0, 1):
                time.sleep(max(0.0, start + at + k - time.monotonic()))
                three.append(rss_kb(tracer.pid))
            self.assertIsNone(job.poll(), "the job ended before the last reading")
            readings[at] = statistics.median(three)
        kill_group(job)
        tracer.wait(timeout=60)
        growth = readings[90] - readings[30]
        self.assertLess(growth, 1024, f"tracer RSS grew {growth} kB from 30 s to 90 s (kB: {readings})")

    def test_exited_workers_folded_into_their_roles_row(self):
        # 30 epochs of 2 workers: 60 worker processes, of which all but 16 of each id (and the last ones, gone
        # less than 2 s before the end) are folded; ground truth: the job's own count of images and epochs, its
        # log of consumed batches, its getrusage of its reaped workers
        epochs = 30
        out, js, log = self.path("t.json"), self.path("s.json"), self.path("batches.log")
        r = run_lotus(["-q", "-o", out, "--summary-json", js, "--", PY, EXAMPLE, dataset(64), "--epochs",
                       str(epochs), "--workers", "2", "--log", log])
        self.assertEqual(r.returncode, 0, r.stderr)
        images = int(re.search(r"train.py: pid \d+, (\d+) images", r.stdout).group(1))
        own_workers = float(re.search(r"train.py: cpu total [\d.]+ s .*, workers ([\d.]+) s", r.stdout).group(1))
        with open(js) as f:
            summary = json.load(f)
        workers = [p for p in summary["processes"] if p["label"].startswith("worker")]
        folded = [p for p in workers if "processes" in p]
        self.assertEqual(len(folded), 2, "one row per worker id with folded processes")
        for wid in (0, 1):
            mine = [p for p in workers if p["worker"] == wid]
            self.assertEqual(sum(p.get("processes", 1) for p in mine), epochs, mine)
        self.assertEqual(sum(p["samples"] for p in workers), epochs * images)
        self.assertEqual(sum(p["batches"] for p in workers), len(read_lines(log)))
        for p in folded:
            # the first kShownFolded (8) of the processes folded into the row; how many were folded depends on how
            # many exited in the stream's last 2 s (never folded), so on the epochs' pace
            self.assertGreaterEqual(p["processes"], 2)
            self.assertEqual(len(p["folded_pids"]), min(8, p["processes"] - 1), p)
            self.assertEqual(len(set(p["folded_pids"])), len(p["folded_pids"]))
            self.assertNotIn(p["pid"], p["folded_pids"])
            self.assertGreater(p["busy_pct"], 50)
            self.assertLessEqual(p["busy_pct"], 100)
        roles = {x["role"]: x for x in summary["resources"]["roles"]}
        self.assertEqual(roles["worker 0"]["processes"], epochs)
        self.assertEqual(roles["worker 1"]["processes"], epochs)
        cpu = sum(x["user_s"] + x["system_s"] for k, x in roles.items() if k.startswith("worker"))
        # the kernel's at each exit, which misses each process's teardown after it (docs/resources.md; ~20 ms a
        # worker here), against getrusage of the reaped workers; the folded processes (over 20 of the 60) lost
        # would be far below
        self.assertLess(cpu, own_workers * 1.03, (cpu, own_workers))
        self.assertGreater(cpu, own_workers * 0.97 - 0.03 * 2 * epochs, (cpu, own_workers))
        self.assertRegex(r.stdout, rf"\nworker 0 +0 +{epochs} +{epochs * images // 2} ")
        # the trace names each process's track, folded or not
        trace = load_trace(out)
        names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
        batch_pids = {e["pid"] for e in spans(trace, "batch")}
        self.assertEqual(len(batch_pids), 2 * epochs)
        for pid in {e["pid"] for e in spans(trace)}:
            self.assertIn(pid, names)
        self.assertEqual(sorted(names[p] for p in batch_pids), ["worker 0"] * epochs + ["worker 1"] * epochs)
        # How many rows are left depends on the epochs' pace, so it is bounded from the trace: a worker is folded
        # at the first exit 2 s after its own, and the last exit (the job's) comes after every span. A worker exits
        # before its id's next worker starts (non-persistent workers are shut down as the epoch ends), so one not
        # folded is the last of its id or has a successor whose first event is within 2 s of the last span's end.
        last_end = max(e["ts"] + e["dur"] for e in spans(trace))
        first = {}
        for e in spans(trace):
            first[e["pid"]] = min(first.get(e["pid"], e["ts"]), e["ts"])
        for wid in (0, 1):
            rows = [p for p in workers if p["worker"] == wid]
            order = sorted((first[p] for p in batch_pids if names[p] == f"worker {wid}"))
            recent = sum(1 for k in range(16, epochs) if k == epochs - 1 or order[k + 1] > last_end - 2e6)
            self.assertLessEqual(len(rows), 16 + recent, (wid, len(rows), recent, epochs))
            self.assertLess(len(rows), epochs, "some were folded")


if __name__ == "__main__":
    unittest.main()
