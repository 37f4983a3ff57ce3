"""Bad input: one clear line on stderr, a non-zero exit, and nothing left attached."""
import os
import subprocess
import time
import unittest

from harness import LOTUS, PY, BpfTestCase, pyenv_python, run_lotus

def free_pid():
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 1
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


class BadInput(BpfTestCase):
    def assert_refused(self, args, *needles):
        out = self.path("t.json")
        r = run_lotus(["-o", out] + args if "-o" not in args else args, timeout=60)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(lines), 1, f"expected one line on stderr, got: {r.stderr!r}")
        for n in needles:
            self.assertIn(n, lines[0])
        self.assertTrue(lines[0].startswith("lotus-bpf: "), lines[0])
        self.assert_detached()
        return lines[0]

    def background(self, argv):
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (p.kill(), p.wait()))
        time.sleep(0.3)
        return p

    def test_no_such_pid(self):
        pid = free_pid()
        self.assert_refused(["--pid", str(pid)], "no such process", str(pid))

    def test_pid_not_python(self):
        p = self.background(["sleep", "60"])
        self.assert_refused(["--pid", str(p.pid)], "not a CPython process")

    def test_unsupported_python_version(self):
        for version in ("3.9", "2.7"):
            exe = pyenv_python(version)
            if exe is None:
                self.fail(f"pyenv's CPython {version} is expected on these machines")
            code = "import time; time.sleep(60)" if version != "2.7" else "import time; time.sleep(60)"
            p = self.background([exe, "-c", code])
            line = self.assert_refused(["--pid", str(p.pid)], f"CPython {version}", "not supported", "3.11")

    def test_not_root(self):
        p = self.background([PY, "-c", "import time; time.sleep(60)"])
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", LOTUS,
                            "--pid", str(p.pid), "-o", "/tmp/never-written.json"], capture_output=True, text=True)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertNotEqual(r.returncode, 0)
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("needs root", lines[0])
        self.assert_detached()

    def test_unwritable_output(self):
        p = self.background([PY, "-c", "import time; time.sleep(60)"])
        self.assert_refused(["--pid", str(p.pid), "-o", "/nonexistent-dir/t.json"], "cannot write",
                            "/nonexistent-dir/t.json")
        self.assert_refused(["--pid", str(p.pid), "-o", "/proc/t.json"], "cannot write")
        self.assertIsNone(p.poll(), "the target must be left running")

    def test_launch_command_not_found_or_not_python(self):
        self.assert_refused(["--", "/no/such/program"], "cannot run")
        self.assert_refused(["--", "/bin/true"], "did not start a CPython interpreter")

    def test_bad_rules_file(self):
        bad = self.path("bad.json")
        for content, needle in (("{not json", "not valid JSON"), ('{"spans": [1]}', "list of non-empty strings"),
                                ('{"ops": []}', "unknown key"),
                                ('{"framework": {"code": []}}', '"object_call_methods" is missing')):
            with open(bad, "w") as f:
                f.write(content)
            self.assert_refused(["--rules", bad, "--", PY, "-c", "pass"], needle)
        self.assert_refused(["--rules", self.path("missing.json"), "--", PY, "-c", "pass"], "cannot read rules file")
        self.assert_refused(["rules", "-o", "/nonexistent-dir/rules.json"], "cannot write", "/nonexistent-dir")

    def test_usage_errors(self):
        self.assert_refused([], "--pid")
        self.assert_refused(["--pid", "1", "--", PY], "not both")


if __name__ == "__main__":
    unittest.main()
