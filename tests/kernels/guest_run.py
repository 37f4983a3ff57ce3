#!/usr/bin/env python3
"""Runs the kernel matrix's checks for one kernel, inside its VM (tests/kernels/matrix.py starts it there through
scripts/kernel-vm.sh run): guest_run.py RESULTS_DIR KERNEL. Each check is one or more unittest ids (the integration
tests where they already check the point, tests/kernels/guest_checks.py where none did), each in a process of its
own with a time limit. Writes RESULTS_DIR/results.json ({"kernel", "release", "checks": {name: {"status", "seconds",
"why", "figures"}}}) and one log per check; exits 0 when every check passed.

Also the matrix's plan (matrix.py reads it): which checks each kernel runs."""
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
INTEGRATION = os.path.join(SOURCE, "tests", "integration")

# name: (what it shows, the unittest ids that show it)
CHECKS = {
    "binary": ("lotus-bpf's libraries are all in the VM and it starts", []),
    "example-launch": ("examples/train.py, 2 workers, launched: ops, loaders, collates, batches, waits = its log",
                       ["guest_checks.ExampleJob.test_launch_exact_against_its_log"]),
    "example-attach": ("the same attached (--pid) before its first epoch; and a job whose workers are alive at "
                       "attach, exact for the epochs after it",
                       ["guest_checks.ExampleJob.test_attach_exact_against_its_log",
                        "test_attach.AttachMode.test_later_epochs_new_workers_are_followed"]),
    "pure-python": ("a pure-Python pipeline (no torch, 2 forked processes), --pipeline: every op once per item",
                    ["guest_checks.PurePython.test_pure_python_pipeline_exact"]),
    "reduced-caps": ("the same as a user (nobody) with only CAP_BPF + CAP_PERFMON: exact, or refused in one line "
                     "naming the capability",
                     ["guest_checks.ReducedCapabilities.test_pure_python_pipeline_with_bpf_and_perfmon_only"]),
    "others-pay-nothing": ("an unrelated process's CPU time beside a traced job = beside it untraced (interleaved)",
                           ["guest_checks.Bystander.test_unrelated_process_pays_nothing"]),
    "kill-9-fork": ("tracer SIGKILLed with a new worker's fork in flight: the job finishes, nothing left stopped",
                    ["guest_checks.KilledTracer.test_killed_at_a_fork_the_job_finishes"]),
    "native-exceptions": ("--native-map on samples that catch a C++ exception thrown inside a probed op: every "
                          "sample completes; returned calls are spans, thrown ones counted (the workers' counts)",
                          ["guest_checks.NativeProbes.test_exceptions_through_probed_calls"]),
    "refusal": ("below the minimum kernel: one line naming the kernel, non-zero exit; attached, the job runs to "
                "its end; launched, nothing starts",
                ["guest_checks.Refusal.test_launch_refused_in_one_line_before_the_job_starts",
                 "guest_checks.Refusal.test_attach_refused_in_one_line_the_job_runs_to_its_end"]),
}
TRACED = ["binary", "example-launch", "example-attach", "pure-python", "reduced-caps", "others-pay-nothing",
          "kill-9-fork", "native-exceptions"]
# kernel: (checks, environment). 5.10 lacks task storage and bpf_get_current_task_btf (5.11): lotus-bpf refuses it.
PLAN = {
    "5.10": (["binary", "refusal"], {"LOTUS_KERNEL_REFUSED": "1"}),
    "6.1": (TRACED, {}),
    "6.12": (TRACED, {}),
}
TEST_LIMIT_S = 420  # one test id; TCG is slow, and a hung test must not eat the other checks' time


def why_failed(log):
    """The lines that say why a unittest run failed: its assertion or error lines, else its last lines."""
    lines = log.splitlines()
    said = [l for l in lines if re.match(r"^\w*(Error|Exception)\b|^FAIL:|^ERROR:|^SKIPPING|skipped '", l)]
    return "\n".join((said or lines)[-6:])[-1500:]


def run_test(test, env):
    """(status, output) of one unittest id in a process group of its own, killed whole at the time limit (a hung
    test's jobs must not run on into the next check's timings)."""
    proc = subprocess.Popen([sys.executable, "-m", "unittest", "-v", test], cwd=INTEGRATION, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TEST_LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return "timeout", out + f"\n(timed out after {TEST_LIMIT_S} s)\n"
    if proc.returncode != 0:
        return "fail", out
    # A skip is a miss: the matrix asked this kernel for the check.
    return ("fail" if re.search(r"^OK \(skipped=", out, re.M) else "pass"), out


def check_binary(lotus):
    missing = subprocess.run(["ldd", lotus], capture_output=True, text=True).stdout
    missing = [l.split()[0] for l in missing.splitlines() if "not found" in l]
    if missing:
        return False, f"libraries missing in the VM root (add their packages to scripts/kernel-vm.sh): {missing}"
    r = subprocess.run([lotus, "--version"], capture_output=True, text=True, timeout=60)
    out = (r.stdout + r.stderr).strip()
    return r.returncode == 0, out


def main():
    results_dir, kernel = sys.argv[1], sys.argv[2]
    checks, env_extra = PLAN[kernel]
    lotus = os.environ["LOTUS_BPF"]
    env = {**os.environ, **env_extra, "LOTUS_SOURCE": SOURCE, "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": HERE, "LOTUS_TEST_ARTEFACTS": os.path.join(results_dir, "artefacts")}
    os.makedirs(results_dir, exist_ok=True)
    report = {"kernel": kernel, "release": os.uname().release, "checks": {}}

    def save():  # after each check, on the disk: a VM that hangs later and is killed still gives these back
        with open(os.path.join(results_dir, "results.json"), "w") as f:
            json.dump(report, f, indent=1)
        os.sync()

    for name in checks:
        started = time.monotonic()
        entry = {"status": "pass", "why": "", "figures": {}, "tests": {}}
        report["checks"][name] = entry
        log_path = os.path.join(results_dir, f"{name}.log")
        with open(log_path, "w") as log:
            if name == "binary":
                ok, said = check_binary(lotus)
                log.write(said + "\n")
                entry["status"], entry["why"] = ("pass" if ok else "fail"), ("" if ok else said)
            for test in CHECKS[name][1]:
                print(f"guest_run: {kernel}: {name}: {test}", flush=True)
                t0 = time.monotonic()
                status, out = run_test(test, env)
                log.write(f"=== {test} ({status}, {time.monotonic() - t0:.1f} s)\n{out}\n")
                log.flush()
                entry["tests"][test] = status
                for key, value in re.findall(r"FIGURE (\w+)=(.*)$", out, re.M):
                    entry["figures"][key] = value
                if status != "pass":
                    entry["status"] = status if entry["status"] == "pass" else entry["status"]
                    entry["why"] += f"{test}: {why_failed(out)}\n"
        entry["seconds"] = round(time.monotonic() - started, 1)
        print(f"guest_run: {kernel}: {name}: {entry['status']} ({entry['seconds']} s)", flush=True)
        save()
    save()
    return 0 if all(c["status"] == "pass" for c in report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
