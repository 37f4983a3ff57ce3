"""Several nodes in one report: each node's lotus-bpf `record --node NAME` makes its record file, and `report A B`,
`export A B -o all.json` and `--html` give one reconstruction of all of them, on one clock, with global ranks, a
per-rank table and the straggler named. Two "nodes" here are two torchrun launches on this machine
(--nnodes 2 --node_rank K, gloo over 127.0.0.1), each traced by its own lotus-bpf."""
import json
import os
import subprocess

from harness import BpfTestCase, HERE, PY, dataset, free_port, load_trace, read_lines, run_lotus, spans, start_lotus

TORCHRUN_JOB = os.path.join(HERE, "workloads", "torchrun_job.py")
RANKS_JOB = os.path.join(HERE, "workloads", "ranks_job.py")
IMAGES, EPOCHS, SLOW_RANK = 128, 2, 3


class NodesTest(BpfTestCase):
    def record_nodes(self, commands):
        """Each (node, command) launched under its own `lotus-bpf record --node NODE`, all at once; their files."""
        runs = []
        for node, command in commands:
            record = self.path(f"{node}.lbt")
            runs.append((record, start_lotus(["record", "-q", "--node", node, "-o", record, "--", *command],
                                             cwd=self.tmp)))
        for record, proc in runs:
            out, err = proc.communicate(timeout=300)
            self.assertEqual(proc.returncode, 0, err)
        self.assert_detached()
        return [record for record, proc in runs]

    def test_two_torchrun_nodes_are_one_report_that_names_the_slowed_rank(self):
        data, port, logs = dataset(IMAGES), free_port(), self.path("logs")
        os.makedirs(logs)
        # (--redirects/--tee 1: torch 1.13's torchrun cannot parse their default "0" on Python 3.11)
        torchrun = [PY, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "2", "--master_addr",
                    "127.0.0.1", "--master_port", str(port), "--redirects", "1", "--tee", "1"]
        job = [TORCHRUN_JOB, data, "--epochs", str(EPOCHS), "--slow-rank", str(SLOW_RANK), "--slow-ms", "40",
               "--log", logs]
        records = self.record_nodes([(f"n{k}", torchrun + ["--node_rank", str(k), "--log_dir", self.path(f"tl{k}")]
                                      + job) for k in (0, 1)])
        summary, html = self.path("summary.json"), self.path("all.html")
        r = run_lotus(["report", *records, "--summary-json", summary, "--html", html])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(summary) as f:
            s = json.load(f)
        # Ground truth: each rank's own log of the batches it consumed.
        truth = {}
        for rank in range(4):
            lines = read_lines(os.path.join(logs, f"rank-{rank}"))
            truth[rank] = (len(lines), sum(int(l[2]) for l in lines))
        self.assertEqual(sum(n for b, n in truth.values()), IMAGES * EPOCHS)
        ranks = {k["rank"]: k for k in s["ranks"]}
        self.assertEqual(sorted(ranks), [0, 1, 2, 3], s["ranks"])
        for rank, (batches, samples) in truth.items():
            k = ranks[rank]
            self.assertEqual((k["batches"], k["samples"]), (batches, samples), k)
            self.assertEqual(k["node"], "n0" if rank < 2 else "n1")
            self.assertEqual(k["local_rank"], rank % 2)
            self.assertEqual(k["label"], f"rank {rank}")
        self.assertEqual(s["throughput"]["samples"], IMAGES * EPOCHS)
        # --trainer-calls auto: every torchrun rank's own object calls went unprobed (the records say when)
        self.assertEqual(sorted(c["pid"] for c in s["run"]["object_calls_unprobed"]), sorted(k["pid"] for k in s["ranks"]))
        # The slowed rank is the straggler, said in words.
        self.assertIsNotNone(s["straggler"], s["ranks"])
        self.assertEqual(s["straggler"]["rank"], SLOW_RANK)
        self.assertEqual(s["straggler"]["node"], "n1")
        self.assertGreater(s["straggler"]["wait_share"], s["straggler"]["others"] + 0.1)
        self.assertIn(f"Straggler: rank {SLOW_RANK} on n1 waited for data", r.stdout)
        self.assertIn("2 nodes in one reconstruction", r.stdout)
        self.assertIn("synchronised (NTP, PTP)", r.stdout)
        self.assertEqual([n["name"] for n in s["run"]["nodes"]], ["n0", "n1"])
        self.assertEqual([n["ids_moved_by"] for n in s["run"]["nodes"]], [0, 0])  # (one machine: no pid is shared)
        with open(html) as f:
            self.assertIn(f"Straggler: rank {SLOW_RANK} on n1", f.read())
        # One trace of both nodes: every rank's waits, every sample.
        trace = self.path("all.json")
        r = run_lotus(["export", *records, "-o", trace])
        self.assertEqual(r.returncode, 0, r.stderr)
        t = load_trace(trace)
        self.assertEqual(len(spans(t, "sample")), IMAGES * EPOCHS)
        waits = [w for w in spans(t, "wait") if "batch" in w["args"]]
        self.assertEqual(len(waits), sum(b for b, n in truth.values()))

    def test_spawned_ranks_of_two_nodes_are_local_ranks_on_their_node(self):
        data = dataset(64)
        job = [PY, RANKS_JOB, data, "--ranks", "2", "--workers", "1", "--epochs", "1"]
        records = self.record_nodes([("a", job), ("b", job)])
        summary = self.path("summary.json")
        r = run_lotus(["report", *records, "--summary-json", summary])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(summary) as f:
            s = json.load(f)
        # torch.multiprocessing.spawn's index is local to its node: never a global "rank N" across nodes.
        labels = sorted(k["label"] for k in s["ranks"])
        self.assertEqual(labels, ["local rank 0 on a", "local rank 0 on b", "local rank 1 on a", "local rank 1 on b"])
        self.assertTrue(all(k["rank"] is None for k in s["ranks"]), s["ranks"])
        self.assertNotIn("\nrank 0 ", r.stdout)
        self.assertEqual(sum(k["samples"] for k in s["ranks"]), 128)

    def test_one_file_twice_moves_the_second_copys_ids_and_says_so(self):
        data = dataset(64)
        (record,) = self.record_nodes([("solo", [PY, RANKS_JOB, data, "--ranks", "2", "--workers", "1",
                                                 "--epochs", "1"])])
        one, two = self.path("one.json"), self.path("two.json")
        self.assertEqual(run_lotus(["report", record, "--summary-json", one]).returncode, 0)
        r = run_lotus(["report", record, record, "--summary-json", two])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(one) as f:
            a = json.load(f)
        with open(two) as f:
            b = json.load(f)
        # The same pids on "two nodes": the second's are moved, named apart and said; every figure counts twice.
        self.assertEqual([n["name"] for n in b["run"]["nodes"]], ["solo", "solo#1"])
        self.assertEqual(b["run"]["nodes"][1]["ids_moved_by"], 1 << 24)
        self.assertIn("collided with an earlier node's", r.stdout)
        self.assertEqual(b["throughput"]["samples"], 2 * a["throughput"]["samples"])
        for op, row in a["ops"].items():
            self.assertEqual(b["ops"][op]["count"], 2 * row["count"], op)
        self.assertEqual(len(b["ranks"]), 4)

    def test_a_damaged_file_among_several_is_one_line(self):
        bad = self.path("not-a-record.lbt")
        with open(bad, "wb") as f:
            f.write(b"garbage")
        r = run_lotus(["report", bad, bad])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
