"""The workers estimate (docs/worker-estimate.md): the model made from runs with 1 worker gives each other
number of workers' samples/s within 15 % of what `sweep` then measures with it (of the 3 runs' median, or of the
nearest run where they spread), on two
pipelines: the bundled example (CPU-bound on this machine's 2 CPUs beyond one worker), and one whose loading
blocks 3 ms a sample (as reads from a slow store do: it scales with the workers). Each run's own model also gives
that run's samples/s within 15 %."""
import json
import os

from harness import EXAMPLE, PY, BpfTestCase, dataset, run_lotus

HERE = os.path.dirname(os.path.abspath(__file__))
ESTIMATE_JOB = os.path.join(HERE, "workloads", "estimate_job.py")
TOLERANCE = 0.15


class WorkerEstimate(BpfTestCase):
    def sweep(self, cmd):
        out_dir, table = self.path("sweep"), self.path("sweep.json")
        r = run_lotus(["sweep", "--param", "workers=1,2,3", "--repeats", "3", "--output-dir", out_dir,
                       "--summary-json", table, "--", *cmd], timeout=900)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(table) as f:
            runs = json.load(f)["runs"]
        self.assertEqual([x["name"] for x in runs], ["workers=1", "workers=2", "workers=3"])
        report = []
        for x, workers in zip(runs, (1, 2, 3)):
            self.assertEqual(x["workers"], workers, x)
            measured, estimated = x["samples_per_s"], x["estimated_samples_per_s"]
            report.append(f"{workers}: estimated {estimated:.0f}, measured {measured:.0f} "
                          f"({x['samples_per_s_min']:.0f}-{x['samples_per_s_max']:.0f})")
            for rep in (1, 2, 3):  # each run's model and its own rate; the estimate is the first's, as the sweep says
                with open(os.path.join(self.path("sweep"), f"workers={workers}.r{rep}.summary.json")) as f:
                    e = json.load(f)["training"][0]["estimate"]
                self.assertEqual(e["workers"], workers)
                self.assertTrue(e["main_cpu_read"])
                self.assertIsNotNone(e["others_cpus"])
                own = next(p for p in e["curve"] if p["workers"] == workers)
                self.assertLess(abs(own["samples_per_s"] / e["samples_per_s"] - 1), TOLERANCE, (workers, rep, e))
        self.assertIn("estimated", r.stdout)
        print("\n" + "\n".join(report))  # (the figures, for the log)
        # Each configuration's estimate within 15 % of what its runs measured: of their median where the runs agree,
        # else of the nearest of them (this host's own spread between repeats of one configuration reaches 20-50 %
        # when other work comes and goes: CI measured 311-462 samples/s for three runs of one).
        for x in runs:
            low, high = (1 - TOLERANCE) * x["samples_per_s_min"], (1 + TOLERANCE) * x["samples_per_s_max"]
            self.assertTrue(low <= x["estimated_samples_per_s"] <= high, "\n".join(report))
        return runs

    def test_the_example(self):
        self.sweep([PY, EXAMPLE, dataset(512), "--epochs", "3", "--workers", "{workers}"])

    def test_blocking_loads(self):
        runs = self.sweep([PY, ESTIMATE_JOB, "--workers", "{workers}"])
        rates = [x["samples_per_s"] for x in runs]
        self.assertGreater(rates[1], 1.6 * rates[0])  # (it scales: the model is tried on more than a flat curve)
