"""Native attribution and counters (issue 4), on the real ImageFolder pipeline in DataLoader workers:
--native-map (perf-event sampling + probes on libjpeg, Pillow's _imaging and libtorch_cpu functions) and
--counters (this machine has no PMU: the default set falls back to each thread's own counts; software perf events
asked for by name go through the per-CPU event path)."""
import collections
import json
import math
import os
import re
import shutil
import subprocess
import time
import sys
import unittest

import jsonschema

from harness import (BpfTestCase, OPS, PY, SOURCE, WORKLOAD, dataset, kernel_at_least, load_trace, read_lines,
                     process_state, run_lotus, spans, start_lotus, wait_for_attach, wait_for_file)


PILLOW = [a for spec in ("libjpeg*:jpeg_read_header", "_imaging*:ImagingResample", "_imaging*:ImagingFlipLeftRight")
          for a in ("--native", spec)]


class NativeMapTest(BpfTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.images = 256
        cls.data = dataset(cls.images)

    def run_job(self, *extra, env=None):
        out, summ = self.path("trace.json"), self.path("summary.json")
        r = run_lotus(["-q", "-o", out, "--summary-json", summ, *extra, "--", PY, WORKLOAD, self.data,
                       "--workers", "2"], env={**os.environ, **(env or {})})
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(summ) as f:
            summary = json.load(f)
        trace = load_trace(out)
        for doc, schema in ((summary, "summary"), (trace, "chrome-trace")):
            with open(os.path.join(SOURCE, "schemas", f"{schema}.schema.json")) as f:
                jsonschema.validate(doc, json.load(f))
        return r, summary, trace

    def test_native_map_and_counters(self):
        rec = self.path("run.lbt")
        # Pillow's functions and libjpeg's API are named by sampling and not in the built-in set: asked for here
        r, summary, trace = self.run_job("--native-map", "--sample-freq", "4999", "--counters", "default",
                                         "--record", rec, *PILLOW)
        names = summary["counters"]["names"]
        if "cycles" not in names:  # no PMU here: said once, the threads' own counts instead (no perf event)
            self.assertEqual(r.stderr.count("no PMU"), 1, r.stderr)
            self.assertEqual(names, ["task-clock", "faults", "context-switches"])
            for op in spans(trace, "op"):  # each the same per-thread count as the span's own fields
                a = op["args"]
                self.assertAlmostEqual(a["task-clock"] / 1e6, a["cpu_ms"], delta=6e-5, msg=op)
                self.assertEqual(a["faults"], a["minor_faults"] + a["major_faults"], op)
                self.assertEqual(a["context-switches"], a["voluntary_cs"] + a["involuntary_cs"], op)

        # Native spans: each probed call nested in the op that made it, exact counts.
        ops = collections.defaultdict(list)
        for op in spans(trace, "op"):
            ops[op["tid"]].append(op)
        def inside(n, op_name):
            return any(o["name"] == op_name and o["ts"] - 1e-3 <= n["ts"] and
                       n["ts"] + n["dur"] <= o["ts"] + o["dur"] + 1e-3 for o in ops[n["tid"]])
        native = spans(trace, "native")
        count = collections.Counter(n["name"] for n in native)
        self.assertEqual(count["jpeg_read_header"], self.images)  # one decode per image
        other = trace["otherData"]
        if kernel_at_least(6, 6):
            # Linux 6.6+: a library's functions share one link, their entries' and return instructions' points
            # (its detach waits once per link, not once per function)
            links, fns = other["native_probe_links"], other["native_functions_probed"]
            self.assertTrue(1 <= links < fns, (links, fns))
        # Pillow's _imaging is first loaded by the workers, after launch: probed when its open is seen, so
        # the first few ms of calls can be missed; from then on one resize per RandomResizedCrop, exactly.
        resample = [n for n in native if n["name"] == "ImagingResample"]
        for tid in {n["tid"] for n in resample}:
            mine = sorted(n["ts"] for n in resample if n["tid"] == tid)
            later = [o for o in spans(trace, "op", "RandomResizedCrop") if o["tid"] == tid and o["ts"] > mine[0]]
            self.assertEqual(len(mine) - 1, len(later), tid)
        self.assertGreaterEqual(len(resample), 0.9 * self.images)
        flips = [n for n in native if n["name"] == "ImagingFlipLeftRight"]
        self.assertTrue(0 < len(flips) < self.images)  # p = 0.5
        for n in flips:
            self.assertTrue(inside(n, "RandomHorizontalFlip"), n)
        for n in native:
            if n["name"] == "ImagingResample":
                self.assertTrue(inside(n, "RandomResizedCrop"), n)
            if n["name"] == "at::_ops::sub__Tensor::call":
                self.assertTrue(inside(n, "Normalize"), n)
        self.assertTrue(all(n["args"]["library"] for n in native))

        # Sampling map: the functions each op ran, named.
        nmap = {m["op"]: m for m in summary["native_map"]}
        def top(op, k=6):
            return [(f["function"], f["library"]) for f in nmap[op]["functions"][:k]]
        def named_share(op):
            return nmap[op]["named"] / nmap[op]["samples"]
        self.assertTrue(any(f.startswith(("ImagingJpegDecode", "jpeg_", "decode_mcu", "jsimd_")) for f, _ in top("loader")),
                        top("loader"))
        self.assertTrue(any(f.startswith("ImagingResample") for f, _ in top("RandomResizedCrop")), top("RandomResizedCrop"))
        self.assertTrue(any(f.startswith(("ImagingFlip", "ImagingTranspose")) for f, _ in top("RandomHorizontalFlip", 10)),
                        top("RandomHorizontalFlip", 10))
        for op in ("ToTensor", "Normalize"):
            self.assertTrue(any(lib.startswith("libtorch_cpu") for _, lib in top(op, 3)), top(op))
        for op in ("RandomResizedCrop", "ToTensor", "Normalize"):
            self.assertGreaterEqual(nmap[op]["samples"], 50, op)
            self.assertGreaterEqual(named_share(op), 0.8, (op, top(op)))
        # The loader runs Pillow's Python code in Debian's stripped python3.11: its static functions have no
        # symbol (docs/native-map.md); still most of it is named.
        self.assertGreaterEqual(named_share("loader"), 0.6, top("loader"))

        # Counters: per op, in each op span's args and on the counter track.
        self.check_counters(summary, trace, names)
        self.assertIn("native_map", trace["otherData"])

        # The record file keeps the names (symbol records) and counter names: a replay agrees exactly.
        rsum = self.path("replayed.json")
        rr = run_lotus(["-q", "--replay", rec, "-o", self.path("replayed-trace.json"), "--summary-json", rsum])
        self.assertEqual(rr.returncode, 0, rr.stderr)
        with open(rsum) as f:
            replayed = json.load(f)
        self.assertEqual(replayed["native_map"], summary["native_map"])
        self.assertEqual(replayed["counters"], summary["counters"])

    def test_user_native_spec(self):
        # --native adds functions; a C library the pipeline calls through Pillow: zlib is not used by JPEG,
        # libjpeg's per-row jpeg_read_scanlines is (too hot for the default set). Probed as kernels before 6.6
        # do it (a perf-event uprobe and uretprobe per function: LOTUS_NO_UPROBE_MULTI), the same counts.
        r, summary, trace = self.run_job("--native", "libjpeg*:jpeg_read_scanlines", "--native",
                                         "libjpeg*:jpeg_*_decompress", "--sample-freq", "0",
                                         env={"LOTUS_NO_UPROBE_MULTI": "1"})
        count = collections.Counter(n["name"] for n in spans(trace, "native"))
        self.assertGreaterEqual(count["jpeg_read_scanlines"], self.images)
        for fn in ("jpeg_start_decompress", "jpeg_finish_decompress"):
            self.assertEqual(count[fn], self.images, fn)
        # the built-in set: the decode call and the torch ops, not what sampling names (Pillow's resize, the JPEG API)
        self.assertGreaterEqual(count["ImagingJpegDecode"], 0.9 * self.images)
        self.assertGreaterEqual(count["at::_ops::sub__Tensor::call"], 0.9 * self.images)
        for fn in ("jpeg_read_header", "ImagingResample", "ImagingCrop"):
            self.assertEqual(count[fn], 0, fn)
        other = trace["otherData"]
        # a link per point: each function's entry and its return instructions (one at least)
        self.assertGreaterEqual(other["native_probe_links"], 2 * other["native_functions_probed"])
        self.assertEqual(other["evaluator_probe"], "uprobe + uretprobe")
        self.assertEqual(summary["native_map"], [])  # no sampling asked for
        self.assertEqual(trace["otherData"]["sampling_event"], "none")

    def test_links_without_uprobe_sessions(self):
        # Kernels 6.6-6.12 (no uprobe sessions; LOTUS_NO_UPROBE_SESSION): the Python probes' entry and return
        # links instead of one session; the native points one link a library as ever; the same spans: one header read per image, one decode call per image
        # once _imaging is probed, every ToTensor's two divisions inside it.
        if not kernel_at_least(6, 6):
            self.skipTest("uprobe_multi links: Linux 6.6+")
        r, summary, trace = self.run_job("--native-map", "--sample-freq", "0", *PILLOW,
                                         env={"LOTUS_NO_UPROBE_SESSION": "1"})
        native = spans(trace, "native")
        count = collections.Counter(n["name"] for n in native)
        self.assertEqual(count["jpeg_read_header"], self.images)
        self.assertGreaterEqual(count["ImagingJpegDecode"], 0.9 * self.images)
        self.assertEqual(count["at::_ops::div_Tensor::call"], len(spans(trace, "op", "ToTensor")))
        other = trace["otherData"]
        self.assertEqual(other["evaluator_probe"], "uprobe + uretprobe")
        links, fns = other["native_probe_links"], other["native_functions_probed"]
        self.assertTrue(1 <= links < fns, (links, fns))

    def test_library_loaded_while_running_is_said(self):
        """A worker loads a library in its first sample (ctypes.CDLL) and calls it in every sample: lotus-bpf
        probes it once the dlopen has returned. Every call made after the probes went live is a native span; those
        before may not be, and the trace and the summary say which process loaded what, and when."""
        log, out, summ, rec = (self.path(n) for n in ("calls.log", "t.json", "s.json", "r.lbt"))
        r = run_lotus(["-o", out, "--summary-json", summ, "--record", rec, "--native", "libgdbm*:_gdbm_hash",
                       "--", PY, os.path.join(os.path.dirname(WORKLOAD), "late_library.py"), "64", log])
        self.assertEqual(r.returncode, 0, r.stderr)
        trace = load_trace(out)
        other = trace["otherData"]
        with open(os.path.join(SOURCE, "schemas", "chrome-trace.schema.json")) as f:
            jsonschema.validate(trace, json.load(f))
        calls = collections.defaultdict(list)
        for pid, ns in read_lines(log):
            calls[int(pid)].append((int(ns) - other["t0_monotonic_ns"]) / 1e9)
        self.assertEqual(sum(map(len, calls.values())), 64)
        traced = collections.Counter(n["pid"] for n in spans(trace, "native") if n["name"] == "_gdbm_hash")
        late = {x["pid"]: x for x in other["native_probed_late"] if x["library"].startswith("libgdbm")}
        self.assertTrue(late, other["native_probed_late"])  # the first to load it did so before any probe
        self.assertLessEqual(set(late), set(calls))
        for pid, times in calls.items():
            if pid not in late:  # loaded after the probes were on the file: every call seen
                self.assertEqual(traced[pid], len(times), pid)
                continue
            x = late[pid]
            self.assertTrue(x["during_work"], x)
            live = x["loaded_s"] + x["probed_after_ms"] / 1e3
            self.assertLessEqual(x["loaded_s"], min(times) + 1e-3)  # loaded right before its first call
            after = sum(t > live + 1e-5 for t in times)
            # those made in between may be seen or not (a worker preempted before its first call)
            self.assertGreaterEqual(traced[pid], after, (pid, x, sorted(times)[:4]))
            self.assertLessEqual(traced[pid], len(times), (pid, x))
            self.assertIn(f"(PID {pid}) loaded {x['library']} at", r.stdout)
        # replayed: the same
        rr = run_lotus(["report", rec, "--summary-json", summ])
        self.assertEqual(rr.returncode, 0, rr.stderr)
        with open(summ) as f:
            self.assertEqual(json.load(f)["run"]["native_probed_late"], other["native_probed_late"])

    def test_sample_stack(self):
        # --sample-stack 1 records the leaf alone; --sample-unwind fp adds callers by a frame-pointer walk in the
        # interrupt, so some samples carry more than one frame; cfi (the default) copies the stack and lotus-bpf
        # unwinds it where the leaf has no symbol, keeping the named callers. Every record on stderr says how many.
        frames = {}
        for depth, unwind in (("1", "cfi"), ("8", "fp"), ("8", "cfi")):
            args = ["--native-map", "--sample-freq", "4999", "--sample-stack", depth, "--sample-unwind", unwind]
            r, summary, trace = self.run_job(*args, env={"LOTUS_DEBUG_EVENTS": "1"})
            frames[depth, unwind] = collections.Counter(int(m) for m in re.findall(r" sample frames (\d+)", r.stderr))
            other = trace["otherData"]
            self.assertEqual(other["sampling_stack_frames"], int(depth))
            self.assertEqual(other["sampling_unwind"], "none" if depth == "1" else unwind)
            self.assertGreater(sum(frames[depth, unwind].values()), 200, depth)
        self.assertLessEqual(set(frames["1", "cfi"]), {0, 1}, frames["1", "cfi"])  # 0: no user stack (exiting)
        for key in (("8", "fp"), ("8", "cfi")):
            self.assertGreater(sum(n for k, n in frames[key].items() if k > 1), 0.05 * sum(frames[key].values()),
                               (key, frames[key]))
            self.assertLessEqual(max(frames[key]), 8)
        self.assertGreater(other["sampling_unwound_samples"], 0)
        self.assertGreater(other["sampling_unwound_callers"], other["sampling_unwound_samples"])

    def test_unprobed_copies_are_named_through_the_stack(self):
        # at::_ops::copy_::call left the built-in set (its median call is under three traps): no span of it, and
        # its kernels (hidden functions) are named after it all the same, from the callers the stack's CFI gives.
        # Against a run that probes it as the built-in set did (every sample inside a probed call is named after
        # it, exactly): the same share of ToTensor's and Normalize's samples, within the sampling's noise.
        shares, counts = {}, {}
        for arm, extra in (("stack", ()), ("probed", ("--native", "libtorch_cpu.so*:at::_ops::copy_::call",
                                                      "--sample-stack", "1"))):
            r, summary, trace = self.run_job("--native-map", "--sample-freq", "4999", *extra)
            count = collections.Counter(n["name"] for n in spans(trace, "native"))
            self.assertEqual(count["at::_ops::copy_::call"] > 0, arm == "probed", count)
            self.assertGreater(count["at::_ops::div_Tensor::call"], 0, count)
            nmap = {m["op"]: m for m in summary["native_map"]}
            for op in ("ToTensor", "Normalize"):
                fns = {f["function"]: f["samples"] for f in nmap[op]["functions"]}
                shares[arm, op] = fns.get("at::_ops::copy_::call", 0) / nmap[op]["samples"]
                counts[arm, op] = nmap[op]["samples"]
                if arm == "stack":
                    self.assertGreaterEqual(nmap[op]["named"] / nmap[op]["samples"], 0.9, (op, nmap[op]))
            if arm == "stack":
                self.assertEqual(trace["otherData"]["sampling_unwind"], "cfi")
                self.assertGreater(trace["otherData"]["sampling_unwound_samples"], 0)
                # Named after an op entry only where that op ran: the loader (Pillow's open and decode) calls no
                # torch op, though its samples' leaves are as hidden (libjpeg's statics, the interpreter's).
                loader = next(m for m in summary["native_map"] if m["op"] == "loader")
                self.assertFalse([f for f in loader["functions"] if f["function"].startswith("at::")], loader)
        print("shares", shares, "samples", counts, file=sys.stderr)
        for op in ("ToTensor", "Normalize"):
            self.assertGreater(shares["stack", op], 0.1, shares)
            # the noise of two sampled shares (three standard errors of their difference: ~0.13 for Normalize's
            # ~240 samples a run), and 0.05 for the runs' own difference (one probes copy_ at every call)
            p = (shares["stack", op] + shares["probed", op]) / 2
            se = math.sqrt(p * (1 - p) * (1 / counts["stack", op] + 1 / counts["probed", op]))
            self.assertAlmostEqual(shares["stack", op], shares["probed", op], delta=0.05 + 3 * se,
                                   msg=(shares, counts))

    def test_exceptions_through_probed_calls(self):
        """Samples that try torch.stack and torch.cat on tensors of unequal sizes and catch the RuntimeError (a C++
        exception thrown inside at::_ops::stack::call, a probed function), and call a C++ library (ctypes) whose
        probed function throws to its C++ caller: every sample completes under the native probes (a return probe
        would replace the return address the unwinder walks, and the job would die in std::terminate). The calls
        that returned are spans, exactly; those an exception left are counted, never ended at a wrong time."""
        lib = self.path("libthrower.so")
        subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-o", lib,
                        os.path.join(os.path.dirname(WORKLOAD), "native", "thrower.cpp")], check=True)
        job = os.path.join(os.path.dirname(WORKLOAD), "exceptions_job.py")
        samples = 256
        for arm, extra in (("map", ["--native-map", "--counters", "default"]),
                           ("user", ["--native", "libthrower*:lotus_test::may_throw", "--sample-freq", "0"])):
            log, out, summ = self.path(f"{arm}.log"), self.path(f"{arm}.json"), self.path(f"{arm}-s.json")
            r = run_lotus(["-q", "-o", out, "--summary-json", summ, *extra, "--", PY, job, str(samples), log, lib])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"{samples} samples", r.stdout)
            rows = [list(map(int, fields)) for fields in read_lines(log)]
            self.assertEqual(len(rows), 2, rows)  # each worker's counts: caught (torch, C++), stacks and calls done
            caught_torch, caught_cxx, stacks, calls = (sum(r[i] for r in rows) for i in range(1, 5))
            self.assertEqual((caught_torch, caught_cxx, stacks, calls), (2 * samples, samples, samples, samples))
            trace = load_trace(out)
            other = trace["otherData"]
            count = collections.Counter(n["name"] for n in spans(trace, "native"))
            self.assertEqual(count["at::_ops::stack::call"], stacks)  # those that returned (the collates': stack_out)
            self.assertEqual(other["native_functions_without_returns"], [])
            thrown_stacks = caught_torch // 2  # torch.cat is not probed
            if arm == "map":
                self.assertEqual(other["native_calls_unended"], thrown_stacks)
                with open(summ) as f:
                    nmap = {m["op"]: m for m in json.load(f)["native_map"]}
                # the native map still names the op's functions (which ones its few CPU samples hit is chance:
                # CI saw at::_ops::stack::call among them, and once only the unwinder's _dl_addr, strlen...)
                fns = [f["function"] for f in nmap["FastPathOrFallback"]["functions"]]
                self.assertTrue(any(not f.startswith("[") for f in fns), nmap["FastPathOrFallback"])
            else:
                # the library is probed once the tracer saw its dlopen (in each worker's first sample) and attached
                # to it: from then on each sample's two calls, one left by its exception and one returned. (The
                # attach comes a few samples later where the tracer is busy: CI saw 8 calls of 256 before it.)
                seen = count["lotus_test::may_throw"]
                self.assertGreaterEqual(seen, calls - 16)
                self.assertLessEqual(seen, calls)
                self.assertGreaterEqual(other["native_calls_unended"] - thrown_stacks, seen - 16)
                self.assertLessEqual(other["native_calls_unended"] - thrown_stacks, seen)
            self.assertIn("not native spans", r.stderr + r.stdout)

    def test_files_the_target_names_are_opened_safely(self):
        """A job maps three copies of a library, then puts a FIFO where one was, a link to a device where another
        was, and cuts the third short (as a job may rewrite its own files): lotus-bpf attached with --native on them
        reads and probes what is mapped (through /proc/PID/map_files, a regular file of the mapped inode, held
        open: the file read is the file probed), never blocks on the FIFO nor reads the device, refuses the cut
        file in its notes, and ends on time; the job runs on."""
        lib = self.path("libthrower.so")
        subprocess.run(["g++", "-O2", "-shared", "-fPIC", "-o", lib,
                        os.path.join(os.path.dirname(WORKLOAD), "native", "thrower.cpp")], check=True)
        d = self.path("libs")
        os.makedirs(d)
        names = {k: os.path.join(d, f"libsafe_{k}.so") for k in ("fifo", "dev", "cut")}
        for p in names.values():
            shutil.copy(lib, p)
        ready, stop = self.path("ready"), self.path("stop")
        script = (
            "import ctypes, os, sys, time\n"
            f"n = {names!r}\n"
            "libs = [ctypes.CDLL(p) for p in n.values()]\n"
            "os.unlink(n['fifo']); os.mkfifo(n['fifo'])\n"
            "os.unlink(n['dev']); os.symlink('/dev/zero', n['dev'])\n"
            "os.truncate(n['cut'], 100)\n"
            f"open({ready!r}, 'w').close()\n"
            "calls = 0\n"
            f"while not os.path.exists({stop!r}):\n"
            "    calls += libs[0].lotus_try_twice(1) + libs[1].lotus_try_twice(2)\n"
            "    time.sleep(0.001)\n"
            "print('calls', calls, flush=True)\n"
            "os._exit(0)  # (the loader's exit would run the cut copy's finalizers: its pages are gone)\n")
        job = subprocess.Popen([PY, "-c", script], stdout=subprocess.PIPE, text=True)
        try:
            for _ in range(300):
                if os.path.exists(ready):
                    break
                time.sleep(0.05)
            self.assertTrue(os.path.exists(ready))
            out = self.path("t.json")
            t0 = time.monotonic()
            r = run_lotus(["-q", "-o", out, "--pid", str(job.pid), "--duration", "3", "--sample-freq", "0",
                           "--native", "libsafe_*:lotus_test::may_throw"], timeout=60)
            took = time.monotonic() - t0
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertLess(took, 30, r.stderr)
            trace = load_trace(out)
            libs = collections.Counter(n["args"]["library"] for n in spans(trace, "native")
                                       if n["name"] == "lotus_test::may_throw")
            # the mapped copies behind the FIFO and the link are probed as mapped; the cut one is not
            self.assertGreater(libs["libsafe_fifo.so"], 0, libs)
            self.assertGreater(libs["libsafe_dev.so"], 0, libs)
            self.assertEqual(libs["libsafe_cut.so"], 0, libs)
            self.assertIsNone(job.poll())
            self.assertNotIn(process_state(job.pid), ("T", "t"))  # never left stopped
        finally:
            open(stop, "w").close()
            o, _ = job.communicate(timeout=30)
        self.assertEqual(job.returncode, 0)
        self.assertIn("calls", o)

    def samples_per_cpu_ms(self, summary):
        """All samples of the run (every op, the gaps, outside any span) per ms of the job's CPU time while
        traced: cpu-clock fires once per period a sampled thread runs, so ~Hz/1000; twice that if some thread
        were sampled twice."""
        job = summary["resources"]["job"]
        return sum(m["samples"] for m in summary["native_map"]) / (1000 * (job["user_s"] + job["system_s"]))

    @unittest.skipUnless(kernel_at_least(6, 13), "per-thread sampling comes with the per-process probes (Linux 6.13)")
    def test_sampling_interrupts_only_the_traced_threads(self):
        # Each traced thread carries its own sampling event (its DataLoader workers inherit theirs at fork): a busy
        # process beside the job is never interrupted. With one event per CPU (what kernels without per-process
        # probes get) it is, and those interrupts are counted. The job's samples: one per period of its CPU time,
        # at the default 99 Hz and at 999.
        busy = subprocess.Popen([PY, "-c", "while True: pass"])
        self.addCleanup(lambda: (busy.kill(), busy.wait()))
        for env, scope, hz in (({}, "threads", 99), ({"LOTUS_PER_CPU_SAMPLING": "1"}, "cpus", 999)):
            freq = () if hz == 99 else ("--sample-freq", str(hz))
            r, summary, trace = self.run_job("--native-map", *freq, env=env)
            other = trace["otherData"]
            self.assertEqual(other["sampling_scope"], scope)
            if scope == "threads":
                self.assertEqual(other["sampled_elsewhere"], 0)
            else:  # the busy process, at 999 Hz of the CPU time it got (about half of one CPU, several seconds)
                self.assertGreater(other["sampled_elsewhere"], 1000)
            self.assertAlmostEqual(self.samples_per_cpu_ms(summary) / (hz / 1000), 1.0, delta=0.12, msg=scope)

    @unittest.skipUnless(kernel_at_least(6, 13), "per-thread sampling comes with the per-process probes (Linux 6.13)")
    def test_attached_job_threads_sampled_once(self):
        # Attached by PID to a job whose persistent workers (and the training process's threads) already run:
        # lotus-bpf opens an event on each of those threads, and none twice (an event inherited from the thread
        # that started it counts as one).
        hold, ready = self.path("hold"), self.path("ready")
        job = subprocess.Popen([PY, WORKLOAD, self.data, "--workers", "2", "--epochs", "2", "--persistent",
                                "--hold", hold, "--ready", ready], stdout=subprocess.DEVNULL)
        self.addCleanup(lambda: (job.poll() is None and job.kill(), job.wait()))
        wait_for_file(ready)
        out, summ = self.path("trace.json"), self.path("summary.json")
        tracer = start_lotus(["-q", "-o", out, "--summary-json", summ, "--native-map", "--sample-freq", "999", "--pid",
                              str(job.pid)])
        self.addCleanup(lambda: (tracer.poll() is None and tracer.kill(), tracer.wait()))
        wait_for_attach(tracer)
        open(hold, "w").close()
        _, err = tracer.communicate(timeout=120)
        self.assertEqual(tracer.returncode, 0, err)
        self.assertEqual(job.wait(), 0)
        with open(summ) as f:
            summary = json.load(f)
        other = load_trace(out)["otherData"]
        self.assertEqual((other["sampling_scope"], other["sampled_elsewhere"]), ("threads", 0))
        # the second epoch whole (of the first, the batches prefetched before it attached are not)
        self.assertGreaterEqual(sum(summary["ops"][op]["count"] for op in OPS), len(OPS) * self.images)
        self.assertAlmostEqual(self.samples_per_cpu_ms(summary) / 0.999, 1.0, delta=0.12)

    def check_counters(self, summary, trace, names):
        """Every op counted; task-clock over each op agrees with the on-CPU time BPF accumulates at context
        switches within 5 % (per-CPU events read at each switch where they are perf events); ToTensor, which
        allocates fresh tensors, faults more than the flip."""
        rows = summary["counters"]["ops"]
        for op in OPS:
            self.assertEqual(rows[op]["count"], self.images)
            if "task-clock" in names:
                tc_ms = rows[op]["mean"]["task-clock"] / 1e6
                self.assertAlmostEqual(tc_ms / summary["ops"][op]["cpu_ms"], 1.0, delta=0.05, msg=op)
        for op in spans(trace, "op"):
            for n in names:
                self.assertIn(n, op["args"])
        self.assertEqual(sum(1 for e in trace["traceEvents"] if e["ph"] == "C" and e["name"] == "op counters"),
                         4 * self.images)
        faults = next(n for n in names if n in ("page-faults", "faults"))
        self.assertGreater(rows["ToTensor"]["mean"][faults], rows["RandomHorizontalFlip"]["mean"][faults])

    def test_counters_asked_by_name_are_perf_events(self):
        """Software counters asked for by name are perf's own events (per-CPU, read by BPF at each switch of a
        traced thread), not the threads' accounting that stands in where no PMU counts the default set."""
        names = ["task-clock", "page-faults", "context-switches"]
        r, summary, trace = self.run_job("--counters", ",".join(names))
        self.assertNotIn("no PMU", r.stderr)
        self.assertEqual(summary["counters"]["names"], names)
        self.check_counters(summary, trace, names)
        # another mechanism than the span's own on-CPU time (which the stand-in task-clock equals to 50 ns)
        self.assertTrue(any(abs(op["args"]["task-clock"] / 1e6 - op["args"]["cpu_ms"]) > 6e-5
                            for op in spans(trace, "op")))

    def test_bad_native_spec(self):
        r = run_lotus(["--native", "nocolon", "--", PY, "-c", "pass"])
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("LIBGLOB:SYMBOLGLOB", r.stderr)
        r = run_lotus(["--counters", "cycles,bogus", "--", PY, "-c", "pass"])
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("unknown counter 'bogus'", r.stderr)
        r = run_lotus(["--native-map", "--sample-stack", "9", "--", PY, "-c", "pass"])
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn("--sample-stack", r.stderr)


if __name__ == "__main__":
    unittest.main()
