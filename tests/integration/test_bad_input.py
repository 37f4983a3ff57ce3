"""Bad input: one clear line on stderr, a non-zero exit, and nothing left attached. Hostile names from the target
reach the text outputs escaped; a sweep writes only into a directory of its own, never through a link."""
import json
import os
import re
import subprocess
import time
import unittest

from harness import LOTUS, PY, WORKLOAD, BpfTestCase, dataset, load_trace, pyenv_python, run_lotus, spans

HOSTILE = os.path.join(os.path.dirname(WORKLOAD), "hostile_names.py")
CLASS_NAME = "Evil\x1b]0;x\x07\u009b31mCrop"  # as hostile_names.py makes it
CLASS_PRINTED = "Evil\\e]0;x\\a\\u009b31mCrop"  # as a text output shows it (common/printable.h)
CONTROLS = (b"\x1b", b"\x07", b"\xc2\x9b")  # ESC, BEL, and U+009B (CSI) in UTF-8

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
        # the agent reads it for each job's run: a bad one is refused at its start, not at its first job
        r = run_lotus(["agent", "--rules", self.path("missing.json")], timeout=30)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("lotus-bpf agent: cannot read rules file"), lines[0])
        self.assert_detached()

    def test_usage_errors(self):
        self.assert_refused([], "--pid")
        self.assert_refused(["--pid", "1", "--", PY], "not both")


class HostileNames(BpfTestCase):
    """A class name that retitles the terminal (ESC ] 0;x BEL) with a C1 CSI, a dataset path with ESC, BEL and a
    newline: the text outputs carry none of their control bytes, the JSON outputs keep them exact."""

    def assert_no_controls(self, data, where):
        for c in CONTROLS:
            self.assertNotIn(c, data, f"{c!r} reached {where}: {data[:3000]!r}")

    def test_summary_and_log_lines(self):
        out, js, txt = self.path("t.json"), self.path("s.json"), self.path("summary.txt")
        with open(txt, "wb") as f:  # the text summary, into a file
            # LOTUS_DEBUG_EVENTS: a log line on stderr per record, the type records' class names among them
            r = subprocess.run([LOTUS, "-o", out, "--summary-json", js, "--", PY, HOSTILE, dataset(64),
                                self.path("root")], stdout=f, stderr=subprocess.PIPE, timeout=300,
                               env={**os.environ, "LOTUS_DEBUG_EVENTS": "1"})
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        with open(txt, "rb") as f:
            summary = f.read()
        self.assert_no_controls(summary, "the summary")
        self.assert_no_controls(r.stderr, "stderr")
        text = summary.decode()
        self.assertRegex(text, "\n" + re.escape(CLASS_PRINTED) + " +16 ")  # its row, on one line
        self.assertIn("data\\e[2J\\a\\nset", text)  # the dataset's root in the section's title
        self.assertIn(CLASS_PRINTED + "\n", r.stderr.decode())  # the type record's line
        with open(js, encoding="utf-8") as f:
            doc = json.load(f)
        self.assertEqual(doc["ops"][CLASS_NAME]["count"], 16)
        self.assertTrue(any("data\x1b[2J\x07\nset" in l["title"] for l in doc["loaders"]), doc["loaders"])
        self.assertEqual(len(spans(load_trace(out), "op", CLASS_NAME)), 16)
        self.assert_detached()

    def test_top(self):
        # stdout not a terminal: top prints its frames plainly, so any ESC on it would be the target's
        r = subprocess.run([LOTUS, "top", "--", PY, HOSTILE, dataset(64), self.path("root"), "2.5"],
                           capture_output=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assert_no_controls(r.stdout, "top's frames")
        self.assert_no_controls(r.stderr, "stderr")
        self.assertIn(CLASS_PRINTED + " ", r.stdout.decode())
        self.assert_detached()


class SweepOutputs(BpfTestCase):
    """sweep: an output directory of its own, files opened without following a link, --param values kept out of
    paths."""

    def sweep(self, out, *values):
        table = self.path("table.json")
        return subprocess.run([LOTUS, "sweep", "--param", "tag=" + ",".join(values), "--output-dir", out,
                               "--summary-json", table, "--", PY, HOSTILE, dataset(64), self.path("root"), "0",
                               "{tag}"], capture_output=True, timeout=600), table

    def assert_one_line(self, r, *needles):
        lines = [l for l in r.stderr.decode().splitlines() if l.strip()]
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertTrue(lines[0].startswith("lotus-bpf: sweep: "), lines[0])
        for n in needles:
            self.assertIn(n, lines[0])

    def test_refuses_a_directory_it_did_not_make_or_of_another_user(self):
        mine = self.path("mine")
        os.mkdir(mine)
        r, _ = self.sweep(mine, "a")
        self.assert_one_line(r, "not made by lotus-bpf sweep")
        theirs = self.path("theirs")
        os.mkdir(theirs)
        open(os.path.join(theirs, ".lotus-sweep"), "w").close()
        os.chown(theirs, 65534, 65534)
        r, _ = self.sweep(theirs, "a")
        self.assert_one_line(r, "owned by another user")
        os.symlink(mine, self.path("link"))
        r, _ = self.sweep(self.path("link"), "a")
        self.assert_one_line(r, "not a directory")
        self.assertEqual(os.listdir(mine), [])
        self.assertEqual(os.listdir(theirs), [".lotus-sweep"])

    def test_params_stay_inside_and_links_are_refused(self):
        out = self.path("out")
        r, table = self.sweep(out, "../../x/y", "a/b")
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertEqual(sorted(os.listdir(self.tmp)), ["out", "root", "table.json"])
        files = sorted(os.listdir(out))
        for name in ("tag=.._.._x_y", "tag=a_b"):
            for ext in (".txt", ".json", ".summary.json", ".html"):
                self.assertIn(name + ext, files)
            with open(os.path.join(out, name + ".txt"), "rb") as f:  # each run's text summary
                summary = f.read()
            for c in CONTROLS:
                self.assertNotIn(c, summary)
            self.assertIn(CLASS_PRINTED + " ", summary.decode())
        for c in CONTROLS:
            self.assertNotIn(c, r.stdout)  # the table's "most time per sample" is an op's name
            self.assertNotIn(c, r.stderr)
        with open(table) as f:
            self.assertEqual([run["params"]["tag"] for run in json.load(f)["runs"]], ["../../x/y", "a/b"])
        # A link planted where a run's file goes: refused before that run, in one line; its target untouched.
        victim = self.path("victim")
        with open(victim, "w") as f:
            f.write("keep me")
        for planted in ("tag=.._.._x_y.txt", "tag=.._.._x_y.html"):
            with self.subTest(planted=planted):
                os.unlink(os.path.join(out, planted))
                os.symlink(victim, os.path.join(out, planted))
                r, _ = self.sweep(out, "../../x/y", "a/b")
                self.assert_one_line(r, planted, "symbolic link")
                with open(victim) as f:
                    self.assertEqual(f.read(), "keep me")
                os.unlink(os.path.join(out, planted))
        self.assert_detached()


if __name__ == "__main__":
    unittest.main()
