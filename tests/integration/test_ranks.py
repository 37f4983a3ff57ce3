"""Several training processes: torch.multiprocessing.spawn with two ranks (gloo, DistributedSampler), each with its
own DataLoader and workers, on Debian's torch 1.13 and on the modern stack; a rank named by its RANK environment
(as torchrun starts them). Every rank's batches, epochs and waits are its own, every arrow joins the same batch of
the same rank, every wait's id is the true one."""
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
        r = run_lotus(["-q", "-o", out, "--summary-json", summary, "--", *python, RANKS_JOB, data, "--epochs",
                       str(EPOCHS), "--workers", str(WORKERS), "--batch-size", str(BATCH), "--wait-log", waits])
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

    def test_two_ranks_torch_1_13(self):
        self.two_ranks([PY])

    def test_two_ranks_modern_stack(self):
        self.two_ranks([os.path.join(HERE, "in_root.sh"), ROOT, "python3"])

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
