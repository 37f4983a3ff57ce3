"""Simulated device limits without containers (issue 19, item 2): --cpus, --memory, --cpuset and --device-read-bps
in launch mode put the job in a cgroup lotus-bpf makes (v1 here: /sys/fs/cgroup/{cpu,memory,cpuset,blkio}; v2 where
the controllers are on the unified hierarchy), report what the kernel counted (throttling, memory peak, OOM kills,
bytes on the limited disk) and remove it."""
import glob
import re
import json
import os
import subprocess
import time

from harness import (EXAMPLE, LOTUS, PY, SOURCE, BpfTestCase, children, dataset, run_lotus, start_lotus,
                     wait_for_attach)


def disk_of(path):
    """/dev/NAME of the whole disk holding path (its partition's parent in sysfs)."""
    st = os.stat(path)
    sys_dir = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if os.path.exists(os.path.join(sys_dir, "partition")):
        sys_dir = os.path.dirname(sys_dir)
    return "/dev/" + os.path.basename(sys_dir)


def leftovers():
    return glob.glob("/sys/fs/cgroup/**/lotus-bpf-*", recursive=True)


class Limits(BpfTestCase):
    def setUp(self):
        super().setUp()
        self.assertEqual(leftovers(), [], "cgroups of an earlier run are left")

    def tearDown(self):
        self.assertEqual(leftovers(), [], "lotus-bpf left a cgroup behind")
        super().tearDown()

    def run_limited(self, limit, images=512, epochs=2):
        js = self.path("s.json")
        r = run_lotus(["-q", "-o", self.path("t.json"), "--summary-json", js] + limit +
                      ["--", PY, EXAMPLE, dataset(images), "--epochs", str(epochs), "--workers", "2"])
        with open(js) as f:
            return r, json.load(f)

    def test_cpus_one_against_two(self):
        # An input-bound pipeline with 2 workers: one CPU's time gives about half the samples/s of two.
        r1, one = self.run_limited(["--cpus", "1"])
        self.assertEqual(r1.returncode, 0, r1.stderr)
        r2, two = self.run_limited(["--cpus", "2"])
        self.assertEqual(r2.returncode, 0, r2.stderr)
        ratio = two["throughput"]["samples_per_s"] / one["throughput"]["samples_per_s"]
        self.assertGreater(ratio, 1.4, ratio)
        self.assertLess(ratio, 2.8, ratio)
        lim = one["run"]["limits"]
        self.assertEqual((lim["cgroup"], lim["cpus"]), ("v1" if not os.path.exists("/sys/fs/cgroup/cgroup.controllers")
                                                        else "v2", 1))
        self.assertGreater(lim["throttled_periods"], 0)
        self.assertGreater(lim["throttled_s"], 0)
        # the job's average CPU never above the limit (+5 %)
        self.assertLessEqual(one["resources"]["job"]["cpu_avg_pct"], 105, one["resources"]["job"])
        self.assertIn("Limits (cgroup", r1.stdout)
        self.assertRegex(r1.stdout, r"CPU throttled in \d+ of \d+ periods")

    def test_memory_below_need_names_the_oom_kill(self):
        # The example's job peaks at ~340 MiB charged to its cgroup with torch's files already in the page cache
        # (charged elsewhere); a run under 300M once fitted: 200M is well below what it needs.
        r, s = self.run_limited(["--memory", "200M"])
        self.assertNotEqual(r.returncode, 0)  # the job failed, and so does the run
        lim = s["run"]["limits"]
        self.assertEqual(lim["memory_bytes"], 200 << 20)
        self.assertGreaterEqual(lim["oom_kills"], 1)
        self.assertGreaterEqual(lim["memory_peak_bytes"], (200 << 20) * 0.95)
        killed = [e for e in s["run"]["process_ends"] if e["signal"] == 9]
        self.assertGreaterEqual(len(killed), 1)
        self.assertRegex(r.stdout, r"(was killed by the kernel's OOM killer: the job's memory limit is 200 MiB"
                                   r"|The kernel's OOM killer killed \d+ process\(es\) in the job's cgroup \(memory limit "
                                   r"200 MiB)")
        self.assertIn(f"(PID {killed[0]['pid']})", r.stdout)

    def test_cpuset(self):
        r, s = self.run_limited(["--cpuset", "0"], images=64, epochs=1)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(s["run"]["cpus"], 1)  # the job's affinity, as the advice reads it
        self.assertEqual(s["run"]["limits"]["cpuset"], "0")

    def test_disk_read_bandwidth(self):
        """--device-read-bps on the disk under the temp dir: a job reading 24 MiB it evicted from the page cache
        (posix_fadvise DONTNEED: that file only) takes at least the size over the rate, timed in-process."""
        # a directory on a disk: the temp dir, unless it is a tmpfs
        where = next(d for d in (self.tmp, os.path.dirname(LOTUS)) if os.major(os.stat(d).st_dev))
        disk = disk_of(where)
        size, rate = 24 << 20, 8 << 20
        data = os.path.join(where, f"lotus-test-blob-{os.getpid()}")
        self.addCleanup(lambda: os.path.exists(data) and os.unlink(data))
        with open(data, "wb") as f:
            f.write(os.urandom(size))
            os.fsync(f.fileno())
        job = ("import os, time\n"
               f"fd = os.open({data!r}, os.O_RDONLY)\n"
               "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)\n"
               "t = time.monotonic(); n = 0\n"
               "while chunk := os.read(fd, 1 << 20): n += len(chunk)\n"
               "print('read', n, 'in', time.monotonic() - t)\n")
        js = self.path("s.json")
        r = run_lotus(["-q", "-o", self.path("t.json"), "--summary-json", js, "--device-read-bps", f"{disk}:8M", "--",
                       PY, "-c", job])
        self.assertEqual(r.returncode, 0, r.stderr)
        m = re.search(r"read (\d+) in ([\d.]+)", r.stdout)
        self.assertEqual(int(m.group(1)), size)
        self.assertGreater(float(m.group(2)), 0.8 * size / rate, r.stdout)  # the kernel's throttle allows a burst
        with open(js) as f:
            lim = json.load(f)["run"]["limits"]
        self.assertEqual(lim["device_read_bps"], [{"device": disk, "bytes_per_s": rate}])
        self.assertGreaterEqual(lim["io_read_bytes"], size)
        self.assertRegex(r.stdout, rf"reads from {re.escape(disk)} at most 8\.0 MiB/s")

    def test_usage_errors(self):
        for args, why in ((["--pid", str(os.getpid()), "--cpus", "1"], "need launch mode"),
                          (["--memory", "12Q", "--", PY, "-c", "pass"], "is not a size"),
                          (["--device-read-bps", "/dev/null:1M", "--", PY, "-c", "pass"], "not a block device"),
                          (["--device-write-bps", "nowhere", "--", PY, "-c", "pass"], "DEVICE:RATE"),
                          (["--cpus", "0", "--", PY, "-c", "pass"], "--cpus")):
            r = run_lotus(args)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn(why, r.stderr)

    def test_nothing_left_when_stopped_or_killed(self):
        import signal
        import subprocess
        import time
        from harness import LOTUS, kill_group
        # SIGTERM while the job runs: the job gets it too (launch mode), the cgroup goes.
        p = subprocess.Popen([LOTUS, "-q", "-o", self.path("t.json"), "--cpus", "1.5", "--memory", "2G", "--", PY,
                              EXAMPLE, dataset(128), "--epochs", "50"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while not leftovers():
            self.assertLess(time.time(), deadline)
            time.sleep(0.1)
        time.sleep(2)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
        self.assertEqual(leftovers(), [], err)
        self.assert_detached()
        # SIGKILL: no destructor runs; the next run removes the cgroup once its job is gone.
        job_log = self.path("job.log")
        with open(job_log, "w") as log:
            p = subprocess.Popen([LOTUS, "-q", "-o", self.path("t2.json"), "--cpus", "1", "--", PY, EXAMPLE,
                                  dataset(128), "--epochs", "50"], stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
        def started():
            with open(job_log) as f:
                return "train.py: pid" in f.read()
        while not started():
            self.assertLess(time.time(), deadline)
            time.sleep(0.1)
        p.kill()
        p.wait()
        stale = leftovers()
        self.assertEqual(len(stale), 1, stale)
        kill_group(p)  # the job, in the tracer's process group
        for _ in range(100):  # its processes leave the cgroup as they are reaped
            with open(stale[0] + "/cgroup.procs") as f:
                if not f.read().strip():
                    break
            time.sleep(0.05)
        r, _ = self.run_limited(["--cpus", "1"], images=64, epochs=1)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(leftovers(), [])

    def test_sweep_over_the_jobs_own_settings(self):
        out_dir, table, page = self.path("sweep"), self.path("sweep.json"), self.path("sweep.html")
        r = run_lotus(["sweep", "--param", "workers=1,2,bad", "--repeats", "2", "--output-dir", out_dir,
                       "--summary-json", table, "--html", page, "--", PY, EXAMPLE, dataset(128), "--workers",
                       "{workers}"], timeout=900)
        self.assertEqual(r.returncode, 0, r.stderr)  # (every run went through: one configuration's job failed)
        with open(table) as f:
            t = json.load(f)
        runs = {x["name"]: x for x in t["runs"]}
        self.assertEqual(list(runs), ["workers=1", "workers=2", "workers=bad"])
        for name, workers in (("workers=1", 1), ("workers=2", 2)):
            x = runs[name]
            self.assertEqual(x["params"], {"workers": str(workers)})
            self.assertEqual((x["runs"], x["failed_runs"], x["exit_status"]), (2, 0, 0))
            self.assertEqual(len(x["samples_per_s_runs"]), 2)
            self.assertAlmostEqual(x["samples_per_s"], sum(x["samples_per_s_runs"]) / 2, delta=0.001)
            self.assertLessEqual(x["samples_per_s_min"], x["samples_per_s"])
            for rep in (1, 2):  # each run traced the job with the workers asked for (ground truth: its summary)
                with open(os.path.join(out_dir, f"{name}.r{rep}.summary.json")) as f:
                    s = json.load(f)
                ids = {p["worker"] for p in s["processes"] if p["worker"] >= 0}
                self.assertEqual(ids, set(range(workers)), name)
                self.assertIn(s["throughput"]["samples_per_s"], [round(v, 3) for v in x["samples_per_s_runs"]] +
                              x["samples_per_s_runs"])
        bad = runs["workers=bad"]
        self.assertEqual((bad["runs"], bad["failed_runs"], bad["samples_per_s"]), (2, 2, None))
        self.assertIn("workers=bad: failed", r.stdout)
        best = max(("workers=1", "workers=2"), key=lambda n: runs[n]["samples_per_s"])
        self.assertEqual(t["best"], best)
        self.assertIn(f"best: {best} (", r.stdout)
        self.assertIn(t["cheapest_within_5pct"], ("workers=1", "workers=2"))
        self.assertRegex(r.stdout, r"\nworkers=1 +0 +[\d.]+ +[\d.]+-[\d.]+ ")
        with open(page) as f:
            html = f.read()
        for name in runs:
            self.assertIn(name, html)
        self.assertIn("best", html)

    def test_sweep_over_three_cpu_limits(self):
        out_dir, table = self.path("sweep"), self.path("sweep.json")
        r = run_lotus(["sweep", "--cpus", "0.5,1,2", "--output-dir", out_dir, "--summary-json", table, "--", PY,
                       EXAMPLE, dataset(256), "--workers", "2"])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(table) as f:
            runs = json.load(f)["runs"]
        self.assertEqual([x["cpus"] for x in runs], ["0.5", "1", "2"])
        for x in runs:
            self.assertEqual(x["exit_status"], 0)
            with open(x["summary"]) as f:  # each run's own outputs
                s = json.load(f)
            self.assertEqual(s["run"]["limits"]["cpus"], float(x["cpus"]))
            self.assertAlmostEqual(x["samples_per_s"], s["throughput"]["samples_per_s"], delta=0.001)
            self.assertEqual(x["verdict"], s["batches"]["input_bound_grade"] + " input-bound")  # the run's grade
            self.assertLessEqual(x["cpu_avg_pct"], 100 * float(x["cpus"]) * 1.05)
            self.assertTrue(os.path.exists(os.path.join(out_dir, f"cpus-{x['cpus']}.html")))
            # the part with the most time per sample, collation included, as the table and the advice name it
            parts = {k: v["total_ms"] for k, v in s["ops"].items() if k != "sample"}
            top = max(parts, key=parts.get)
            self.assertEqual(x["top_op"], top)
            said = {"collate": "Collation (", "loader": "Loading ("}.get(top, top + " ")
            advice = [a for t in s["training"] for a in t["advice"] if "takes the most time per sample" in a]
            self.assertEqual(len(advice), 1, s["training"])
            self.assertTrue(advice[0].startswith(said), advice)
        rates = [x["samples_per_s"] for x in runs]
        self.assertLess(rates[0], rates[1])
        self.assertLess(rates[1], rates[2])
        self.assertGreater(runs[0]["throttled_s"], 0)
        # one row per limit in the printed table
        for c in ("0.5", "1", "2"):
            self.assertRegex(r.stdout, rf"\ncpus-{re.escape(c)} +0 +[\d.]+ ")
        self.assertEqual(leftovers(), [])


def _own_v1_path(controller):
    with open("/proc/self/cgroup") as f:
        for line in f:
            num, ctrls, path = line.rstrip("\n").split(":", 2)
            if controller in ctrls.split(","):
                return path.rstrip("/")
    return None


def _cpu_stat(directory):
    with open(os.path.join(directory, "cpu.stat")) as f:
        stat = dict(line.split() for line in f)
    return {k: int(v) for k, v in stat.items()}


class JobOwnLimits(BpfTestCase):
    """Issue 80 item 6: a job in a cgroup of its own (not lotus-bpf's) limited to 1 CPU, attached by --pid, on a
    2-CPU machine: the summary reads the limit and the CPU throttling of its cgroup (per worker, while it lived, and
    for the job), the advice counts 1 CPU, and a replay of the record file says the same. Ground truth: the
    cgroup's files, written and read by the test itself."""

    def make_cgroup(self):
        name = f"lotus-test-{os.getpid()}"
        v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers")
        if v2:
            with open("/sys/fs/cgroup/cgroup.subtree_control") as f:
                if "cpu" not in f.read().split():
                    self.skipTest("cgroup v2 without the cpu controller enabled")
            d = os.path.join("/sys/fs/cgroup", name)
            os.mkdir(d)
            with open(os.path.join(d, "cpu.max"), "w") as f:
                f.write("100000 100000")
        else:
            own = _own_v1_path("cpu")
            if own is None:
                self.skipTest("no cgroup v1 cpu hierarchy")
            d = f"/sys/fs/cgroup/cpu{own}/{name}"
            os.mkdir(d)
            with open(os.path.join(d, "cpu.cfs_period_us"), "w") as f:
                f.write("100000")
            with open(os.path.join(d, "cpu.cfs_quota_us"), "w") as f:
                f.write("100000")
        self.addCleanup(os.rmdir, d)
        return d, ("/" + name if v2 else f"{_own_v1_path('cpu')}/{name}"), "v2" if v2 else "v1"

    def test_attached_job_in_a_one_cpu_cgroup(self):
        d, path, version = self.make_cgroup()
        hold = self.path("hold")
        job = subprocess.Popen(["sh", "-c", f"echo $$ > {d}/cgroup.procs && exec {PY} {EXAMPLE} {dataset(256)} "
                                            f"--epochs 2 --workers 2 --hold {hold}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addCleanup(job.stderr.close)
        self.addCleanup(lambda: job.poll() is None and job.kill())
        deadline = time.time() + 120
        while len(children(job.pid, every_thread=True)) < 2:  # its workers are prefetching: the interpreter is there to attach to
            self.assertIsNone(job.poll(), job.stderr.read() if job.poll() is not None else "")
            self.assertLess(time.time(), deadline)
            time.sleep(0.05)
        before = _cpu_stat(d)
        js, rec = self.path("s.json"), self.path("run.lbt")
        tracer = start_lotus(["-q", "-o", self.path("t.json"), "--summary-json", js, "--record", rec,
                              "--pid", str(job.pid)])
        wait_for_attach(tracer)
        open(hold, "w").close()
        self.assertEqual(job.wait(timeout=240), 0)
        out, err = tracer.communicate(timeout=120)
        self.assertEqual(tracer.returncode, 0, err)
        after = _cpu_stat(d)
        with open(js) as f:
            s = json.load(f)
        import jsonschema
        with open(os.path.join(SOURCE, "schemas", "summary.schema.json")) as f:
            jsonschema.validate(s, json.load(f))
        cg = s["run"]["cgroup"]
        self.assertEqual((cg["path"], cg["version"], cg["cgroups"]), (path, version, 1))
        self.assertEqual((cg["cpu_quota_us"], cg["cpu_period_us"], cg["cpu_quota_cpus"]), (100000, 100000, 1))
        self.assertTrue(cg["memory_limit_known"])
        self.assertEqual((s["run"]["job_cpus"], s["run"]["job_cpus_from"]), (1, "its cgroup's CPU quota"))
        # the throttling it read is the cgroup's within the traced time: never more than the test's own readings
        # around it; two workers and a loop on 1 CPU are throttled
        throttled_key = "throttled_usec" if version == "v2" else "throttled_time"
        scale = 1e6 if version == "v2" else 1e9
        self.assertGreater(cg["throttled_periods"], 0)
        self.assertLessEqual(cg["throttled_periods"], after["nr_throttled"] - before["nr_throttled"])
        self.assertLessEqual(cg["periods"], after["nr_periods"] - before["nr_periods"])
        self.assertLessEqual(cg["throttled_s"], (after[throttled_key] - before[throttled_key]) / scale + 0.001)
        job_row = s["resources"]["job"]
        self.assertEqual((job_row["throttled_periods"], job_row["throttled_s"]), (cg["throttled_periods"], cg["throttled_s"]))
        workers = [r for r in s["resources"]["roles"] if r["role"].startswith("worker")]
        self.assertTrue(workers, s["resources"]["roles"])
        for w in workers:  # each worker's: its cgroup's while it lived, within the job's
            self.assertIsNotNone(w["throttled_periods"], w)
            self.assertLessEqual(w["throttled_periods"], 2 * cg["throttled_periods"])  # (two epochs' processes)
        self.assertTrue(any(w["throttled_periods"] > 0 for w in workers), workers)
        # the advice counts the 1 CPU
        text = " ".join(out.split())  # (the summary wraps its lines)
        self.assertIn("The advice counts the 1 CPU(s) the job may use (its cgroup's CPU quota).", text)
        self.assertIn(f"The job's cgroup (cgroup {version}, {path}): CPU quota 1 CPU(s) (100000 us per 100000 us "
                      "period)", text)
        self.assertRegex(text, r"CPU throttled \(its cgroup's cpu\.stat")
        for t in s["training"]:
            for a in t["advice"]:
                if "CPU(s)" in a:
                    self.assertRegex(a, r"\b1 CPU\(s\)", a)
            if t.get("estimate"):
                self.assertEqual(t["estimate"]["cpus"], 1)
        # a replay of the record gives the same answer
        js2 = self.path("replayed.json")
        r = run_lotus(["-q", "-o", self.path("t2.json"), "--summary-json", js2, "--replay", rec])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(js2) as f:
            s2 = json.load(f)
        self.assertEqual(s2["run"]["cgroup"], cg)
        self.assertEqual(s2["run"]["job_cpus"], 1)
        self.assertEqual(s2["resources"]["job"]["throttled_periods"], job_row["throttled_periods"])
        self.assertEqual([w["throttled_periods"] for w in s2["resources"]["roles"] if w["role"].startswith("worker")],
                         [w["throttled_periods"] for w in workers])
        self.assertIn("The advice counts the 1 CPU(s)", " ".join(r.stdout.split()))
