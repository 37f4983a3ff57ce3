"""The answers of issue 80 on the modern stack (CPython 3.14, torch 2.x, in the root of test_modern.py), each against
the job's own account in the same run, in four short runs of the workloads their own tests run on Debian's torch 1.13
(test_wait_causes, test_slow_samples, test_stuck, test_worker_memory, test_limits, test_dataloader.UserContainers):
the graded verdict and the wait causes that add up to the waits, a slow file named with its path, a stuck worker
named live and by `dump` with its Python stack, copy-on-read under fork and none under 3.14's default forkserver, a
user's container class named without --pipeline, and the job's cgroup CPU limit with its throttling."""
import json
import os
import re
import subprocess
import time
import unittest

from harness import (HERE, LOTUS, BpfTestCase, assert_waits_as_timed, kill_group, load_trace, read_lines, run_lotus,
                     spans)
from test_modern import ROOT, in_root
from test_stuck import line_of, processes, thread_stacks
from test_worker_memory import own_rates

WORKLOADS = os.path.join(HERE, "workloads")
BATCH = 16  # wait_causes_job.py's batch size
LADDER = {"moderately": 0.05, "highly": 0.2}


def grade(share):
    return "highly" if share >= LADDER["highly"] else "moderately" if share >= LADDER["moderately"] else "not"


class ModernAnswers(BpfTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not os.path.exists(os.path.join(ROOT, ".lotus-ready")):
            raise AssertionError(f"no modern stack at {ROOT}: scripts/install-modern-stack.sh builds it")

    def lotus(self, flags, job, *args, timeout=300):
        r = run_lotus([*flags, "--", *in_root("python3", os.path.join(WORKLOADS, job), *args)], timeout=timeout)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("CPython 3.14", r.stderr)
        return r

    def test_verdict_wait_causes_and_a_slow_file(self):
        """One big file in 50 (160 ms of "decoding" against 0.5 ms), 2 workers, a 30 ms step: every wait as the job
        timed it, the causes adding up to them, the slow file named with its path in its batch's wait and among the
        slow samples, and the loop's waiting share and grade as the job's own clock gives them."""
        data = self.path("data")
        os.makedirs(data)
        big = {i for i in range(320) if i % 50 == 40}
        for i in range(320):
            with open(os.path.join(data, f"{i:04d}.bin"), "wb") as f:
                f.write(b"x" * 1024 * (320 if i in big else 1))
        out, js, waits_log, loop_log = (self.path(n) for n in ("t.json", "s.json", "waits.log", "loop.log"))
        r = self.lotus(["-q", "-o", out, "--summary-json", js], "wait_causes_job.py", data, "--wait-log", waits_log,
                       "--loop-log", loop_log, "--ms-per-kb", "0.5", "--workers", "2", "--step-ms", "30")
        with open(js) as f:
            s = json.load(f)
        trace = load_trace(out)
        self.assertEqual(trace["otherData"]["lost_events"], 0)
        waits = {w["args"]["batch"]: w for w in spans(trace, "wait")}
        timed = {int(b): int(ns) for b, ns in read_lines(waits_log)}
        causes, _ = assert_waits_as_timed(self, waits, timed, s)
        named = 0
        for i in big:
            w = waits[i // BATCH]
            if w["dur"] > 20000:
                self.assertEqual((w["args"]["slowest_sample"], w["args"]["slowest_path"], w["args"]["slowest_op"]),
                                 (i, os.path.join(data, f"{i:04d}.bin"), "loading"), w["args"])
                named += 1
        self.assertGreaterEqual(named, 3, {b: w["args"].get("causes") for b, w in waits.items()})
        # the slow samples: every big file, slow, with its path and size
        (g,) = s["slow_samples"]["loaders"]
        slow = {row["path"]: row for row in g["rows"]}
        for i in big:
            p = os.path.join(data, f"{i:04d}.bin")
            self.assertIn(p, slow, g["rows"])
            self.assertEqual((slow[p]["index"], slow[p]["bytes"], slow[p]["times_slow"]), (i, 320 * 1024, 1))
        # the graded verdict: the share of the loop's time in next(), by the job's own clock
        first, end = (int(x) for x in read_lines(loop_log)[0])
        share = sum(timed.values()) / (end - first)
        (t,) = s["training"]
        self.assertEqual(s["input_bound_thresholds"], LADDER)
        self.assertAlmostEqual(t["waiting_share"], share, delta=0.02)
        near = {grade(share - 0.02), grade(share + 0.02)}
        self.assertIn(t["input_bound_grade"], near, (t["waiting_share"], share))
        self.assertIn(f"{t['input_bound_grade']} input-bound", " ".join(r.stdout.split()))
        print(f"\nmodern: waiting share {t['waiting_share']:.3f} (job {share:.3f}), {t['input_bound_grade']}; "
              f"causes {causes}", flush=True)

    def test_stuck_worker_named_live_and_by_dump(self):
        """A worker sleeping 6 s in one sample: the tracer names it after 2 s with its Python stack and the sample's
        index, and `lotus-bpf dump` run meanwhile shows the same stack, read from outside."""
        job_py, log = os.path.join(WORKLOADS, "stuck_job.py"), self.path("job.log")
        tracer = subprocess.Popen([LOTUS, "-o", self.path("t.json"), "--stuck-after", "2", "--summary-json",
                                   self.path("s.json"), "--", *in_root("python3", job_py, "--log", log, "--sleep", "6")],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.addCleanup(kill_group, tracer)

        def logged(want):
            deadline = time.time() + 60
            while time.time() < deadline:
                if os.path.exists(log):
                    with open(log) as f:
                        found = [l.split() for l in f.read().split("\n") if l.startswith(want)]
                    if found:
                        return found[0]
                self.assertIsNone(tracer.poll(), "the job ended early")
                time.sleep(0.05)
            self.fail(f"the job never logged {want!r}")

        main = int(logged("main")[1])
        _, index, worker, _, _ = logged("stuck")
        time.sleep(0.3)
        d = run_lotus(["dump", str(main)], timeout=60)
        out, err = tracer.communicate(timeout=120)
        self.assertEqual(tracer.returncode, 0, err[-3000:])
        sleep_line, getitem_line = line_of("time.sleep(seconds)"), line_of("stall(self.seconds)")
        getitem = f"StuckDataset.__getitem__ ({job_py}:{getitem_line}) idx={index}"
        # dump: the worker's sleeping thread, innermost first, and the loop's
        self.assertEqual(d.returncode, 0, d.stderr)
        blocks = processes(d.stdout)
        self.assertIn(int(worker), blocks, d.stdout)
        (stack,) = [s for s in thread_stacks(blocks[int(worker)]) if s and s[0].startswith("stall ")]
        self.assertTrue(stack[0].startswith(f"stall ({job_py}:{sleep_line})"), stack)
        self.assertEqual(stack[1], getitem)
        self.assertTrue(any(f.startswith("_worker_loop ") for f in stack), stack)
        self.assertIn("clock_nanosleep (libc.so.6)", blocks[int(worker)])  # its native stack
        loop = [s for s in thread_stacks(blocks[main]) if any(f.startswith(f"main ({job_py}:") for f in s)]
        self.assertEqual(len(loop), 1, blocks[main])
        self.assertIn(f"main ({job_py}:{line_of('for batch in loader')})", loop[0])
        # live: named once, with its stack, and resumed after the sleep
        stuck = [l for l in err.splitlines() if " stuck: " in l]
        self.assertEqual(len(stuck), 1, err[-3000:])
        self.assertIn(f"(PID {worker}) stuck: ", stuck[0])
        after = err[err.index(stuck[0]):]
        self.assertIn(f"    stall ({job_py}:{sleep_line})\n", after)
        self.assertIn(f"    {getitem}\n", after)
        resumed = [l for l in err.splitlines() if " resumed at " in l]
        self.assertEqual(len(resumed), 1, err[-3000:])
        seconds = float(re.search(r"after ([\d.]+) s without", resumed[0]).group(1))
        self.assertGreater(seconds, 5.5, resumed[0])
        self.assertLess(seconds, 7.5, resumed[0])
        with open(self.path("s.json")) as f:
            (row,) = json.load(f)["stuck"]
        self.assertEqual((row["pid"], row["threshold_s"]), (int(worker), 2.0))
        self.assertIn(getitem, row["stack"])

    def cow(self, *flags):
        log, js, rec = self.path("own.log"), self.path("s.json"), self.path("r.lbt")
        if os.path.exists(log):
            os.remove(log)
        self.lotus(["-q", "-o", "/dev/null", "--summary-json", js, "--record", rec, "--pss-interval", "200"],
                   "cow_job.py", log, "--pipeline", *flags, timeout=120)
        with open(js) as f:
            wm = json.load(f)["worker_memory"]
        again = self.path("again.json")  # the record file gives the same answer
        rr = run_lotus(["report", rec, "--summary-json", again])
        self.assertEqual(rr.returncode, 0, rr.stderr)
        with open(again) as f:
            self.assertEqual(json.load(f)["worker_memory"], wm)
        return wm, own_rates(log)

    def test_copy_on_read_under_fork_and_none_under_forkserver(self):
        """A list of 1,000,000 strings read by 2 workers: forked, each copies what it reads (3.14 still writes a
        string's reference count), at the rate the workers' own private memory gives; started by the forkserver
        (3.14's default), each unpickled a dataset of its own and shares nothing to copy: steady."""
        wm, (rates, points) = self.cow("--context", "fork")
        self.assertEqual((wm["copy_on_read"], len(wm["workers"])), (2, 2), wm)
        for w in wm["workers"]:
            self.assertFalse(w["from_forkserver"], w)
            own = rates[w["pid"]]
            self.assertGreater(own, 10, (own, points[w["pid"]]))
            self.assertLess(abs(w["rate_mb_per_1000"] - own) / own, 0.20, (w, own))
        wm, (rates, points) = self.cow()
        self.assertEqual((wm["copy_on_read"], wm["steady"], len(wm["workers"])), (0, 2, 2), wm)
        for w in wm["workers"]:
            own = points[w["pid"]]
            self.assertLess(own[-1][1] - own[0][1], 8, own)  # its own private memory: no growth with what it read
            # said to hold a copy of its own from its start: its private memory once it had begun reading, as its
            # own first figure (taken as its first sample began; the tracer's reading comes a few samples later)
            self.assertTrue(w["from_forkserver"], w)
            self.assertGreater(own[0][1], 40, own)  # (the 1,000,000 strings: ~80 MB; forked, ~5 MB)
            self.assertLess(abs(w["first_private_mb"] - own[0][1]), 0.1 * own[0][1], (w, own))
        self.assertIn("2 DataLoader worker process(es) were started by multiprocessing's forkserver",
                      " ".join(wm["advice"]))

    def test_own_container_and_the_jobs_cpu_limit(self):
        """The user's own container class (text_pipeline.py's Pipeline) named with the flag that would split it, in a
        job run under `--cpus 1`: the limit, its throttling, and the job's CPU within it."""
        n = 3000
        js = self.path("s.json")
        r = self.lotus(["-o", self.path("t.json"), "--summary-json", js, "--cpus", "1"], "text_pipeline.py", str(n))
        self.assertIn(f"{n} samples", r.stdout)
        with open(js) as f:
            s = json.load(f)
        self.assertEqual(s["ops"]["Pipeline"]["count"], n)
        (c,) = s["run"]["containers"]
        self.assertEqual((c["op"], c["callees"], c["flag"]),
                         ("Pipeline", ["Truncate", "MaskTokens", "ToTensor"], "--pipeline Pipeline"))
        self.assertIn("`--pipeline Pipeline` would show them as ops.", " ".join(r.stdout.split()))
        lim = s["run"]["limits"]
        self.assertEqual(lim["cpus"], 1, lim)
        self.assertGreater(lim["throttled_periods"], 0, lim)
        self.assertLessEqual(s["resources"]["job"]["cpu_avg_pct"], 105, s["resources"]["job"])
        self.assertRegex(r.stdout, r"CPU throttled in \d+ of \d+ periods")


if __name__ == "__main__":
    unittest.main()
