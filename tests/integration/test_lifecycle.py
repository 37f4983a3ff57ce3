"""Stopping: target exit, Ctrl-C, SIGTERM, --duration; and Python processes that run no pipeline."""
import os
import signal
import subprocess
import threading
import time
import unittest

import test_progress  # (its helpers: importing the module, not its classes, runs none of its tests here)
from harness import (LOTUS, PY, WORKLOAD, BpfTestCase, assert_nested, children, dataset, kill_group, load_trace,
                     not_guardian, process_state, run_lotus, spans, start_lotus, wait_for_attach)


# A tracer that is stopped holds no new child (none would be continued soon): this test-only knob holds them
# anyway, which makes a hold certain; --hold-deadline keeps the guardian from continuing them meanwhile.
HOLD_WHILE_STOPPED = {**os.environ, "LOTUS_TEST_HOLD_WHILE_STOPPED": "1"}


class Lifecycle(BpfTestCase):
    def stop_with(self, sig):
        job = self.long_job()
        out = self.path("trace.json.gz")
        tracer = start_lotus(["-q", "-o", out, "--pid", str(job.pid)])
        wait_for_attach(tracer)
        time.sleep(2)
        tracer.send_signal(sig)
        stdout, stderr = tracer.communicate(timeout=60)
        self.assertEqual(tracer.returncode, 0, stderr)
        self.assert_detached()
        trace = load_trace(out)
        self.assertGreater(len(spans(trace, "sample")), 10)
        assert_nested(self, trace)
        self.assertIn("RandomResizedCrop", stdout)
        time.sleep(0.5)
        self.assertIsNone(job.poll(), "the target must keep running after the tracer stops")
        return trace

    def test_sigint_flushes_and_detaches(self):
        trace = self.stop_with(signal.SIGINT)
        self.assertEqual(trace["otherData"]["stop_reason"], "interrupted")

    def test_sigterm_flushes_and_detaches(self):
        trace = self.stop_with(signal.SIGTERM)
        self.assertEqual(trace["otherData"]["stop_reason"], "terminated by signal")

    def test_duration(self):
        job = self.long_job()
        out = self.path("trace.json")
        t0 = time.time()
        r = run_lotus(["-q", "-o", out, "--pid", str(job.pid), "-d", "2"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(time.time() - t0, 30)
        self.assertGreater(len(spans(load_trace(out), "sample")), 10)
        self.assert_detached()

    def test_target_killed_mid_trace(self):
        job = self.long_job()
        out = self.path("trace.json")
        tracer = start_lotus(["-q", "-o", out, "--pid", str(job.pid)])
        wait_for_attach(tracer)
        time.sleep(2)
        job.kill()
        job.wait()
        stdout, stderr = tracer.communicate(timeout=60)
        self.assertEqual(tracer.returncode, 0, stderr)
        trace = load_trace(out)
        self.assertEqual(trace["otherData"]["stop_reason"], "target exited")
        self.assertGreater(len(spans(trace, "sample")), 10)
        self.assert_detached()

    def test_python_without_dataloader(self):
        out = self.path("trace.json")
        r = run_lotus(["-q", "-o", out, "--", PY, "-c", "import json\nfor i in range(2000): json.dumps({'a': i})"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("No pipeline was seen", r.stdout)
        trace = load_trace(out)
        self.assertEqual(spans(trace), [])
        self.assertEqual(trace["otherData"]["samples"], 0)
        self.assert_detached()

    def test_an_idle_target_wakes_the_tracer_only_when_something_is_due(self):
        """The tracer's loop sleeps until a resource reading is due; records, a held child and the target's exit
        (a pidfd) wake it otherwise. It used to wake every 50 ms and look at the target's /proc/PID/stat each
        time: 20 wake-ups a second, 5.4 ms of CPU a second beside an idle job here, against 3.5 ms now. Counted
        as the tracer's voluntary context switches over 3 s of an idle job; then the job's end stops it."""
        job = subprocess.Popen([PY, "-c", "import time; print('ready', flush=True); time.sleep(600)"],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.addCleanup(lambda: kill_group(job))
        job.stdout.readline()
        for interval, most in (("0", 8), ("100", 40)):  # 1 and 10 a second (at most 1 s asleep); 60 before
            out = self.path(f"t{interval}.json")
            tracer = start_lotus(["-q", "-o", out, "--resources-interval", interval, "--pid", str(job.pid)])
            wait_for_attach(tracer)
            time.sleep(1)
            before = voluntary_switches(tracer.pid)
            time.sleep(3)
            woke = voluntary_switches(tracer.pid) - before
            if interval == "0":
                tracer.send_signal(signal.SIGINT)
            else:
                job.kill()
            stdout, stderr = tracer.communicate(timeout=60)
            self.assertEqual(tracer.returncode, 0, stderr)
            self.assertLessEqual(woke, most, f"--resources-interval {interval}: woke {woke} times in 3 s")
            self.assertEqual(load_trace(out)["otherData"]["stop_reason"],
                             "interrupted" if interval == "0" else "target exited")
        self.assert_detached()

    def test_launch_mode_propagates_exit_status(self):
        r = run_lotus(["-q", "-o", self.path("t.json"), "--", PY, "-c", "raise SystemExit(3)"])
        self.assertEqual(r.returncode, 3)
        self.assertTrue(os.path.exists(self.path("t.json")))

    def test_sigterm_while_a_worker_is_held_orphans_none(self):
        """A stop signal forwarded to the launched job while a new DataLoader worker is held (stopped until its
        probes are in): the worker is let run to its first getppid before its parent gets the signal, so torch's
        watchdog has the parent's pid and the worker ends once the parent died. Forwarded at once, the worker
        started with init as its parent and waited for work forever. The hold is made certain by stopping the
        tracer (SIGSTOP) while the job forks, with the test-only knob that holds then, and a long deadline."""
        go = self.path("go")
        job = ("import os, sys, time, torch\nfrom torch.utils.data import DataLoader\n"
               "loader = DataLoader(list(range(100000)), batch_size=1, num_workers=1)\n"
               f"while not os.path.exists({go!r}): time.sleep(0.02)\n"
               "for _ in loader: time.sleep(0.01)\n")
        tracer = subprocess.Popen([LOTUS, "-q", "-o", self.path("t.json"), "--hold-deadline", "60000", "--", PY, "-c",
                                   job], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True, env=HOLD_WHILE_STOPPED)
        self.addCleanup(lambda: kill_group(tracer))
        wait_for_attach(tracer)
        (main,) = not_guardian(children(tracer.pid))
        tracer.send_signal(signal.SIGSTOP)
        open(go, "w").close()
        deadline = time.time() + 60
        while not children(main) or process_state(children(main)[0]) != "T":  # forked, and held
            self.assertLess(time.time(), deadline, "no worker was held")
            time.sleep(0.05)
        (worker,) = children(main)
        tracer.send_signal(signal.SIGTERM)
        tracer.send_signal(signal.SIGCONT)
        tracer.wait(timeout=60)
        deadline = time.time() + 30  # torch's watchdog looks every 5 s (a busy machine: 20.09 s seen once)
        while process_state(worker) not in (None, "Z"):
            self.assertLess(time.time(), deadline, f"worker {worker} outlived its parent")
            time.sleep(0.1)
        self.assert_detached()

    def test_a_child_forked_while_another_is_attached_is_not_left_waiting(self):
        """Two children forked 2 ms apart: the second is held while the tracer attaches the first (placing its
        probes waits for an RCU grace period in the kernel). The tracer's wake-up for it was consumed as its loop
        began again and the loop then slept its whole timeout with the child held: 57-73 ms at the usual 50 ms,
        here made 3 s (LOTUS_POLL_MS), against the ~10-30 ms that attaching takes."""
        job = ("import os, time\n"
               "time.sleep(1)\n"  # no probe placed for a while: the first child's attach waits a grace period
               "kids = []\n"
               "for _ in range(2):\n"
               "    pid = os.fork()\n"
               "    if pid == 0:\n"
               "        time.sleep(0.5); os._exit(0)\n"
               "    kids.append(pid); time.sleep(0.002)\n"
               "for k in kids: os.waitpid(k, 0)\n")
        out = self.path("t.json")
        r = run_lotus(["-q", "-o", out, "--", PY, "-c", job], env={**os.environ, "LOTUS_POLL_MS": "3000"},
                      timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        held = load_trace(out)["otherData"]["held_children"]
        self.assertEqual(held["count"], 2)
        self.assertLess(held["max_ms"], 1500, held)
        self.assertGreater(held["attach_ms"], 0, held)  # of the holds, the part spent attaching the probes
        self.assertLessEqual(held["attach_ms"], held["total_ms"], held)

    def test_target_killed_while_its_worker_is_held(self):
        """The traced job (--pid) killed and reaped while its new DataLoader worker is held: the worker's probes
        name the interpreter through the tracer's own open file, not the path under /proc/JOB/root that the
        tracer found it by, gone with the job (the tracer exited 1 with "cannot attach the Python probes of
        /proc/JOB/root/... No such file or directory"; test_target_killed_mid_trace met it by chance). The
        tracer ends as the job ended, with its trace, and detaches. The hold is made certain by stopping the
        tracer while the job forks (HOLD_WHILE_STOPPED). (The worker then waits for work forever: docs/limits.md.)"""
        go = self.path("go")
        job = subprocess.Popen([PY, "-c", "import os, sys, time, torch\nfrom torch.utils.data import DataLoader\n"
                                "loader = DataLoader(list(range(100000)), batch_size=1, num_workers=1)\n"
                                f"while not os.path.exists({go!r}): time.sleep(0.02)\n"
                                "for _ in loader: time.sleep(0.01)\n"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self.addCleanup(lambda: kill_group(job))
        out = self.path("t.json")
        tracer = start_lotus(["-q", "-o", out, "--hold-deadline", "60000", "--pid", str(job.pid)],
                             env=HOLD_WHILE_STOPPED)
        self.addCleanup(lambda: tracer.poll() is None and tracer.kill())
        wait_for_attach(tracer)
        tracer.send_signal(signal.SIGSTOP)
        open(go, "w").close()
        deadline = time.time() + 60
        while not children(job.pid) or process_state(children(job.pid)[0]) != "T":  # forked, and held
            self.assertLess(time.time(), deadline, "no worker was held")
            time.sleep(0.05)
        job.kill()
        job.wait()  # reaped: /proc/JOB is gone
        tracer.send_signal(signal.SIGCONT)
        _, stderr = tracer.communicate(timeout=60)
        self.assertEqual(tracer.returncode, 0, stderr)
        self.assertEqual(load_trace(out)["otherData"]["stop_reason"], "target exited")
        self.assert_detached()

    def test_a_kill_of_the_tracers_cgroup_leaves_no_child_held(self):
        """The tracer's cgroup killed whole (cgroup.kill; as systemd's stop of a unit, an OOM group kill, a
        container's cleanup) while a new worker of the job is held: the guardian, moved out of the tracer's cgroup
        into the job's before any probe, lives on and continues the worker, and the job finishes. In the tracer's
        cgroup it died with the tracer, and the job's next epoch's workers stayed stopped (state T) for ever. The
        tracer runs in a cgroup2 cgroup of its own (the job stays in the test's), the hold made certain as above."""
        cgroup = os.path.join(cgroup2_mount(), f"lotus-test-{os.getpid()}-{time.monotonic_ns()}")
        os.mkdir(cgroup)
        self.addCleanup(remove_cgroup, cgroup)
        # Enough epochs to outlast the attach on a busy host (6 ended before it, 3 of 8 runs: "exited while
        # lotus-bpf was attaching")
        epochs = 20
        job = subprocess.Popen([PY, WORKLOAD, dataset(64), "--workers", "2", "--epochs", str(epochs)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        self.addCleanup(lambda: kill_group(job))
        job_cgroup = cgroup_of(job.pid)
        lines = [job.stdout.readline()]  # its pid, after the imports
        while "epoch 0" not in lines[-1]:  # workers forked and ended once
            self.assertIsNone(job.poll(), "the job ended early")
            lines.append(job.stdout.readline())
        reader = threading.Thread(target=lambda: lines.extend(job.stdout), daemon=True)
        reader.start()
        tracer = subprocess.Popen(["sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec "$2" -q -o /dev/null '
                                   '--hold-deadline 60000 --pid "$3"', "sh", cgroup, LOTUS, str(job.pid)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=HOLD_WHILE_STOPPED)
        self.addCleanup(lambda: tracer.poll() is None and tracer.kill())
        wait_for_attach(tracer, timeout=60)
        self.assertEqual(cgroup_of(tracer.pid), cgroup_of_dir(cgroup))
        (guardian,) = [p for p in children(tracer.pid) if p not in not_guardian([p])]
        guardian_cgroup = cgroup_of(guardian)
        tracer.send_signal(signal.SIGSTOP)
        deadline = time.time() + 60
        while not [p for p, s in test_progress.session_states(job.pid).items() if s == "T"]:
            self.assertLess(time.time(), deadline, "no worker was held")
            self.assertIsNone(job.poll(), "the job ended before a worker was held")
            time.sleep(0.01)
        time.sleep(0.3)
        held = [p for p, s in test_progress.session_states(job.pid).items() if s == "T"]
        self.assertTrue(held, "the hold did not last")
        with open(os.path.join(cgroup, "cgroup.kill"), "w") as f:
            f.write("1")
        tracer.wait(timeout=30)
        tracer.stderr.close()
        try:
            job.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.fail(f"the job stopped making progress after the kill of the tracer's cgroup; held then {held}, its "
                      f"processes now {test_progress.session_states(job.pid)}")
        reader.join(timeout=10)
        job.stdout.close()
        self.assertEqual(job.returncode, 0)
        done = [line for line in lines if ": epoch " in line]
        self.assertEqual(done, [f"pipeline_job: epoch {e}: 64 samples\n" for e in range(epochs)])
        self.assertEqual([p for p, s in test_progress.session_states(job.pid).items() if s in "Tt"], [],
                         "processes of the job left stopped")
        self.assertNotEqual(guardian_cgroup, cgroup_of_dir(cgroup), "the guardian was in the tracer's cgroup")
        self.assertEqual(guardian_cgroup, job_cgroup, "the guardian did not join the job's cgroup")
        self.assert_detached()


def cgroup2_mount():
    """Where the cgroup2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1 ones)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            if right.split()[0] == "cgroup2":
                return left.split()[4]
    raise AssertionError("no cgroup2 hierarchy is mounted")


def cgroup_of(pid):
    """A process's cgroup2 path ("0::" in /proc/PID/cgroup)."""
    with open(f"/proc/{pid}/cgroup") as f:
        return next(line[3:].strip() for line in f if line.startswith("0::"))


def cgroup_of_dir(path):
    return "/" + os.path.relpath(path, cgroup2_mount())


def remove_cgroup(path):
    """Kills whatever is left in it, waits for it to empty, removes it."""
    if not os.path.isdir(path):
        return
    with open(os.path.join(path, "cgroup.kill"), "w") as f:
        f.write("1")
    deadline = time.time() + 10
    while True:
        try:
            os.rmdir(path)
            return
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def voluntary_switches(pid):
    n = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                n += sum(int(line.split()[1]) for line in f if line.startswith("voluntary_ctxt_switches"))
        except OSError:
            pass
    return n


if __name__ == "__main__":
    unittest.main()
