"""DataLoader semantics on real torch: worker batches, loader/collate spans, waits, delays, flows, epochs,
in every multiprocessing mode."""
import json
import os
import re
import subprocess
import unittest
from collections import Counter

from harness import (OPS, PIN_THREAD_SLACK_US, PY, WORKLOAD, BpfTestCase, assert_containers, assert_dataloader_exact, assert_nested,
                     assert_retried_items, assert_two_views, assert_waits_match, dataset,
                     image_paths, load_trace, read_lines, run_lotus, spans)

IMAGES, BATCH = 256, 32
BATCHES = IMAGES // BATCH


class DataLoaderSemantics(BpfTestCase):
    def trace_job(self, *job_args, epochs=2, workers=2, env=None):
        data = dataset(IMAGES)
        out = self.path("trace.json")
        self.wait_log = self.path("waits.log")
        if os.path.exists(self.wait_log):  # the workload appends (a test may run several jobs)
            os.remove(self.wait_log)
        self.summary = self.path("summary.json")
        r = run_lotus(["-q", "-o", out, "--summary-json", self.summary, "--", PY, WORKLOAD, data,
                       "--workers", str(workers), "--batch-size", str(BATCH), "--epochs", str(epochs),
                       "--wait-log", self.wait_log, *job_args], env={**os.environ, **(env or {})})
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        self.stdout, self.stderr = r.stdout, r.stderr
        return data, load_trace(out)

    def check(self, data, trace, epochs, workers):
        assert_dataloader_exact(self, data, trace, epochs, workers, IMAGES, BATCH, OPS, self.stdout, self.summary)

    def test_container_transforms(self):
        data, trace = self.trace_job("--containers", epochs=1)
        assert_containers(self, trace, IMAGES, OPS, self.summary)

    def test_non_ascii_names_pass_through(self):
        """Paths and class names that are not ASCII read back identical from the trace and the summary JSON."""
        out, js = self.path("tracé.json"), self.path("résumé.json")
        r = run_lotus(["-q", "-o", out, "--summary-json", js, "--", PY,
                       os.path.join(os.path.dirname(WORKLOAD), "unicode_job.py"), dataset(64), self.tmp])
        self.assertEqual(r.returncode, 0, r.stderr)
        loaded = {l.split(" ", 1)[1] for l in r.stdout.splitlines() if l.startswith("loaded ")}
        self.assertEqual(len(loaded), 16)
        self.assertTrue(all("café/classe_ü/img_" in p and p.endswith("_ü日.jpg") for p in loaded), loaded)
        trace = load_trace(out)
        self.assertEqual({s["args"]["path"] for s in spans(trace, "loader")}, loaded)
        self.assertEqual(Counter(s["name"] for s in spans(trace, "op")),
                         {"Recadré": 16, "変換": 16, "ToTensor": 16})
        with open(js, encoding="utf-8") as f:
            ops = json.load(f)["ops"]
        self.assertEqual(ops["Recadré"]["count"], 16)
        self.assertEqual(ops["変換"]["count"], 16)
        self.assertIn("Recadré", r.stdout)  # the printed summary too
        self.assertIn("変換", r.stdout)

    def test_two_workers_fork(self):
        # Both ways of probing Python calls: the type slots (the default) and the evaluator (--span, --all-calls,
        # interpreters whose slot table is not found), which sees every call from C and so describes far more.
        for probes, env, root_min, worker_max, workers_max in (
                ("type slots", {}, 100, 100, 250), ("evaluator", {"LOTUS_EVALUATOR_PROBE": "1"}, 1000, 250, 600)):
            with self.subTest(probes=probes):
                data, trace = self.trace_job(env={"LOTUS_DEBUG_EVENTS": "1", **env})  # every record on stderr
                self.check(data, trace, 2, 2)
                self.assertEqual(trace["otherData"]["python_probes"], probes)
                # Forked workers share the main process's role space: BPF describes to user space only the code
                # objects a worker made after the fork (Pillow's JPEG plugin, imported at the first image), not
                # every module it runs again (~320 per worker when roles were per process), and a worker's own
                # object at an address where a sibling has another one is described once, not at every call.
                root = str(trace["otherData"]["target_pid"])
                described = Counter()
                for line in self.stderr.splitlines():
                    m = re.match(r"ev 3 pid (\d+) tid \d+ ts \d+ code (\S+)", line)
                    if m:
                        described[m.group(1), m.group(2)] += 1
                per_pid = Counter()
                for (pid, _), n in described.items():
                    per_pid[pid] += n
                workers = {str(b["pid"]) for b in spans(trace, "batch")}
                self.assertEqual(len(workers), 4)  # 2 per epoch
                self.assertGreater(per_pid[root], root_min, per_pid)
                for w in workers:
                    self.assertLess(per_pid[w], worker_max, per_pid)
                self.assertLess(sum(per_pid[w] for w in workers), workers_max, per_pid)
                self.assertLessEqual(max(n for (pid, _), n in described.items() if pid in workers), 3)

    def test_every_syscall_attachment(self):
        """The DataLoader's pickles, the samples' file opens and the workers' getppid reach the engine the same
        through libc's wrappers in the traced processes, with the pickles received at the interpreter's os.read (the
        default where probes are per process) or at libc's read() (LOTUS_LIBC_READ=1), through the syscalls: events
        (LOTUS_SYSCALL_EVENTS=1; the native map's way) and through the raw sys_enter/sys_exit pair (where tracefs
        cannot be read, as with CAP_BPF + CAP_PERFMON alone; LOTUS_RAW_SYSCALLS=1 forces it here)."""
        for env, programs in (({}, "traced processes' libc calls and os.read"),
                              ({"LOTUS_LIBC_READ": "1"}, "traced processes' libc calls"),
                              ({"LOTUS_SYSCALL_EVENTS": "1"}, "watched syscalls"),
                              ({"LOTUS_RAW_SYSCALLS": "1"}, "every syscall")):
            with self.subTest(programs=programs):
                data, trace = self.trace_job(env=env)
                self.check(data, trace, 2, 2)
                self.assertEqual(trace["otherData"]["syscall_programs"], programs)

    def waits_match_in_process_next(self, trace, slack_us=500.0, outliers=0):
        assert_waits_match(self, trace, self.wait_log, slack_us, outliers)

    def test_wait_times_match_in_process_next(self):
        data, trace = self.trace_job()
        self.waits_match_in_process_next(trace)

    def test_pin_memory_thread(self):
        """pin_memory with CUDA: torch's pin-memory thread relays each batch from the result queue to next(), which
        reads none itself. torch is told CUDA is there and its pinning hands batches over unchanged; the thread,
        its queues and next() are torch's own. Every wait is that next()'s batch, persistent workers too."""
        for args, epochs in ((), 2), (("--persistent",), 3):
            with self.subTest(args=args):
                data, trace = self.trace_job("--pin-memory", "--pin-thread", *args, epochs=epochs)
                self.check(data, trace, epochs, 2)
                self.waits_match_in_process_next(trace, PIN_THREAD_SLACK_US)

    def test_target_transform_and_own_calls_are_the_items(self):
        """An item's __getitem__ runs two pipelines (transform, then target_transform, each a Compose) and calls an
        object of its own after them (a subclass's, after super().__getitem__): one sample each item, with one
        loader, holding every op, and batches of BATCH samples."""
        data, trace = self.trace_job("--target-transform", epochs=1)
        assert_dataloader_exact(self, data, trace, 1, 2, IMAGES, BATCH, OPS + ["Offset", "LabelTensor", "Relabel"],
                                self.stdout, self.summary)
        samples = {s["args"]["sample_id"]: s for s in spans(trace, "sample")}
        for op in spans(trace, "op"):
            smp = samples[op["args"]["sample_id"]]
            self.assertTrue(smp["ts"] <= op["ts"] and op["ts"] + op["dur"] <= smp["ts"] + smp["dur"], (op, smp))
        # each sample ends with its own call, after both pipelines
        ends = sorted(s["ts"] + s["dur"] for s in spans(trace, "sample"))
        self.assertEqual(ends, sorted(op["ts"] + op["dur"] for op in spans(trace, "op") if op["name"] == "Relabel"))

    def test_two_views_of_each_item_are_one_sample(self):
        """transform=TwoViews(Compose): each item runs the same pipeline twice (contrastive learning)."""
        data, trace = self.trace_job("--two-views", epochs=1)
        assert_two_views(self, trace, IMAGES, BATCH, OPS, self.summary)

    def test_an_item_retried_after_its_pipeline_raised_is_one_sample(self):
        """A transform raises now and then; the dataset's __getitem__ catches it and runs the pipeline again."""
        log = self.path("retries.log")
        data, trace = self.trace_job("--flaky", log, epochs=1)
        assert_retried_items(self, trace, log, IMAGES, BATCH, "RandomResizedCrop", "ToTensor")

    def test_no_batching(self):
        """DataLoader(batch_size=None): each task is one sample's index, not a list, and each 'batch' one sample,
        converted, not collated. Every sample is a batch of one, with its wait, arrow and delay."""
        data, trace = self.trace_job("--no-batching", epochs=1)
        assert_dataloader_exact(self, data, trace, 1, 2, IMAGES, 1, OPS, self.stdout, self.summary)
        # (256 short waits on 2 CPUs the workers keep busy: the scheduler preempted the loop next to a call in 1 to
        # 3 of them in a run, 1.5-3.5 ms; none may be longer than its timer)
        self.waits_match_in_process_next(trace, outliers=IMAGES // 50)
        self.assertIn("from a batch ready to its use", self.stdout)

    def test_persistent_workers_left_mid_epoch(self):
        """The loop leaves every other epoch after 3 batches: the persistent iterator's next __iter__ reads and drops
        what the workers still sent of it before their new epoch begins (the training loop itself, or torch's
        pin-memory thread). Every wait is its next()'s batch, of its epoch."""
        for args in (), ("--pin-memory", "--pin-thread"):
            with self.subTest(args=args):
                data, trace = self.trace_job("--persistent", "--break-after", "3", *args, epochs=4)
                self.waits_match_in_process_next(trace, PIN_THREAD_SLACK_US if args else 500.0)
                self.assertEqual(len(spans(trace, "wait")), 3 + BATCHES + 3 + BATCHES)
                self.assertNotIn("as they arrived", self.stdout)

    def test_persistent_workers_three_epochs(self):
        data, trace = self.trace_job("--persistent", epochs=3)
        self.check(data, trace, 3, 2)
        self.assertEqual(len({b["pid"] for b in spans(trace, "batch")}), 2)  # the same two processes

    def test_spawn(self):
        data, trace = self.trace_job("--context", "spawn", epochs=1)
        self.check(data, trace, 1, 2)

    def test_forkserver(self):
        data, trace = self.trace_job("--context", "forkserver", epochs=1)
        self.check(data, trace, 1, 2)

    def test_no_workers(self):
        data, trace = self.trace_job(workers=0)
        self.check(data, trace, 2, 0)

    def test_one_and_four_workers(self):
        for workers in (1, 4):
            with self.subTest(workers=workers):
                data, trace = self.trace_job(workers=workers, epochs=1)
                self.check(data, trace, 1, workers)

    def test_two_dataloaders_told_apart(self):
        data, trace = self.trace_job("--val", epochs=2)
        batches = Counter((b["args"]["loader"], b["args"]["epoch"], b["args"]["batch"]) for b in spans(trace, "batch"))
        waits = Counter((w["args"]["loader"], w["args"]["epoch"], w["args"]["batch"]) for w in spans(trace, "wait"))
        val_batches = IMAGES // (2 * BATCH)
        expected = Counter({(0, e, b): 1 for e in range(2) for b in range(BATCHES)})
        expected.update({(1, e, b): 1 for e in range(2) for b in range(val_batches)})
        self.assertEqual(batches, expected)
        self.assertEqual(waits, expected)
        starts = {e["id"] for e in trace["traceEvents"] if e["ph"] == "s"}
        self.assertEqual(starts, {e["id"] for e in trace["traceEvents"] if e["ph"] == "f"})
        self.assertEqual(len(starts), sum(expected.values()))
        # the summary keeps them apart: an op table, batches and worker rows per DataLoader
        with open(self.summary) as f:
            summary = json.load(f)
        root = trace["otherData"]["target_pid"]
        loaders = {x["loader"]: x for x in summary["loaders"] if x["owner"] == root}
        self.assertEqual(set(loaders), {0, 1})
        self.assertEqual(loaders[0]["ops"]["ToTensor"]["count"], 2 * IMAGES)
        self.assertEqual(loaders[1]["ops"]["ToTensor"]["count"], 2 * IMAGES)
        self.assertNotIn("Resize", loaders[0]["ops"])
        self.assertEqual(loaders[1]["ops"]["Resize"]["count"], 2 * IMAGES)
        self.assertEqual(loaders[0]["batches"]["prepare"]["count"], 2 * BATCHES)
        self.assertEqual(loaders[1]["batches"]["wait"]["count"], 2 * val_batches)
        self.assertEqual(summary["ops"]["ToTensor"]["count"], 4 * IMAGES)  # and together
        self.assertIn("DataLoader 0 of main", self.stdout)
        self.assertIn("DataLoader 1 of main", self.stdout)
        lines = self.stdout.splitlines()
        table = lines[next(i for i, l in enumerate(lines) if l.startswith("process ")) + 1:]
        table = table[:next(i for i, l in enumerate(table) if not l.strip() or l.startswith("("))]
        worker_rows = [l.split() for l in table if l.startswith("worker ")]
        self.assertEqual(sorted((r[1], r[2]) for r in worker_rows), [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")])

    def test_iterable_dataset_batches(self):
        data, trace = self.trace_job("--iterable", epochs=2)
        pairs = Counter((b["args"]["epoch"], b["args"]["batch"]) for b in spans(trace, "batch"))
        self.assertEqual(sum(pairs.values()), len(spans(trace, "wait")))
        # each worker yields half the items: batches of 32 until its share runs out, all handed over
        self.assertEqual(len(spans(trace, "wait")), 2 * BATCHES)
        self.assertEqual(set(pairs.values()), {1})

    def test_iterable_dataset_uneven_shares(self):
        """Worker 1's data runs out first: it sends an end-of-data marker for one task and nothing for the task it
        had besides, and next() skips both. Every wait is the batch its next() returned (the iterator's own count),
        whether the training loop reads the result queue or torch's pin-memory thread relays it."""
        for args in (), ("--pin-memory", "--pin-thread"):
            with self.subTest(args=args):
                data, trace = self.trace_job("--iterable", "--uneven", *args, epochs=2)
                # one wait may be shorter than the timer by more (the loop preempted around next(); CI on e80dd7a:
                # 7.45 ms traced against 9.42 ms in process); none may be longer
                self.waits_match_in_process_next(trace, PIN_THREAD_SLACK_US if args else 500.0, outliers=1)
                skipped = {int(b) for e, b, *_ in read_lines(self.wait_log) if e == "0"}
                self.assertLess(len(skipped), max(skipped) + 1, "next() skipped no index: nothing tested")

    def test_threads_named_as_the_kernel_names_them(self):
        # The job renames its main thread and each worker's (prctl, after they ran Python code): the trace's
        # thread names carry those names, as the job logged them.
        out, log = self.path("trace.json"), self.path("threads.log")
        r = run_lotus(["-q", "-o", out, "--", PY, WORKLOAD, dataset(64), "--workers", "2", "--epochs", "2",
                       "--thread-log", log])
        self.assertEqual(r.returncode, 0, r.stderr)
        trace = load_trace(out)
        names = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "thread_name"}
        named = read_lines(log)
        self.assertEqual(len(named), 1 + 2 * 2)  # the main thread, two workers in each of two epochs
        for pid, tid, name in named:
            self.assertEqual(names.get((int(pid), int(tid))), f"main thread ({name})", (pid, tid, names))
        # the other threads with spans carry their names too (inherited from the thread that made them)
        for (pid, tid), name in names.items():
            self.assertRegex(name, r"^(main thread|queue feeder thread|thread \d+) \(.+\)$")

    def test_coarse_and_window_trace(self):
        data = dataset(IMAGES)
        out = self.path("coarse.json")
        r = run_lotus(["-q", "-o", out, "--coarse", "--", PY, WORKLOAD, data, "--batch-size", str(BATCH)])
        self.assertEqual(r.returncode, 0, r.stderr)
        trace = load_trace(out)
        self.assertEqual({e["cat"] for e in trace["traceEvents"] if e["ph"] in "Xi"}, {"batch", "wait", "consumed"})
        self.assertEqual(len(spans(trace, "batch")), BATCHES)
        self.assertIn("RandomResizedCrop", r.stdout)  # the summary still covers everything
        out = self.path("window.json")
        r = run_lotus(["-q", "-o", out, "--window", "0:0.000001", "--", PY, WORKLOAD, data])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(spans(load_trace(out)), [])
        r = run_lotus(["-q", "-o", out, "--window", "5", "--", PY, "-c", "pass"])
        self.assertEqual(r.returncode, 2)

    def test_own_map_style_dataset_without_compose(self):
        data, trace = self.trace_job("--own-dataset", epochs=1)
        pairs = Counter((b["args"]["epoch"], b["args"]["batch"]) for b in spans(trace, "batch"))
        self.assertEqual(pairs, Counter({(0, b): 1 for b in range(BATCHES)}))
        samples = spans(trace, "sample")
        self.assertEqual(sorted(s["args"]["sample"] for s in samples), list(range(IMAGES)))
        self.assertTrue(all(s["args"].get("implicit") for s in samples))
        self.assertEqual(Counter(s["name"] for s in spans(trace, "op")),
                         Counter({"OwnCrop": IMAGES, "OwnToTensor": IMAGES}))
        paths = sorted(os.path.join(d, f) for d, _, files in os.walk(data) for f in files if f.endswith(".jpg"))
        loaders = spans(trace, "loader")
        self.assertEqual(len(loaders), IMAGES)
        for l in loaders:
            self.assertEqual(l["args"]["path"], paths[l["args"]["sample"]])
        assert_nested(self, trace)

    def test_a_few_long_calls_are_said_in_the_advice(self):
        """An op whose time is mostly two long calls (500 and 800 ms; a pause inside them, as a worker's garbage
        collection made on Debian's CPython 3.14, ~2 s once per worker per epoch here) is named with them: the
        advice says how many, how long, their share, and where the longest is, against the job's own timings."""
        log = self.path("stalls.log")
        job = ("import os, sys, time, torch\n"
               "from torch.utils.data import DataLoader, Dataset\n"
               "from torchvision import transforms\n"
               "class Stall:\n"
               "    def __call__(self, i):\n"
               "        if i in (7, 150):\n"
               "            t = time.monotonic(); time.sleep(0.5 if i == 7 else 0.8)\n"
               f"            open({log!r}, 'a').write(f'{{os.getpid()}} {{i}} {{(time.monotonic() - t) * 1000}}\\n')\n"
               "        return i\n"
               "class Double:\n"
               "    def __call__(self, i):\n"
               "        return 2 * i\n"
               "class Numbers(Dataset):\n"
               "    def __init__(self): self.transform = transforms.Compose([Stall(), Double()])\n"
               "    def __len__(self): return 200\n"
               "    def __getitem__(self, i): return self.transform(i)\n"
               "for batch in DataLoader(Numbers(), batch_size=10, num_workers=2):\n"
               "    pass\n")
        out, summary = self.path("t.json"), self.path("s.json")
        r = run_lotus(["-q", "-o", out, "--summary-json", summary, "--", PY, "-c", job])
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        stalls = {int(i): (int(pid), float(ms)) for pid, i, ms in read_lines(log)}
        self.assertEqual(sorted(stalls), [7, 150])
        with open(summary) as f:
            advice = [a for t in json.load(f)["training"] for a in t["advice"]]
        said = [a for a in advice if a.startswith("Stall takes the most time per sample")]
        self.assertEqual(len(said), 1, advice)
        m = re.search(r"\. 2 of its 200 calls took (\d+) % of that \((\d+) ms and (\d+) ms; its other calls "
                      r"[\d.]+ ms on average\): not its usual cost; look at them in the trace first \(the longest: "
                      r"sample_id (\d+) in PID (\d+)\)\.$", said[0])
        self.assertIsNotNone(m, said[0])
        self.assertGreaterEqual(int(m.group(1)), 95)
        self.assertAlmostEqual(int(m.group(2)), stalls[7][1], delta=5)
        self.assertAlmostEqual(int(m.group(3)), stalls[150][1], delta=5)
        self.assertEqual(int(m.group(5)), stalls[150][0])
        longest = [o for o in spans(load_trace(out), "op", "Stall") if o["args"]["sample_id"] == int(m.group(4))]
        self.assertEqual(len(longest), 1)
        self.assertEqual(longest[0]["pid"], stalls[150][0])
        self.assertEqual(longest[0]["args"]["sample"], 150)
        self.assertIn(said[0][:60], r.stdout)  # the printed summary says it too (wrapped)


if __name__ == "__main__":
    unittest.main()
