"""The run's outputs as sinks: --op-csv, the summary's per-op figures as CSV, against the job's own counts; --waits-csv,
the longest waits as CSV, against the summary JSON's waits of the same run."""
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
        waits_csv = self.path("waits.csv")
        r = run_lotus(["-q", "-o", self.path("trace.json"), "--op-csv", out_csv, "--waits-csv", waits_csv,
                       "--summary-json", summary,
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
        replayed, replayed_waits = self.path("replayed.csv"), self.path("replayed-waits.csv")
        r = run_lotus(["report", record, "--op-csv", replayed, "--waits-csv", replayed_waits])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out_csv) as a, open(replayed) as b:
            self.assertEqual(a.read(), b.read())
        self.check_waits_csv(waits_csv, summary)
        with open(waits_csv) as a, open(replayed_waits) as b:
            self.assertEqual(a.read(), b.read())

    def check_waits_csv(self, path, summary):
        """--waits-csv: the summary JSON's waits.rows, the same rows in the same order, each field its figure (an
        empty field where the JSON has null), the causes as `cause[:op]=ms` in the JSON's order."""
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        with open(summary) as f:
            waits = json.load(f)["waits"]
        self.assertGreater(len(waits["rows"]), 0, "the job's training loop waited for its batches")
        self.assertEqual(len(rows), len(waits["rows"]))
        self.assertLessEqual(len(rows), waits["seen"])

        def num(text):
            return None if text == "" else float(text)

        for row, w in zip(rows, waits["rows"]):
            for key in ("owner", "loader", "batch", "epoch", "worker", "worker_pid", "slowest_sample"):
                self.assertEqual(num(row[key]), w[key], (key, row))
            for csv_key, key in (("wait_ms", "ms"), ("prepare_ms", "prepare_ms"), ("slowest_ms", "slowest_ms")):
                if w[key] is None:
                    self.assertEqual(row[csv_key], "", (key, row))
                else:
                    self.assertAlmostEqual(float(row[csv_key]), w[key], delta=1e-6, msg=(key, row))
            self.assertEqual(row["later_ready"], "true" if w["later_ready"] else "false")
            for key in ("slowest_path", "slowest_op"):
                self.assertEqual(row[key], w[key] or "", (key, row))
            causes = ";".join("{}{}={:.3f}".format(c["cause"], ":" + c["op"] if c["op"] else "", c["ms"])
                              for c in w["causes"])
            self.assertEqual(row["causes"], causes)
            top = w["causes"][0] if w["causes"] else {"cause": "", "op": None, "ms": None}
            self.assertEqual((row["cause"], row["cause_op"]), (top["cause"], top["op"] or ""))
            self.assertEqual(num(row["cause_ms"]), top["ms"])


if __name__ == "__main__":
    unittest.main()
