"""Memory that DataLoader workers copy (issue 80 item 5): a dataset holding 1,000,000 Python strings in a list,
read by 2 workers, makes each worker copy the pages it reads (copy-on-read, pytorch/pytorch#13246); the same bytes
in a numpy array do not. Ground truth from the same run: each worker logs its own private memory (smaps_rollup's
Private_Clean + Private_Dirty) against the samples it had read, and the rate lotus-bpf reports from its own
readings must agree with the rate the workers' own figures give."""
import html
import json
import os
from collections import defaultdict

import jsonschema

from harness import HERE, PY, SOURCE, BpfTestCase, read_lines, run_lotus

COW_JOB = os.path.join(HERE, "workloads", "cow_job.py")
BATCH = 20  # cow_job.py's batch size


def own_rates(log):
    """Per worker PID, its private memory's least-squares rate in MB per 1,000 samples, from its own log."""
    points = defaultdict(list)
    for fields in read_lines(log):
        pid, read, private_kb, _rss_kb = (int(x) for x in fields)
        points[pid].append((read, private_kb / 1024))
    rates = {}
    for pid, p in points.items():
        mx = sum(x for x, _ in p) / len(p)
        my = sum(y for _, y in p) / len(p)
        sxx = sum((x - mx) ** 2 for x, _ in p)
        rates[pid] = 1000 * sum((x - mx) * (y - my) for x, y in p) / sxx
    return rates, points


class WorkerMemory(BpfTestCase):
    def run_job(self, *flags, replay=False, pss=("--pss-interval", "200")):
        log, js, page, rec = self.path("own.log"), self.path("s.json"), self.path("r.html"), self.path("r.lbt")
        if os.path.exists(log):
            os.remove(log)
        # PSS (and private memory with it) every 200 ms: the default's budget on 2 CPUs reads it every ~10 s
        r = run_lotus(["-o", "/dev/null", "--summary-json", js, "--html", page, *pss] +
                      (["--record", rec] if replay else []) + ["--", PY, COW_JOB, log, *flags], timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        n = flags[flags.index("--samples") + 1] if "--samples" in flags else "2000"
        self.assertIn(f"cow_job: {n} samples", r.stdout)
        with open(js) as f:
            summary = json.load(f)
        with open(os.path.join(SOURCE, "schemas", "summary.schema.json")) as f:
            jsonschema.validate(summary, json.load(f))
        wm = summary["worker_memory"]
        if replay:  # the record file gives the same answer
            again = self.path("again.json")
            rr = run_lotus(["report", rec, "--summary-json", again])
            self.assertEqual(rr.returncode, 0, rr.stderr)
            with open(again) as f:
                self.assertEqual(json.load(f)["worker_memory"], wm)
        with open(page) as f:
            report = f.read()
        return wm, own_rates(log), r.stdout, report

    def test_a_list_is_copied_on_read_a_numpy_array_is_not(self):
        wm, (rates, points), out, report = self.run_job("--pipeline", replay=True)
        self.assertTrue(wm["private_known"], wm)
        self.assertEqual(wm["copy_on_read"], 2, wm)
        self.assertEqual(len(wm["workers"]), 2, wm)
        for w in wm["workers"]:
            self.assertEqual(w["verdict"], "copy-on-read", w)
            self.assertEqual(w["unit"], "samples", w)
            self.assertGreaterEqual(w["readings"], 4, w)
            own = rates[w["pid"]]
            # ~32 MB per 1,000 samples here; the workers' own figures agree within 20 %
            self.assertGreater(own, 10, (own, points[w["pid"]]))
            self.assertLess(abs(w["rate_mb_per_1000"] - own) / own, 0.20, (w, own))
            self.assertLessEqual(w["read"], 1000)
        self.assertIn("Copy-on-read in 2 DataLoader worker process(es)", out)
        self.assertIn("numpy arrays", out)
        self.assertIn("MB per 1,000 samples", out)
        self.assertIn("Memory that workers copy", report)
        self.assertIn(html.escape("copy-on-read"), report)

        wm, (rates, points), out, report = self.run_job("--numpy", "--pipeline")
        self.assertEqual(wm["copy_on_read"], 0, wm)
        self.assertEqual(wm["leak_like"], 0, wm)
        for w in wm["workers"]:
            self.assertEqual(w["verdict"], "steady", w)
            self.assertGreaterEqual(w["readings"], 4, w)
            # its own figures: a few MB of the first batch's allocations, nothing per sample
            own = points[w["pid"]]
            self.assertLess(own[-1][1] - own[0][1], 8, own)
        self.assertNotIn("Copy-on-read in", out)

    def test_without_a_pipeline_the_rate_is_per_batch(self):
        # No pipeline (a dataset returning a tensor): samples are not seen, batches are. The default PSS schedule:
        # its workers, forked while traced, are walked on their own in their first seconds (proc::PssSchedule),
        # every 0.5 s or less often: 4,000 samples keep them reading for ~5 s (2,000 gave one of them 3 readings)
        wm, (rates, points), out, _ = self.run_job("--samples", "4000", pss=())
        self.assertEqual(wm["copy_on_read"], 2, wm)
        for w in wm["workers"]:
            self.assertEqual(w["unit"], "batches", w)
            own_per_batch = rates[w["pid"]] * BATCH
            self.assertLess(abs(w["rate_mb_per_1000"] - own_per_batch) / own_per_batch, 0.20, (w, own_per_batch))
        self.assertIn("MB per 1,000 batches", out)
