"""Per-process probes: while lotus-bpf traces a job, no other process running the same interpreter (or, with
--native-map, using the same native library) has a breakpoint, and the job's processes (workers forked after
attaching included: held until theirs are in place) have theirs. Read from the processes' own memory: the first
byte of each probed function is int3 (0xcc) where a uprobe is installed."""
import json
import os
import re
import subprocess
import unittest
from collections import Counter

from harness import (INTERPRETERS, LOTUS, OPS, PY, WORKLOAD, BpfTestCase, children, dataset, kernel_at_least,
                     load_trace, not_guardian, read_lines, spans, start_lotus, wait_for_attach, wait_for_file)

INT3 = 0xCC


def probe_offsets(python, kind="slot"):
    """The file offsets lotus-bpf probes in this interpreter: {name: offset}; kind "opcode": the handlers that
    --all-calls probes on 3.11 (RESUME twice, RETURN_VALUE)."""
    out = subprocess.run([LOTUS, "probes", python], capture_output=True, text=True, check=True).stdout
    points = {}
    for line in out.splitlines():
        f = line.split()
        if f[0] == kind and len(f) == 3:
            points[f[1] if f[1] not in points else f"{f[1]} {f[2]}"] = int(f[2], 16)
        elif f[0] == "interpreter":
            path = f[1]
    return path, points


def first_bytes(pid, path, offsets):
    """The byte at each file offset of `path` as mapped in process pid."""
    real = os.path.realpath(path)
    maps = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and os.path.realpath(parts[5]) == real and "x" in parts[1]:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                maps.append((lo, hi, int(parts[2], 16)))
    out = {}
    with open(f"/proc/{pid}/mem", "rb") as mem:
        for name, off in offsets.items():
            for lo, hi, foff in maps:
                if foff <= off < foff + (hi - lo):
                    mem.seek(lo + off - foff)
                    out[name] = mem.read(1)[0]
    return out


def native_offsets(lib, names):
    """File offsets of functions of a shared library: {name: offset}, from its dynamic symbols and segments."""
    segments = []
    for line in subprocess.run(["readelf", "-lW", lib], capture_output=True, text=True, check=True).stdout.splitlines():
        f = line.split()
        if f and f[0] == "LOAD":
            segments.append((int(f[1], 16), int(f[2], 16), int(f[4], 16)))  # offset, vaddr, size in the file
    out = {}
    for line in subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        f = line.split()
        name = f[2].split("@")[0] if len(f) == 3 else ""  # libc's are versioned: read@@GLIBC_2.2.5
        if name in names:
            vaddr = int(f[0], 16)
            out.update({name: vaddr - va + off for off, va, size in segments if va <= vaddr < va + size})
    return out


@unittest.skipUnless(kernel_at_least(6, 13), "per-process probes need bpf_send_signal_task (Linux 6.13)")
class Isolation(BpfTestCase):
    def traced_job(self, env, *args):
        """Launches the tracer on a held job; once its 2 workers (forked under the tracer) have prefetched,
        returns (tracer, job pid, worker pids); the caller reads memory, then calls finish()."""
        n = 64
        self.sample_log, self.ready, self.hold = self.path("samples.log"), self.path("ready"), self.path("hold")
        self.out = self.path("trace.json")
        tracer = subprocess.Popen([LOTUS, "-q", "-o", self.out, *args, "--", PY, WORKLOAD, dataset(n), "--workers", "2",
                                   "--batch-size", "16", "--sample-log", self.sample_log, "--hold", self.hold,
                                   "--ready", self.ready], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, **env})
        self.addCleanup(lambda: (tracer.poll() is None and tracer.kill(), tracer.wait()))
        wait_for_attach(tracer)
        wait_for_file(self.ready)
        (job,) = not_guardian(children(tracer.pid, every_thread=True))
        workers = sorted({int(pid) for pid, i, ts in read_lines(self.sample_log)})
        self.assertEqual(len(workers), 2)
        return tracer, job, workers, n

    def finish(self, tracer, n):
        open(self.hold, "w").close()
        _, err = tracer.communicate(timeout=120)
        self.assertEqual(tracer.returncode, 0, err)
        trace = load_trace(self.out)
        by_op = Counter(s["name"] for s in spans(trace, "op"))
        self.assertEqual(by_op, Counter({op: n for op in OPS}))  # every sample of the epoch, each op once
        return trace

    def assert_breakpoints(self, path, points, other, traced):
        """int3 at every probed point of `path` in the traced processes, the original bytes in `other`."""
        seen = first_bytes(other, path, points)
        self.assertEqual(set(seen), set(points))
        self.assertNotIn(INT3, seen.values())
        for pid in traced:
            self.assertEqual(first_bytes(pid, path, points), {k: INT3 for k in points}, pid)

    def unrelated(self):
        p = subprocess.Popen([PY, "-c", "import time; time.sleep(300)"])
        self.addCleanup(lambda: (p.kill(), p.wait()))
        return p

    def test_other_processes_have_no_breakpoint(self):
        other = self.unrelated()
        path, points = probe_offsets(PY)
        self.assertEqual(set(points), {"__call__", "__iter__", "__next__"})
        tracer, job, workers, n = self.traced_job({})
        self.assert_breakpoints(path, points, other.pid, [job] + workers)
        trace = self.finish(tracer, n)
        self.assertEqual(trace["otherData"]["python_probes_scope"], "traced processes")
        self.assertGreaterEqual(trace["otherData"]["held_children"]["count"], 2)  # the workers, forked under it
        # the unrelated process still sleeps: it was never stopped
        with open(f"/proc/{other.pid}/stat") as f:
            self.assertNotEqual(f.read().rsplit(")", 1)[1].split()[0], "T")

    def as_older_kernel(self, env, perf_links):
        """The default run with the host read as an older kernel (docs/kernels.md): the probes are still in the
        job's processes only, its workers (forked under the tracer) hold themselves at PyOS_AfterFork_Child until
        theirs are in, and the run says what the kernel lacks."""
        other = self.unrelated()
        path, points = probe_offsets(PY)
        tracer, job, workers, n = self.traced_job(env)
        self.assert_breakpoints(path, points, other.pid, [job] + workers)
        trace = self.finish(tracer, n)
        od = trace["otherData"]
        self.assertEqual(od["python_probes_scope"], "traced processes")
        self.assertEqual(od["evaluator_probe"], "uprobe + uretprobe")
        self.assertGreaterEqual(od["held_children"]["count"], 2)
        self.assertEqual(od["held_children"]["unseen"]["count"], 0)
        lacks = " | ".join(od["kernel_lacks"])
        self.assertIn("no bpf_send_signal_task (Linux 6.13+): a forked process stops itself", lacks)
        self.assertEqual("perf-event uprobes" in lacks, perf_links, lacks)

    def test_as_linux_6_12_a_child_holds_itself(self):
        self.as_older_kernel({"LOTUS_NO_UPROBE_SESSION": "1", "LOTUS_NO_HOLD_KFUNCS": "1",
                              "LOTUS_NO_EXIT_GROUP_DEAD": "1"}, perf_links=False)

    def test_as_linux_6_1_perf_event_probes_per_process(self):
        self.as_older_kernel({"LOTUS_NO_UPROBE_MULTI": "1", "LOTUS_NO_UPROBE_SESSION": "1",
                              "LOTUS_NO_HOLD_KFUNCS": "1", "LOTUS_NO_EXIT_GROUP_DEAD": "1"}, perf_links=True)

    def test_file_reads_do_not_trap(self):
        """The pickles a DataLoader's queues carry are received at the interpreter's os.read (in the Python probes'
        session), where no file read passes: libc's read(), which every file read of a sample trapped on (~4 a
        sample of the example), keeps its original byte in the job and its workers, while os.read and libc's
        write() have their breakpoints; every batch is still seen arriving (its wait in next() and its use)."""
        path, points = probe_offsets(PY, "builtin")
        self.assertEqual(set(points), {"os.read"})
        tracer, job, workers, n = self.traced_job({})
        with open(f"/proc/{job}/maps") as f:
            libc = next(line.split()[5] for line in f if re.search(r"/libc[.-][^/]*so", line))
        calls = native_offsets(libc, {"read", "write"})
        self.assertEqual(set(calls), {"read", "write"})
        def trapped(pid, name):  # a probe sits at the function's entry or after a first instruction it emulates
            return INT3 in first_bytes(pid, libc, {i: calls[name] + i for i in range(16)}).values()
        for pid in [job] + workers:
            self.assertEqual(first_bytes(pid, path, points), {"os.read": INT3}, pid)
            self.assertTrue(trapped(pid, "write"), pid)
            self.assertFalse(trapped(pid, "read"), pid)
        trace = self.finish(tracer, n)
        self.assertEqual(trace["otherData"]["syscall_programs"], "traced processes' libc calls and os.read")
        # Each worker's batch begins at the task it receives; each wait in next() is matched to the batch it
        # received (its delay from ready to use), in the main process.
        batches = n // 16
        self.assertEqual(sorted(b["args"]["batch"] for b in spans(trace, "batch")), list(range(batches)))
        waits = spans(trace, "wait")
        self.assertEqual(sorted(w["args"].get("batch") for w in waits), list(range(batches)))
        self.assertTrue(all("delay_ms" in w["args"] for w in waits), waits)

    def test_native_probes_only_in_the_traced_processes(self):
        # --native-map (and --native) probe Pillow's functions: a process that only imported Pillow has none.
        other = subprocess.Popen([PY, "-c", "import PIL._imaging as m, time; print(m.__file__, flush=True); "
                                  "time.sleep(300)"], stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (other.kill(), other.wait()))
        lib = other.stdout.readline().strip()
        points = native_offsets(lib, {"ImagingResample", "ImagingCrop", "ImagingJpegDecode"})
        self.assertEqual(len(points), 3, points)
        tracer, job, workers, n = self.traced_job({}, "--native-map", "--sample-freq", "0", "--native",
                                                  "_imaging*:ImagingResample", "--native", "_imaging*:ImagingCrop")
        self.assert_breakpoints(lib, points, other.pid, [job] + workers)
        trace = self.finish(tracer, n)
        resample = [s for s in spans(trace, "native") if s["name"] == "ImagingResample"]
        self.assertEqual(len(resample), n)  # one per RandomResizedCrop: the held workers had theirs from the start

    def test_all_calls_opcode_probes_only_in_the_traced_process(self):
        # --all-calls on 3.11 (calls inlined, no trampoline) probes the evaluator's RESUME and RETURN_VALUE handlers:
        # every frame of the traced job traps there; another process of the same interpreter must not.
        py = INTERPRETERS["3.11"]
        path, points = probe_offsets(py, "opcode")
        self.assertEqual(len(points), 3, points)
        other = subprocess.Popen([py, "-c", "import time; print('ready', flush=True); time.sleep(300)"],
                                 stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (other.kill(), other.wait(), other.stdout.close()))
        other.stdout.readline()  # it runs Python: its libpython is mapped
        hold, ready, out = self.path("hold"), self.path("ready"), self.path("all.json")
        job = (f"import os, time\ndef helper(i):\n    return i\nopen({ready!r}, 'w').close()\n"
               f"while helper(1) and not os.path.exists({hold!r}):\n    time.sleep(0.01)\n")
        tracer = start_lotus(["-q", "-o", out, "--all-calls", "--span", "helper", "--", py, "-c", job])
        self.addCleanup(lambda: (tracer.poll() is None and tracer.kill(), tracer.wait()))
        wait_for_attach(tracer)
        # The job is released at its exec: this interpreter's libpython is mapped (and its probes placed) by the
        # dynamic loader after that. Once it runs Python, it is.
        wait_for_file(ready)
        (pid,) = not_guardian(children(tracer.pid, every_thread=True))
        self.assert_breakpoints(path, points, other.pid, [pid])
        open(hold, "w").close()
        _, err = tracer.communicate(timeout=120)
        self.assertEqual(tracer.returncode, 0, err)
        self.assertGreater(len(spans(load_trace(out), "py", "helper")), 0)

    def test_system_wide_probes_reach_everyone(self):
        # What kernels without per-process probes do, and what the test above would see if they leaked.
        other = self.unrelated()
        path, points = probe_offsets(PY)
        tracer, job, workers, n = self.traced_job({"LOTUS_SYSTEM_WIDE_PROBES": "1"})
        self.assertEqual(first_bytes(other.pid, path, points), {k: INT3 for k in points})
        trace = self.finish(tracer, n)
        self.assertEqual(trace["otherData"]["python_probes_scope"], "system-wide")
        self.assertNotIn("held_children", trace["otherData"])


def tracer_program_ids(pid):
    """The ids of the BPF programs a process holds, from its file descriptors' fdinfo (programs and links)."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                ids.update(int(line.split()[1]) for line in f if line.startswith("prog_id:"))
        except FileNotFoundError:
            pass
    return ids


def off_switch(runs):
    """Runs of every program but on_switch, which runs at each context switch of the machine: however busy the
    machine was meanwhile, a program on every syscall would still show here as 100,000 runs."""
    return sum(n for name, n in runs.items() if name != "on_switch")


def off_watched(runs):
    """Runs of every program but on_switch and those on the watched syscalls' own events, which run for every
    process's reads, writes and opens (a busy machine makes thousands meanwhile); assert_none_on_every_syscall
    still bounds each of them."""
    return sum(n for name, n in runs.items()
               if name not in ("on_switch", "on_openat", "on_openat_done", "on_read_done", "on_write", "on_getppid"))


def run_counts(ids):
    """{program id: (name, runs so far)} by the kernel's bpf_stats."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {p["id"]: (p.get("name", ""), p.get("run_cnt", 0)) for p in json.loads(out) if p["id"] in ids}


class SyscallIsolation(BpfTestCase):
    calls = 100_000

    def syscall_runs(self, env, wrap=(), args=()):
        """Runs of the tracer's programs (bpf_stats) over 100,000 getpid() calls of a process it does not trace,
        while it traces an idle job (the tracer started through `wrap`, which execs it); and the run's
        otherData."""
        stats = "/proc/sys/kernel/bpf_stats_enabled"

        def write_stats(value):
            with open(stats, "w") as f:
                f.write(value)
        with open(stats) as f:
            self.addCleanup(write_stats, f.read().strip())
        write_stats("1")
        job = subprocess.Popen([PY, "-c", "import time; time.sleep(300)"])
        self.addCleanup(lambda: (job.kill(), job.wait()))
        out = self.path("trace.json")
        tracer = subprocess.Popen([*wrap, LOTUS, "-q", "-o", out, *args, "--pid", str(job.pid)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **env})
        self.addCleanup(lambda: (tracer.poll() is None and tracer.kill(), tracer.wait()))
        wait_for_attach(tracer)
        ids = tracer_program_ids(tracer.pid)
        self.assertGreater(len(ids), 5)
        before = run_counts(ids)
        subprocess.run([PY, "-c", f"import os\nfor _ in range({self.calls}): os.getpid()"], check=True)
        after = run_counts(ids)
        tracer.terminate()
        _, err = tracer.communicate(timeout=60)
        self.assertEqual(tracer.returncode, 0, err)
        return {name: cnt - before[i][1] for i, (name, cnt) in after.items() if i in before}, \
            load_trace(out)["otherData"]

    def assert_at_libc(self, runs, other):
        """The watched syscalls seen at libc's wrappers alone: another process's syscalls ran almost no program
        of the tracer's, and no syscall program is loaded at all (runs holds every program the tracer holds,
        those that never ran too)."""
        self.assertEqual(other["syscall_programs"], "traced processes' libc calls and os.read")
        self.assertLess(off_switch(runs), self.calls // 20, runs)
        self.assertIn("libc_call", runs)
        for name in ("on_openat", "on_openat_done", "on_read_done", "on_write", "on_getppid", "on_sys_enter",
                     "on_sys_exit"):
            self.assertNotIn(name, runs)

    def assert_on_watched_events(self, runs):
        """No program ran on the 100,000 getpid calls: each program of the tracer's ran fewer times than half
        of them, and those not on a watched syscall's event (nor on_switch) a few hundred times at most."""
        self.assertLess(max(n for name, n in runs.items() if name != "on_switch"), self.calls // 2, runs)
        self.assertLess(off_watched(runs), self.calls // 20, runs)

    def test_other_processes_syscalls_run_no_program(self):
        """By default the syscalls lotus-bpf watches are seen at libc's wrappers in the traced processes alone: no
        syscall event is in use, so another process's syscalls take no tracing path and run none of its
        programs (what else ran meanwhile is context switches, a few hundred at most)."""
        self.assert_at_libc(*self.syscall_runs({}))

    def test_native_map_sees_syscalls_and_library_loads_at_libc(self):
        """The native map too: the libraries the dynamic loader maps (around libc) are seen at the return of libc's
        dlopen, so it needs no syscall event either (test_native's launched jobs load Pillow and torch that way)."""
        self.assert_at_libc(*self.syscall_runs({}, args=("--native-map", "--sample-freq", "0")))

    def test_watched_syscalls_on_their_own_events(self):
        """With the events (LOTUS_SYSCALL_EVENTS=1; the native map on a libc without dlopen) each watched syscall
        has one program on its own event: a syscall of another kind, by any process, runs none of lotus-bpf's
        programs (one on every sys_enter and sys_exit made a cheap syscall of a process never traced a fifth
        slower)."""
        runs, other = self.syscall_runs({"LOTUS_SYSCALL_EVENTS": "1"})
        self.assertEqual(other["syscall_programs"], "watched syscalls")
        self.assert_on_watched_events(runs)

    def test_syscall_events_where_tracefs_is_not_mounted(self):
        """Many machines never mount tracefs, where the events' ids are: lotus-bpf reads them from one it mounts
        in a child's own mount namespace (the machine's mounts untouched), and still runs only on the watched
        syscalls. The tracer runs here in a mount namespace with no tracefs in it."""
        no_tracefs = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                      "umount -l /sys/kernel/tracing 2>/dev/null; umount -l /sys/kernel/debug 2>/dev/null; "
                      "test -e /sys/kernel/tracing/events && exit 97; "
                      "test -e /sys/kernel/debug/tracing && exit 98; exec \"$0\" \"$@\""]
        runs, other = self.syscall_runs({"LOTUS_SYSCALL_EVENTS": "1"}, no_tracefs)
        self.assertEqual(other["syscall_programs"], "watched syscalls")
        self.assert_on_watched_events(runs)
        self.assertGreater(runs.get("on_getppid", 0) + runs.get("on_openat", 0) + runs.get("on_read_done", 0)
                           + runs.get("on_write", 0), 0, runs)

    def test_raw_syscall_pair_runs_on_every_syscall(self):
        """Where tracefs cannot be read (CAP_BPF + CAP_PERFMON without root; forced here), the raw pair runs on
        every syscall of the machine, and the trace says so."""
        runs, other = self.syscall_runs({"LOTUS_RAW_SYSCALLS": "1"})
        self.assertEqual(other["syscall_programs"], "every syscall")
        self.assertGreaterEqual(runs["on_sys_enter"], self.calls, runs)
        self.assertGreaterEqual(runs["on_sys_exit"], self.calls, runs)


if __name__ == "__main__":
    unittest.main()
