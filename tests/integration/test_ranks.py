"""Several training processes: torch.multiprocessing.spawn with two ranks (gloo, DistributedSampler), each with its
own DataLoader and workers, on Debian's torch 1.13 and on the modern stack; a rank named by its RANK environment
(as torchrun starts them). Every rank's batches, epochs and waits are its own, every arrow joins the same batch of
the same rank, every wait's id is the true one; each rank's graded verdict (not / moderately / highly input-bound)
is the one its own timers give, and a replay of the record gives the same."""
import json
import os
import unittest
from collections import Counter

from harness import HERE, PY, WORKLOAD, BpfTestCase, dataset, flows, load_trace, read_lines, run_lotus, spans

RANKS_JOB = os.path.join(HERE, "workloads", "ranks_job.py")
ROOT = os.environ.get("LOTUS_MODERN_ROOT", "/var/cache/lotus-bpf/sid-root")
IMAGES, BATCH, EPOCHS, WORKERS = 256, 32, 2, 2
PER_RANK = IMAGES // 2 // BATCH  # batches per epoch per rank (DistributedSampler splits the dataset)


class Ranks(BpfTestCase):
    def two_ranks(self, python):
        data = dataset(IMAGES)
        out, summary, waits = self.path("ranks.json"), self.path("summary.json"), self.path("waits.log")
        loops, rec = self.path("loops.log"), self.path("ranks.lbt")
        r = run_lotus(["-q", "-o", out, "--summary-json", summary, "--record", rec, "--", *python, RANKS_JOB, data,
                       "--epochs", str(EPOCHS), "--workers", str(WORKERS), "--batch-size", str(BATCH), "--wait-log",
                       waits, "--loop-log", loops])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        trace = load_trace(out)
        with open(summary) as f:
            summary = json.load(f)
        calls = read_lines(waits)  # RANK PID EPOCH INDEX NS BEGAN
        rank_pids = {int(c[0]): int(c[1]) for c in calls}
        self.assertEqual(sorted(rank_pids), [0, 1])
        labels = {p["pid"]: p["label"] for p in summary["processes"]}
        for rank, pid in rank_pids.items():
            self.assertEqual(labels.get(pid), f"rank {rank}")  # in the process table, named
        # --trainer-calls auto: each rank iterates a loader with workers, so its own object calls went unprobed;
        # the launcher iterated none
        self.assertEqual(sorted(c["pid"] for c in trace["otherData"]["object_calls_unprobed"]),
                         sorted(rank_pids.values()))
        training = {t["pid"]: t for t in summary["training"]}
        self.assertEqual(set(training), set(rank_pids.values()))
        for t in training.values():
            self.assertLessEqual(t["waiting_share"], 1.0)
            self.assertEqual(t["batches"], EPOCHS * PER_RANK)
        self.assert_grades_match_the_ranks_timers(summary, calls, read_lines(loops), r.stdout)
        # a replay of the record gives the same grades and shares
        replayed = self.path("replayed.json")
        rr = run_lotus(["report", rec, "--summary-json", replayed])
        self.assertEqual(rr.returncode, 0, rr.stderr[-3000:])
        with open(replayed) as f:
            again = {t["pid"]: t for t in json.load(f)["training"]}
        self.assertEqual({p: (t["input_bound_grade"], t["waiting_share"]) for p, t in again.items()},
                         {p: (t["input_bound_grade"], t["waiting_share"]) for p, t in training.items()})
        batches, waits = spans(trace, "batch"), spans(trace, "wait")
        for rank, pid in rank_pids.items():
            mine = [b for b in batches if b["args"].get("trainer") == pid]
            keys = Counter((b["args"]["loader"], b["args"]["epoch"], b["args"]["batch"]) for b in mine)
            expected = Counter({(0, e, i): 1 for e in range(EPOCHS) for i in range(PER_RANK)})
            self.assertEqual(keys, expected, f"rank {rank}")  # no repeated key within a rank
            mine_w = [w for w in waits if w["pid"] == pid]
            self.assertEqual(Counter((w["args"]["loader"], w["args"]["epoch"], w["args"]["batch"]) for w in mine_w),
                             expected, f"rank {rank}")
            self.assertEqual({labels[b["pid"]] for b in mine},
                             {f"rank {rank} worker {i}" for i in range(WORKERS)})
        pairs, broken = flows(trace)
        self.assertEqual(broken, [])
        self.assertEqual(len(pairs), 2 * EPOCHS * PER_RANK)  # an arrow for every batch
        for b, w in pairs:
            self.assertEqual(b["args"]["trainer"], w["pid"])
            self.assertEqual({k: b["args"][k] for k in ("loader", "epoch", "batch")},
                             {k: w["args"][k] for k in ("loader", "epoch", "batch")})
        # each traced wait is the next() the rank measured in-process, with its true batch index
        t0 = int(trace["otherData"]["t0_monotonic_ns"])
        for w in waits:
            mid = w["ts"] + w["dur"] / 2
            match = [c for c in calls if int(c[1]) == w["pid"]
                     and (int(c[5]) - t0) / 1000 <= mid <= (int(c[5]) - t0) / 1000 + int(c[4]) / 1000]
            self.assertEqual(len(match), 1, w)
            self.assertEqual((w["args"]["epoch"], w["args"]["batch"]), (int(match[0][2]), int(match[0][3])))

    def assert_grades_match_the_ranks_timers(self, summary, calls, stops, stdout):
        """Each rank's grade from its own timers: the time its next() calls that returned a batch took (the wait
        log), over its first next()'s start to its last one's end (the epoch's last next(), which raised
        StopIteration: the loop log). The tracer's share is within 1 point (+2 %) of it; its grade is the one
        that share has on the stated ladder, or the one across a threshold that close to it."""
        ladder = summary["input_bound_thresholds"]
        self.assertEqual(ladder, {"moderately": 0.05, "highly": 0.2})

        def grade(share):
            return "highly" if share >= ladder["highly"] else "moderately" if share >= ladder["moderately"] else "not"

        by_pid = {t["pid"]: t for t in summary["training"]}
        ranks = {k["pid"]: k for k in summary["ranks"]}
        for pid in {int(c[1]) for c in calls}:
            mine = [c for c in calls if int(c[1]) == pid]  # RANK PID EPOCH INDEX NS BEGAN
            ends = [int(s[4]) for s in stops if int(s[1]) == pid]  # RANK PID EPOCH BEGAN ENDED
            self.assertEqual(len(ends), EPOCHS)
            waited = sum(int(c[4]) for c in mine)
            first = min(int(c[5]) for c in mine)
            last = max(ends + [int(c[5]) + int(c[4]) for c in mine])
            share = waited / (last - first)
            t = by_pid[pid]
            tol = 0.01 + 0.02 * share
            self.assertAlmostEqual(t["waiting_share"], share, delta=tol, msg=(pid, t["waiting_share"], share))
            near = [g for g in (grade(share - tol), grade(share), grade(share + tol))]
            self.assertIn(t["input_bound_grade"], near, (pid, t["waiting_share"], share))
            if len(set(near)) == 1:  # not within the tolerance of a threshold: exactly the timers' grade
                self.assertEqual(t["input_bound_grade"], grade(share), (pid, share))
            self.assertIn(f"{t['input_bound_grade']} input-bound (20 % or more: highly; 5-20 %: moderately; "
                          "under 5 %: not)", t["verdict"])
            self.assertEqual(ranks[pid]["input_bound_grade"], t["input_bound_grade"])
            self.assertEqual(ranks[pid]["input_bound"], t["input_bound_grade"] == "highly")
            row = [line for line in stdout.splitlines() if line.startswith(ranks[pid]["label"] + " ")][0]
            self.assertIn(f"{t['input_bound_grade']} input-bound", row)  # the ranks table

    def test_two_ranks_torch_1_13(self):
        self.two_ranks([PY])

    def test_two_ranks_modern_stack(self):
        self.two_ranks([os.path.join(HERE, "in_root.sh"), ROOT, "python3"])

    def test_ranks_that_keep_up_are_graded_by_their_own_timers(self):
        # A training step of 100 ms per batch, and each epoch's first batch taken once the workers have made all
        # they were handed: each rank waits little; its grade is still the one its own timers give.
        data = dataset(IMAGES)
        summary, waits, loops = self.path("summary.json"), self.path("waits.log"), self.path("loops.log")
        r = run_lotus(["-q", "-o", self.path("ranks.json"), "--summary-json", summary, "--", PY, RANKS_JOB, data,
                       "--epochs", str(EPOCHS), "--workers", str(WORKERS), "--batch-size", str(BATCH), "--wait-log",
                       waits, "--loop-log", loops, "--step-ms", "100"])
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        with open(summary) as f:
            summary = json.load(f)
        self.assertEqual(len(summary["training"]), 2)
        self.assert_grades_match_the_ranks_timers(summary, read_lines(waits), read_lines(loops), r.stdout)
        # (the workload does what it is for: neither rank is highly input-bound)
        self.assertNotIn("highly", [t["input_bound_grade"] for t in summary["training"]], summary["training"])

    def test_rank_from_the_environment(self):
        # torchrun starts each rank with RANK set: its DataLoader workers inherit it and are still workers
        data = dataset(IMAGES)
        out, summary = self.path("env.json"), self.path("env-summary.json")
        r = run_lotus(["-q", "-o", out, "--summary-json", summary, "--", PY, WORKLOAD, data, "--workers", "2"],
                      env={**os.environ, "RANK": "3", "LOCAL_RANK": "1"})
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(summary) as f:
            labels = sorted(p["label"] for p in json.load(f)["processes"])
        self.assertEqual(labels, ["rank 3", "worker 0", "worker 1"])


if __name__ == "__main__":
    unittest.main()
