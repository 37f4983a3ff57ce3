"""The run's outputs as sinks: --op-csv, the summary's per-op figures as CSV, against the job's own counts."""
import csv
import json
import math
import unittest
from collections import Counter

from harness import PY, WORKLOAD, BpfTestCase, dataset, read_lines, run_lotus

IMAGES, BATCH, EPOCHS = 64, 32, 2


def read_csv(path):
    with open(path, newline="") as f:
        return {(r["part"], r["name"]): r for r in csv.DictReader(f)}


class OpCsv(BpfTestCase):
    def test_op_csv_counts_match_the_job_and_the_summary(self):
        """One row per op (each TimedCompose op, as the job logs it), loading, collation and sample: counts equal
        to the job's own log of its op calls and samples; the figures those of the summary JSON; the record file
        replayed gives the same file."""
        data = dataset(IMAGES)
        timed, samples = self.path("timed.log"), self.path("samples.log")
        out_csv, summary, record = self.path("ops.csv"), self.path("summary.json"), self.path("run.lbt")
        r = run_lotus(["-q", "-o", self.path("trace.json"), "--op-csv", out_csv, "--summary-json", summary,
                       "--record", record, "--pipeline", "TimedCompose", "--", PY, WORKLOAD, data,
                       "--epochs", str(EPOCHS), "--batch-size", str(BATCH), "--timed-log", timed,
                       "--sample-log", samples])
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = read_csv(out_csv)
        ops = Counter(line[2] for line in read_lines(timed))
        self.assertEqual(len(ops), 4, ops)
        expected = {("op", op): n for op, n in ops.items()}
        n_samples = len(read_lines(samples))
        self.assertEqual(n_samples, IMAGES * EPOCHS)
        expected[("loader", "loader")] = n_samples
        expected[("sample", "sample")] = n_samples
        expected[("collate", "collate")] = EPOCHS * math.ceil(IMAGES / BATCH)
        self.assertEqual({k: int(v["count"]) for k, v in rows.items()}, expected)
        with open(summary) as f:
            js = json.load(f)["ops"]
        for (part, name), row in rows.items():
            stats = js[name]
            for key in ("total_ms", "mean_ms", "p50_ms", "p95_ms"):
                self.assertAlmostEqual(float(row[key]), stats[key], delta=1e-4, msg=(name, key))
        replayed = self.path("replayed.csv")
        r = run_lotus(["report", record, "--op-csv", replayed])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out_csv) as a, open(replayed) as b:
            self.assertEqual(a.read(), b.read())


if __name__ == "__main__":
    unittest.main()
