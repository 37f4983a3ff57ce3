"""The slow samples (issue 80 item 3) on a real DataLoader job: a data set in which one file in 50 is about eight
times larger. The summary must name those files as slow every epoch, with their sizes as the files have them, and
its fitted size rate must explain them (and no small file); ground truth from the job (its own timing of each
sample's loading, the files it made) in the same run. The host is busy: a sample's loading held up by the machine
is slow too, and told apart by its fastest time."""
import collections
import json
import os
import subprocess
import unittest

import jsonschema

from harness import HERE, PY, SOURCE, BpfTestCase, load_trace, run_lotus, spans

JOB = os.path.join(HERE, "workloads", "slow_files_job.py")
EPOCHS, WORKERS = 3, 2


class SlowSamples(BpfTestCase):
    def test_big_files_are_the_slow_samples_and_their_size_explains_them(self):
        data, log = self.path("data"), self.path("loads.log")
        subprocess.run([PY, JOB, data, "--make"], check=True)
        big = {os.path.join(d, f) for d, _, fs in os.walk(data) for f in fs if f.endswith("_big.jpg")}
        self.assertEqual(len(big), 4)
        out, summary, html = self.path("trace.json"), self.path("summary.json"), self.path("report.html")
        rec, replayed = self.path("run.lbt"), self.path("replayed.json")
        r = run_lotus(["-q", "-o", out, "--summary-json", summary, "--html", html, "--record", rec, "--", PY, JOB, data,
                       "--load-log", log, "--workers", str(WORKERS), "--epochs", str(EPOCHS)])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        trace = load_trace(out)
        self.assertEqual(trace["otherData"]["lost_events"], 0)

        # The job's own account: each sample's loading time, per index, and the files' sizes on disk.
        loads = collections.defaultdict(list)
        path_of = {}
        with open(log) as f:
            for line in f:
                _, index, ns, path = line.split(maxsplit=3)
                loads[int(index)].append(int(ns) / 1e6)
                path_of[int(index)] = path.strip()
        self.assertEqual(sum(len(v) for v in loads.values()), 200 * EPOCHS)
        size = {i: os.stat(p).st_size for i, p in path_of.items()}
        self.assertTrue(all(size[i] > 6 * size[j] for i in path_of if path_of[i] in big
                            for j in path_of if path_of[j] not in big))

        # Every loader span carries its file and that file's size.
        loaders = spans(trace, "loader")
        self.assertEqual(len(loaders), 200 * EPOCHS)
        for s in loaders:
            self.assertEqual(s["args"]["path"], path_of[s["args"]["sample"]])
            self.assertEqual(s["args"]["bytes"], size[s["args"]["sample"]])

        with open(summary) as f:
            doc = json.load(f)
        for name, what in (("summary", doc), ("chrome-trace", trace)):
            with open(os.path.join(SOURCE, "schemas", f"{name}.schema.json")) as f:
                jsonschema.validate(what, json.load(f))
        slow = doc["slow_samples"]
        self.assertEqual(len(slow["loaders"]), 1, slow)
        g = slow["loaders"][0]
        self.assertEqual(g["samples"], 200 * EPOCHS)
        self.assertEqual(g["with_bytes"], 200 * EPOCHS)
        rows = g["rows"]
        # Every big file's loading was slow every epoch; the samples whose size explains their slowness are big
        # ones. (A small file's loading held up by the machine, its worker off a CPU, may be slow once, even every
        # epoch on a busy host: at its fastest it still stands out from what its size explains.)
        threshold = g["threshold"]["loader_ms"]
        every = {row["path"]: row for row in rows if row["times_slow"] == row["times_seen"] == EPOCHS
                 and row["fastest_loader_ms"] > threshold}
        self.assertLessEqual(big, set(every), rows)
        by_size = {p for p, row in every.items() if not row["stands_out"]}
        self.assertLessEqual(by_size, big, rows)
        # A big file stands out only where the job's own timing too saw its fastest loading held up: a third
        # slower than the big files' usual fastest.
        fastest = {path_of[i]: min(v) for i, v in loads.items()}
        usual = sorted(fastest[p] for p in big)[1]
        for p in big - by_size:
            self.assertGreater(fastest[p], 1.33 * usual, (every[p], fastest))
        self.assertGreaterEqual(len(by_size), 2, rows)
        for row in rows:
            i = row["index"]
            self.assertEqual(row["path"], path_of[i])
            self.assertEqual(row["bytes"], size[i])
            self.assertEqual(row["times_seen"], len(loads[i]))  # once per epoch
            # Its loading span holds the job's own timing of the file's open and decode.
            self.assertGreaterEqual(row["loader_ms"], min(loads[i]) * 0.99, row)
            self.assertAlmostEqual(row["ms"], row["loader_ms"] + row["pipeline_ms"], delta=0.01)
            self.assertEqual(set(row["ops"]), {"CenterCrop", "ToTensor"})
            self.assertGreaterEqual(row["fastest_loader_ms"], min(loads[i]) * 0.99, row)
            self.assertLessEqual(row["fastest_loader_ms"], row["loader_ms"])

        fit = g["size_fit"]
        self.assertIsNotNone(fit)
        self.assertGreater(fit["r2"], 0.5, fit)
        # The rate against the job's own: its logged loading times, the big files' median over the small ones'
        # (medians: a time held up by the machine moves them little), per MB between them.
        def median(v):
            v = sorted(v)
            return (v[len(v) // 2] + v[(len(v) - 1) // 2]) / 2
        sets = [[i for i in loads if (path_of[i] in big) == b] for b in (True, False)]
        ms = [median([t for i in s for t in loads[i]]) for s in sets]
        mb = [sum(size[i] for i in s) / len(s) / 1e6 for s in sets]
        job_rate = (ms[0] - ms[1]) / (mb[0] - mb[1])
        self.assertGreater(fit["ms_per_mb"], 0.5 * job_rate, (fit, job_rate))
        self.assertLess(fit["ms_per_mb"], 2 * job_rate, (fit, job_rate))
        for row in rows:
            if row["path"] in by_size:
                expected = fit["fixed_ms"] + fit["ms_per_mb"] * row["bytes"] / 1e6
                self.assertAlmostEqual(row["expected_loader_ms"], expected, delta=0.01)
                self.assertLess(row["fastest_loader_ms"] - expected, max(fit["band_ms"], 0.5 * expected), (row, fit))
                # and far more than a small file's
                small = min(size.values())
                self.assertGreater(expected, 2 * (fit["fixed_ms"] + fit["ms_per_mb"] * small / 1e6), fit)

        # The printed summary and the HTML report show them.
        self.assertIn("\nslow samples of DataLoader 0 of main: TimedFolder", r.stdout)
        self.assertIn("ms per MB", r.stdout)
        for p in big:
            self.assertIn(os.path.basename(p), r.stdout)
        with open(html) as f:
            page = f.read()
        self.assertIn('data-table="slow-samples"', page)
        for p in big:
            self.assertIn(os.path.basename(p), page)
        # The record file gives the same answer.
        again = run_lotus(["export", rec, "-o", self.path("replayed-trace.json"), "--summary-json", replayed])
        self.assertEqual(again.returncode, 0, again.stderr)
        with open(replayed) as f:
            self.assertEqual(json.load(f)["slow_samples"], slow)
        print(f"\nslow samples: {len(rows)} rows, size fit {fit}; the job's own rate {job_rate:.3f} ms/MB\n"
              + r.stdout[r.stdout.index("\nslow samples"):][:3000], flush=True)


if __name__ == "__main__":
    unittest.main()
