"""The fault matrix: full disks, links, FIFOs, killed tracers and workers, bad numbers, missing permissions.
Each output is complete or untouched, fails alone with its reason, and nothing is left attached."""
import json
import re
import os
import signal
import subprocess
import threading
import time
import unittest

from harness import (CAPS_REFUSED, CAPS_SUFFICE, EXAMPLE, LOTUS, PY, WORKLOAD, BpfTestCase, dataset, kill_group,
                     load_trace, probes_capabilities, pyenv_python, run_lotus, spans, start_lotus, wait_for_attach)

PREVIOUS = "previous contents, never to be lost\n"
OUTPUT_FAILED = 74  # EX_IOERR: the run went through, an output could not be written


def short_job(epochs=1):
    return ["--", PY, WORKLOAD, dataset(64), "--workers", "2", "--epochs", str(epochs)]


def err_lines(r):
    return [l for l in r.stderr.splitlines() if l.strip() and "tracing PID" not in l]


class Faults(BpfTestCase):
    def setUp(self):
        super().setUp()
        self.full = None

    def tearDown(self):
        if self.full:
            subprocess.run(["umount", "-l", self.full], check=False)
        super().tearDown()

    def previous(self, name, directory=None):
        path = os.path.join(directory or self.tmp, name)
        with open(path, "w") as f:
            f.write(PREVIOUS)
        return path

    def assert_untouched(self, path):
        with open(path) as f:
            self.assertEqual(f.read(), PREVIOUS, f"{path} was changed")

    def assert_no_strays(self, directory):
        """Nothing half-written beside the outputs (the temporaries are unnamed until complete)."""
        self.assertEqual([n for n in os.listdir(directory) if n.startswith(".")], [])

    def small_disk(self, kib):
        self.full = self.path("full")
        os.mkdir(self.full)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", self.full], check=True)
        return self.full

    def assert_one_line(self, r, *needles, code=None):
        lines = err_lines(r)
        self.assertEqual(len(lines), 1, f"expected one line on stderr, got {r.stderr!r}")
        for n in needles:
            self.assertIn(n, lines[0])
        if code is not None:
            self.assertEqual(r.returncode, code, r.stderr)
        return lines[0]

    # --- full disks -------------------------------------------------------------------------------------------

    def test_record_on_a_full_disk_costs_nothing_else(self):
        disk = self.small_disk(16)  # the record of this job takes ~50 KB
        old = self.previous("run.lbt", disk)
        out, js = self.path("trace.json"), self.path("summary.json")
        # The reserve off (--disk-reserve 0): a disk filled by a write, as by another process, fails that output.
        r = run_lotus(["-q", "-o", out, "--summary-json", js, "--record", old, "--disk-reserve", "0"] + short_job())
        line = self.assert_one_line(r, "--record", old, "No space left on device", code=OUTPUT_FAILED)
        self.assertNotIn("\n", line)
        self.assert_untouched(old)
        self.assert_no_strays(disk)
        trace = load_trace(out)  # complete and valid
        self.assertEqual(trace["otherData"]["samples"], 64)
        self.assertEqual(len(spans(trace, "sample")), 64)
        self.assertIn("RandomResizedCrop", r.stdout)  # the summary was printed
        self.assertIn("Not written: --record", r.stdout)
        with open(js) as f:
            summary = json.load(f)
        self.assertEqual(len(summary["run"]["output_failures"]), 1)
        self.assertEqual(summary["run"]["samples"], 64)
        self.assert_detached()

    def test_trace_on_a_full_disk_keeps_the_summary(self):
        disk = self.small_disk(64)
        old = self.previous("trace.json", disk)
        js = self.path("summary.json")
        r = run_lotus(["-q", "-o", old, "--summary-json", js, "--disk-reserve", "0"] + short_job())
        self.assert_one_line(r, "-o", old, "No space left on device", code=OUTPUT_FAILED)
        self.assert_untouched(old)
        self.assert_no_strays(disk)
        self.assertIn("RandomResizedCrop", r.stdout)
        self.assertIn("trace: not written", r.stdout)
        with open(js) as f:
            self.assertEqual(json.load(f)["run"]["samples"], 64)
        self.assert_detached()

    def test_outputs_stop_at_the_disk_reserve_completed(self):
        # Issue 59: on a 6 MB tmpfs, the trace and the record file of 6 epochs with --native-map --counters default
        # would fill it (512 images: about twice the room; with 256 the two came to just about the room, and only
        # the record file was cut in one run). Free space stays above the 5 % reserve, the job completes, the summary prints, the
        # trace is valid JSON that says it was cut, and the record file replays.
        disk = self.small_disk(6 * 1024)
        out, rec, js = os.path.join(disk, "trace.json"), os.path.join(disk, "run.lbt"), self.path("summary.json")
        lowest, stop = [1.0], threading.Event()

        def sample():
            while not stop.is_set():
                v = os.statvfs(disk)
                lowest[0] = min(lowest[0], v.f_bavail / v.f_blocks)
                time.sleep(0.02)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            r = run_lotus(["-o", out, "--record", rec, "--summary-json", js, "--native-map", "--counters", "default",
                           "--", PY, EXAMPLE, dataset(512), "--epochs", "6", "--workers", "2"], timeout=600)
        finally:
            stop.set()
            sampler.join()
        self.assertEqual(r.returncode, 0, r.stderr)  # the job completed; a cut is not a failure
        v = os.statvfs(disk)  # after the commits, the last writes
        lowest[0] = min(lowest[0], v.f_bavail / v.f_blocks)
        self.assertGreaterEqual(lowest[0], 0.05, f"free space fell to {lowest[0]:.1%}")
        self.assertIn("RandomResizedCrop", r.stdout)  # the summary printed
        self.assertIn("would fall below 5 %", r.stdout)
        self.assertIn(f"trace: {out} (cut at", r.stdout)
        trace = load_trace(out)  # valid JSON
        cuts = {c["output"]: c for c in trace["otherData"]["outputs_cut"]}
        self.assertIn("-o", cuts, trace["otherData"]["outputs_cut"])
        self.assertEqual(cuts["-o"]["path"], out)
        self.assertIn(f"free space on {os.path.realpath(disk)} would fall below 5 %", cuts["-o"]["why"])
        self.assertGreater(cuts["-o"]["at_s"], 0)
        self.assertGreater(len(spans(trace, "op")), 0)  # it kept the spans until then
        with open(js) as f:
            summary = json.load(f)
        self.assertEqual(summary["run"]["samples"], 6 * 512)  # the summary has everything
        self.assertIn("-o", {c["output"] for c in summary["run"]["outputs_cut"]})
        self.assertEqual(summary["run"]["output_failures"], [])
        self.assert_no_strays(disk)
        # The record file replays (cut or not: it shares the disk with the trace).
        replayed = self.path("replayed.json")
        r = run_lotus(["export", rec, "-o", replayed])
        self.assertEqual(r.returncode, 0, r.stderr)
        replay = load_trace(replayed)  # valid: its records until the cut (none where the trace took the room first)
        if "--record" in cuts or "--record" in {c["output"] for c in summary["run"]["outputs_cut"]}:
            # the replay says that its figures cover only the part before the cut
            self.assertIn("no end record", replay["otherData"]["stop_reason"])
        self.assert_detached()

    def test_a_disk_already_below_the_reserve_is_said_at_the_start(self):
        disk = self.small_disk(1024)
        with open(os.path.join(disk, "ballast"), "wb") as f:  # another program's: 98 % of it taken
            v = os.statvfs(disk)
            f.write(b"x" * (v.f_bavail * v.f_frsize - v.f_blocks * v.f_frsize // 50))
        out, js = os.path.join(disk, "trace.json"), self.path("summary.json")
        r = run_lotus(["-o", out, "--summary-json", js] + short_job())
        self.assertEqual(r.returncode, 0, r.stderr)
        warnings = [l for l in err_lines(r) if "already below" in l]
        self.assertEqual(len(warnings), 1, r.stderr)
        self.assertIn(f"-o {out}: free space on {os.path.realpath(disk)} is already below the 5 % reserve", warnings[0])
        # said before tracing began, and the run went on: the summary printed, the trace cut and valid
        self.assertLess(r.stderr.index("already below"), r.stderr.index("tracing PID"))
        self.assertIn("RandomResizedCrop", r.stdout)
        trace = load_trace(out)
        self.assertIn("-o", {c["output"] for c in trace["otherData"]["outputs_cut"]})
        self.assert_no_strays(disk)

    def test_a_sweep_passes_the_reserve_to_each_run(self):
        # 90 % of a 4 MB tmpfs kept free: each run's trace (about 1 MB for an epoch here) is cut there
        # (no --summary-json: this machine's / has less than 90 % free, and the table would be refused there)
        disk = self.small_disk(4 * 1024)
        out = os.path.join(disk, "sweep")  # (a sweep writes into a directory it makes)
        r = run_lotus(["sweep", "--cpus", "2", "--disk-reserve", "90", "--output-dir", out, "--", PY, EXAMPLE,
                       dataset(256), "--workers", "2"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\ncpus-2 +0 +[\d.]+ ")  # the run's row: exit status 0
        trace = load_trace(os.path.join(out, "cpus-2.json"))
        cuts = {c["output"]: c for c in trace["otherData"]["outputs_cut"]}
        self.assertIn("would fall below 90 %", cuts["-o"]["why"])
        v = os.statvfs(disk)
        self.assertGreaterEqual(v.f_bavail / v.f_blocks, 0.89)
        self.assert_no_strays(disk)
        self.assertEqual([n for n in os.listdir(out) if n.startswith(".")], [".lotus-sweep"])  # its mark alone

    def test_calls_too_deep_are_counted_and_said(self):
        # --span nest makes every call of nest a seen call: past 64 nested, BPF records none (no return probe
        # that deep) and counts each in otherData.bpf_failures; recorded and counted add up to the job's own count
        py = pyenv_python("3.10")
        self.assertIsNotNone(py, "pyenv's CPython 3.10 is missing")
        out = self.path("t.json")
        r = run_lotus(["--span", "nest", "-o", out, "--", py, os.path.join(os.path.dirname(WORKLOAD), "deep_calls.py"),
                       "20"])
        self.assertEqual(r.returncode, 0, r.stderr)
        calls = int(re.search(r"deep_calls: (\d+) calls of nest", r.stdout).group(1))
        self.assertEqual(calls, 20 * 101)
        trace = load_trace(out)
        failures = trace["otherData"]["bpf_failures"]
        # (the message carries what would tell a loss from a miss: one CI run saw 423 + 152 of 2020, not yet explained)
        self.assertEqual(len(spans(trace, name="nest")) + failures["depth_over_64"], calls,
                         (failures, trace["otherData"].get("lost_events"), r.stdout[-2000:], r.stderr[-2000:]))
        self.assertGreater(failures["depth_over_64"], 0)
        self.assertEqual({k: v for k, v in failures.items() if k != "depth_over_64"},
                         {k: 0 for k in failures if k != "depth_over_64"})
        self.assertIn(f"BPF: {failures['depth_over_64']} call(s) nested deeper than 64 seen calls", r.stdout)

    def test_code_objects_at_reused_addresses_go_by_their_own_names(self):
        # Each round frees a function's code object and makes nest's at its address (CPython 3.10's allocator
        # hands the block straight back): every call of nest is seen as nest, against the job's own count. Two CI
        # runs saw 109 and 575 of deep_calls.py's 2,020 calls: a role set onto the next object at an address, and
        # a per-CPU copy of a role, made calls go out unseen or under the description of another object.
        py = pyenv_python("3.10")
        self.assertIsNotNone(py, "pyenv's CPython 3.10 is missing")
        out = self.path("t.json")
        r = run_lotus(["--span", "nest", "-o", out, "--", py, os.path.join(os.path.dirname(WORKLOAD),
                                                                             "reused_code.py"), "2000", "5"])
        self.assertEqual(r.returncode, 0, r.stderr)
        m = re.search(r"reused_code: (\d+) calls of nest, (\d+) rounds reused the address", r.stdout)
        calls, reused = int(m.group(1)), int(m.group(2))
        self.assertEqual(calls, 2000 * 6)
        self.assertGreater(reused, 1000, "the workload no longer reuses addresses: the test proves nothing")
        trace = load_trace(out)
        self.assertEqual(trace["otherData"].get("lost_events", 0), 0)
        self.assertEqual(len(spans(trace, name="nest")), calls)
        self.assertEqual(spans(trace, name="other"), [])

    # --- links and special files ------------------------------------------------------------------------------

    def test_a_link_at_any_output_path_is_not_followed(self):
        victim = self.previous("victim")
        for flag in ("-o", "--summary-json", "--record"):
            link = self.path(f"link{flag}")
            os.symlink(victim, link)
            r = run_lotus(["-q", flag, link] + short_job(), timeout=60)
            self.assert_one_line(r, "symbolic link", link, code=1)
            self.assertTrue(os.path.islink(link))
            self.assert_untouched(victim)
        dangling = self.path("dangling.json")
        os.symlink(self.path("nowhere.json"), dangling)
        r = run_lotus(["-q", "-o", dangling] + short_job(), timeout=60)
        self.assert_one_line(r, "symbolic link", code=1)
        self.assertFalse(os.path.exists(self.path("nowhere.json")))
        self.assertTrue(os.path.islink(dangling))
        self.assert_detached()

    def test_fifo_and_directory_outputs_are_refused_at_once(self):
        fifo = self.path("fifo")
        os.mkfifo(fifo)
        for flag in ("-o", "--summary-json", "--record"):
            t0 = time.time()
            r = run_lotus(["-q", flag, fifo] + short_job(), timeout=20)
            self.assert_one_line(r, "a FIFO", code=1)
            self.assertLess(time.time() - t0, 10)
        r = run_lotus(["-q", "-o", self.tmp] + short_job(), timeout=20)
        self.assert_one_line(r, "a directory", code=1)
        self.assert_detached()

    # --- killed tracer, failed attach, failed export ----------------------------------------------------------

    def test_tracer_killed_leaves_the_previous_files(self):
        job = self.long_job()
        out, js, rec = self.previous("trace.json"), self.previous("summary.json"), self.previous("run.lbt")
        tracer = start_lotus(["-q", "-o", out, "--summary-json", js, "--record", rec, "--pid", str(job.pid)])
        wait_for_attach(tracer)
        time.sleep(2)
        tracer.kill()
        tracer.communicate(timeout=30)
        for p in (out, js, rec):
            self.assert_untouched(p)
        self.assert_no_strays(self.tmp)
        self.assert_detached()
        self.assertIsNone(job.poll(), "the target must keep running")

    def test_target_exiting_during_attach_is_named(self):
        """The target is killed as soon as the tracer holds its first BPF link: often before its Python probes are
        attached. Every attempt ends in either that clear line with the old file kept, or a complete trace."""
        hits = 0
        for attempt in range(16):
            out = self.previous("trace.json")
            target = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
            time.sleep(0.3)
            tracer = start_lotus(["-q", "-o", out, "--pid", str(target.pid)])
            deadline = time.time() + 30
            while tracer.poll() is None and time.time() < deadline:
                try:
                    fds = [os.readlink(f"/proc/{tracer.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{tracer.pid}/fd")]
                except OSError:
                    fds = []
                # its first BPF object (the programs loading): the attach, from there to the last probe, is
                # the window the kill must fall in. Kernel objects only: a path naming "bpf" (the dynamic loader
                # opening libbpf.so.1 as the tracer starts) is no BPF object, and a kill then came before the
                # tracer had looked at its target ("no such process").
                if any(f.startswith("anon_inode:bpf") or f == "anon_inode:[perf_event]" for f in fds):
                    break
                time.sleep(0.001)
            target.kill()
            target.wait()
            stdout, stderr = tracer.communicate(timeout=60)
            lines = [l for l in stderr.splitlines() if l.strip()]
            if tracer.returncode == 1:
                self.assertEqual(len(lines), 1, stderr)
                self.assertIn(f"PID {target.pid} exited while lotus-bpf was attaching", lines[0])
                self.assert_untouched(out)
                hits += 1
            else:
                self.assertEqual(tracer.returncode, 0, stderr)
                self.assertEqual(load_trace(out)["otherData"]["stop_reason"], "target exited")
            self.assert_no_strays(self.tmp)
            self.assert_detached()
            if hits >= 2:
                break
        self.assertGreater(hits, 0, "the target never exited during attach in 16 attempts")

    def test_failed_export_keeps_the_previous_trace(self):
        rec = self.path("run.lbt")
        r = run_lotus(["record", "-q", "-o", rec] + short_job())
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(rec, "rb") as f:
            data = bytearray(f.read())
        cut = self.path("cut.lbt")
        with open(cut, "wb") as f:
            f.write(data[: len(data) * 2 // 3])
        out = self.previous("trace.json")
        r = run_lotus(["export", cut, "-o", out])
        self.assert_one_line(r, "truncated", code=1)
        self.assert_untouched(out)
        # a damaged header or metadata: one line, not silence
        for at in (20, 40):
            bad = bytearray(data)
            bad[at] ^= 0x20
            with open(cut, "wb") as f:
                f.write(bad)
            r = run_lotus(["report", cut])
            self.assert_one_line(r, "damaged", code=1)
        self.assert_no_strays(self.tmp)

    # --- bad input --------------------------------------------------------------------------------------------

    def test_usage_errors_exit_2(self):
        for args in (["--duration", "nan", "--pid", "1"], ["--duration", "inf", "--pid", "1"], ["--pid", "-5"],
                     ["--pid", "0"], ["--counters", "bogus", "--pid", "1"], ["-o", "", "--pid", "1"],
                     ["--summary-json", "", "--pid", "1"], ["--record", "", "--pid", "1"],
                     ["--span", "", "--pid", "1"], ["--pipeline", "", "--pid", "1"], ["--native", "nolib", "--pid", "1"],
                     ["--window", "nan:", "--pid", "1"], ["export", ""], ["record", "-o", "", "--pid", "1"]):
            r = run_lotus(args, timeout=20)
            self.assert_one_line(r, "lotus-bpf: ", code=2)
        self.assert_detached()

    def test_unmatched_native_spec_is_said(self):
        out = self.path("t.json")
        r = run_lotus(["-q", "-o", out, "--native", "nolib*:nosym*", "--", PY, "-c", "pass"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_one_line(r, "--native 'nolib*:nosym*' matched no function")
        self.assertEqual(load_trace(out)["otherData"]["native_specs_unmatched"], ["nolib*:nosym*"])
        self.assert_detached()

    def test_permission_problem_is_named(self):
        target = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])  # root's
        self.addCleanup(lambda: (target.kill(), target.wait()))
        time.sleep(0.3)
        caps = "+bpf,+perfmon"
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", f"--inh-caps={caps}",
                            f"--ambient-caps={caps}", LOTUS, "-q", "--pid", str(target.pid), "-o", "/tmp/never.json"],
                           capture_output=True, text=True, timeout=60)
        self.assert_one_line(r, "permission denied", "CAP_SYS_PTRACE", f"uid 0", code=1)
        self.assertFalse(os.path.exists("/tmp/never.json"))
        self.assert_detached()

    def test_the_capabilities_the_readme_names_are_enough(self):
        """Without root: CAP_BPF + CAP_PERFMON trace a process of one's own user, and CAP_SYS_PTRACE added another
        user's (root's, with the interpreter in /usr/bin)."""
        out_dir = self.path("nobody")
        os.chmod(self.tmp, 0o711)
        os.mkdir(out_dir)
        os.chown(out_dir, 65534, 65534)
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        own = subprocess.Popen(nobody + [PY, "-c", "import time; time.sleep(60)"])
        root_owned = subprocess.Popen([PY, "-c", "import time; time.sleep(60)"])
        for p in (own, root_owned):
            self.addCleanup(lambda p=p: (p.kill(), p.wait()))
        time.sleep(0.3)
        for target, caps in ((own, "+bpf,+perfmon"), (root_owned, "+bpf,+perfmon,+sys_ptrace")):
            out = os.path.join(out_dir, f"{target.pid}.json")
            r = subprocess.run(nobody + [f"--inh-caps={caps}", f"--ambient-caps={caps}", LOTUS, "-q", "-d", "1",
                                         "--pid", str(target.pid), "-o", out], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(r.returncode, 0, f"{caps}: {r.stderr}")
            self.assertEqual(os.stat(out).st_uid, 65534)
            self.assertEqual(load_trace(out)["otherData"]["stop_reason"], "1 s elapsed")
        self.assert_detached()

    def test_probes_says_what_a_run_with_fewer_capabilities_does(self):
        """`lotus-bpf probes` as nobody with CAP_BPF + CAP_PERFMON: on this kernel they suffice, and a run traces;
        with uprobe_multi hidden (LOTUS_NO_UPROBE_MULTI: the perf-event uprobes of kernels before 6.6) it names
        the missing CAP_SYS_ADMIN in the very words a run is then refused with, before anything is launched."""
        caps = "+bpf,+perfmon"
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", f"--inh-caps={caps}",
                  f"--ambient-caps={caps}"]

        def capabilities(env, prefix=nobody):
            r = subprocess.run(prefix + [LOTUS, "probes"], capture_output=True, text=True, timeout=60,
                               env={**os.environ, **env})
            self.assertEqual(r.returncode, 0, r.stderr)
            said = probes_capabilities(r.stdout)
            self.assertIsNotNone(said, r.stdout)
            return said

        self.assertEqual(capabilities({}), (None, CAPS_SUFFICE))
        reason, verdict = capabilities({"LOTUS_NO_UPROBE_MULTI": "1"})
        self.assertEqual(verdict, CAPS_REFUSED)
        self.assertIn("no uprobe_multi links", reason)
        marker = self.path("launched")
        r = subprocess.run(nobody + [LOTUS, "-q", "-o", "/tmp/never.json", "--", PY, "-c",
                                     f"open({marker!r}, 'w')"],
                           capture_output=True, text=True, timeout=60, env={**os.environ, "LOTUS_NO_UPROBE_MULTI": "1"})
        self.assert_one_line(r, reason, code=1)
        self.assertFalse(os.path.exists(marker), "the job was launched before the refusal")
        self.assertFalse(os.path.exists("/tmp/never.json"))
        # As root the same kernel needs nothing more: probes says it has what a run needs.
        self.assertEqual(capabilities({"LOTUS_NO_UPROBE_MULTI": "1"}, prefix=[]), (reason, "has CAP_SYS_ADMIN"))
        self.assert_detached()

    # --- the job's fate ---------------------------------------------------------------------------------------

    def test_killed_worker_and_failed_job_are_in_trace_and_summary(self):
        out, js = self.path("trace.json"), self.path("summary.json")
        tracer = start_lotus(["-q", "-o", out, "--summary-json", js, "--", PY, WORKLOAD, dataset(64), "--workers", "2",
                              "--epochs", "1000", "--persistent"])
        wait_for_attach(tracer)
        main_pid = None
        deadline = time.time() + 60
        workers = []
        while time.time() < deadline and len(workers) < 2:  # the job's workers: children of its main process
            out_ps = subprocess.run(["ps", "-o", "pid=,ppid=,args=", "--ppid", str(tracer.pid)], capture_output=True,
                                    text=True).stdout.split("\n")
            mains = [int(l.split()[0]) for l in out_ps if "pipeline_job.py" in l]
            if mains:
                main_pid = mains[0]
                workers = [int(p) for p in subprocess.run(["pgrep", "-P", str(main_pid)], capture_output=True,
                                                          text=True).stdout.split()]
            time.sleep(0.2)
        self.assertEqual(len(workers), 2, "the job's two workers did not start")
        time.sleep(2)
        victim = max(workers)
        os.kill(victim, signal.SIGKILL)
        stdout, stderr = tracer.communicate(timeout=120)
        self.assertNotEqual(tracer.returncode, 0)  # the job fails: DataLoader worker exited unexpectedly
        trace = load_trace(out)
        ends = {e["pid"]: e for e in trace["traceEvents"] if e.get("cat") == "process"}
        self.assertEqual(ends[victim]["name"], "killed by SIGKILL")
        self.assertEqual(ends[victim]["args"]["signal"], 9)
        self.assertEqual(ends[main_pid]["name"], f"exited with status {tracer.returncode}")
        self.assertIn(f"(PID {victim}) killed by SIGKILL at", stdout)
        self.assertIn(f"(PID {main_pid}) exited with status {tracer.returncode} at", stdout)
        with open(js) as f:
            run = json.load(f)["run"]
        self.assertEqual({e["pid"]: e["signal"] for e in run["process_ends"]}, {victim: 9, main_pid: 0})
        self.assert_detached()

    def test_outputs_belong_to_the_sudo_user(self):
        env = dict(os.environ, SUDO_UID="4321", SUDO_GID="8765")
        out, js, rec = self.path("t.json"), self.path("s.json"), self.path("r.lbt")
        r = run_lotus(["-q", "-o", out, "--summary-json", js, "--record", rec, "--", PY, "-c", "pass"], env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        for p in (out, js, rec):
            st = os.stat(p)
            self.assertEqual((st.st_uid, st.st_gid), (4321, 8765), p)
        self.assert_detached()


if __name__ == "__main__":
    unittest.main()
