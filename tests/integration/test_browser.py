"""The trace in a real browser, offline: the bundled example traced with the native map and counters, loaded into
speedscope's web app (npm) in Debian's headless Chromium (tests/browser/speedscope_import.js). speedscope warns
for every span end that does not match the innermost open span, so no warning means every span nests or touches
as recorded; one profile per traced thread, named after its process. A screenshot of a worker's timeline is kept
in the build's test-artefacts directory."""
import json
import os
import re
import shutil
import subprocess
import html as htmllib
from collections import defaultdict

from harness import EXAMPLE, PY, SOURCE, BpfTestCase, assert_nested, dataset, load_trace, run_lotus, spans

MODULES = os.environ.get("LOTUS_BROWSER_TEST_DIR", "/var/cache/lotus-bpf/browser-test")
ARTEFACTS = os.environ.get("LOTUS_TEST_ARTEFACTS", os.path.join(SOURCE, "build", "test-artefacts"))
IMPORT = os.path.join(SOURCE, "tests", "browser", "speedscope_import.js")
RENDER = os.path.join(SOURCE, "tests", "browser", "html_report.js")
CHARTS = ["op-durations", "wait-histogram", "delay-histogram", "samples-per-second", "busy-over-time", "cpu-over-time",
          "memory-over-time", "usage", "worker-memory", "native-map", "counters"]


def speedscope(test, trace_path, screenshot, title=None, sandwich=False, left_heavy=False):
    """What speedscope said importing the file: warnings (its own; Chromium's GL driver notes left out), errors,
    network requests, profile count and names. title: what the page is titled once imported (default: the file's
    name). sandwich, left_heavy: also what those views show per profile (speedscope_import.js)."""
    r = subprocess.run(["node", IMPORT, MODULES, trace_path, screenshot] + ([title] if title else []) +
                       (["sandwich"] if sandwich else []) + (["leftheavy"] if left_heavy else []),
                       capture_output=True, text=True, timeout=600)  # (Left Heavy: a hover per step, ~50 ms each)
    test.assertEqual(r.returncode, 0, r.stderr)
    out = json.loads(r.stdout)
    out["warnings"] = [w for w in out["warnings"] if "GL Driver Message" not in w]
    return out


def html_text(s):
    return htmllib.escape(s, quote=True).replace("&#x27;", "&#39;")


def render(test, html_path, screenshot):
    """What Chromium drew of the HTML report: errors, requests, and per chart what it holds (html_report.js)."""
    r = subprocess.run(["node", RENDER, MODULES, html_path, screenshot], capture_output=True, text=True, timeout=300)
    test.assertEqual(r.returncode, 0, r.stderr)
    return json.loads(r.stdout)


def assert_report_renders(test, html_path, screenshot, ops):
    with open(html_path, encoding="utf-8") as f:
        text = f.read()
    test.assertNotIn("http://", text)
    test.assertNotIn("https://", text)
    seen = render(test, html_path, screenshot)
    test.assertEqual(seen["errors"], [])
    test.assertEqual(seen["requests"], [], "the report fetched something")
    test.assertEqual(sorted(seen["charts"]), sorted(CHARTS))
    for name, charts in seen["charts"].items():
        for c in charts:
            test.assertIsNone(c["absent"], name)
            test.assertGreater(c["width"], 300, name)
            test.assertGreater(c["height"], 60, name)
            if name == "counters":
                test.assertEqual(c["rows"], len(ops) + 2)  # header, each op, the whole pipeline
            elif name == "usage":
                test.assertEqual(c["rows"], 1 + 3 + 1)  # header; main, worker 0, worker 1; the job
            elif name == "worker-memory":
                test.assertGreaterEqual(c["rows"], 1 + 2)  # header; each worker process
            else:
                test.assertTrue(c["svg"], name)
                test.assertGreater(c["shapes"], 3, name)
    # the box plots (whisker, box, median, mean): one per op, the loader, the collation and the whole pipeline
    test.assertGreaterEqual(seen["charts"]["op-durations"][0]["shapes"], 4 * (len(ops) + 3))
    test.assertGreater(os.path.getsize(screenshot), 50000)
    return text


def strictly_nested(trace):
    """Spans of each thread that overlap without one containing the other, in whole µs as written."""
    per_thread = defaultdict(list)
    for i, s in enumerate(spans(trace)):
        per_thread[(s["pid"], s["tid"])].append((s["ts"], -s["dur"], i, s))
    bad = []
    for events in per_thread.values():
        events.sort()
        stack = []
        for ts, _, _, s in events:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= ts:
                stack.pop()
            if stack and ts + s["dur"] > stack[-1]["ts"] + stack[-1]["dur"]:
                bad.append((stack[-1]["name"], s["name"], ts))
            stack.append(s)
    return bad


class Browser(BpfTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not os.path.exists(os.path.join(MODULES, "node_modules", "speedscope", "dist", "release", "index.html")):
            raise AssertionError(f"speedscope is not installed in {MODULES}: scripts/install-browser-test.sh "
                                 "(scripts/test.sh runs it)")
        if not shutil.which("node") or not os.access("/usr/bin/chromium", os.X_OK):
            raise AssertionError("node or Debian's chromium missing: scripts/install-browser-test.sh")

    def test_example_trace_imports_into_speedscope_with_no_warning(self):
        data = dataset(128)
        out, flame, summary = self.path("lotus-trace.json"), self.path("flame.speedscope.json"), self.path("s.json")
        r = run_lotus(["-q", "-o", out, "--speedscope", flame, "--summary-json", summary, "--native-map", "--counters",
                       "default", "--", PY, EXAMPLE, data, "--epochs", "2", "--workers", "2"])
        self.assertEqual(r.returncode, 0, r.stderr)
        trace = load_trace(out)
        self.check_speedscope_file(flame, summary, {s["name"] for s in spans(trace, "native")})
        self.assertEqual(trace["otherData"]["lost_events"], 0)
        for e in trace["traceEvents"]:
            for k in ("ts", "dur"):
                if k in e:
                    self.assertIsInstance(e[k], int, e)  # whole µs: no float sums that overlap
        assert_nested(self, trace)
        self.assertEqual(strictly_nested(trace), [])
        # stable names: the ids are in args
        self.assertEqual({s["name"] for s in spans(trace, "batch")}, {"batch"})
        self.assertEqual({s["name"] for s in spans(trace, "wait")}, {"wait"})

        os.makedirs(ARTEFACTS, exist_ok=True)
        shot = os.path.join(ARTEFACTS, "speedscope-worker.png")
        seen = speedscope(self, out, shot)
        self.assertEqual(seen["requests"], [], "speedscope fetched from the network")
        self.assertEqual(seen["errors"], [])
        self.assertEqual(seen["warnings"], [], f"{len(seen['warnings'])} import warnings")
        # one profile per thread with spans, named after its process; no empty track
        threads = {(s["pid"], s["tid"]) for s in spans(trace)}
        self.assertEqual(seen["profiles"], len(threads))
        pnames = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
                  if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(set(pnames), {pid for pid, _ in threads} | {e["pid"] for e in trace["traceEvents"]
                                                                     if e.get("cat") == "process"})
        for pid, tid in threads:
            named = [n for n in seen["names"] if n.startswith(f"{pnames[pid]} (pid {pid}), ") and f"(tid {tid})" in n]
            self.assertEqual(len(named), 1, (pid, tid, seen["names"]))
        self.assertTrue(any(n.startswith("worker 0 ") for n in seen["names"]), seen["names"])
        self.assertGreater(os.path.getsize(shot), 10000)

    def check_speedscope_file(self, flame, summary_path, native_names):
        """The speedscope file (--speedscope) imports with no warning, one profile per role (a worker id merges
        the processes that played it), and its root frames' totals are the summary's per-op totals: what Left
        Heavy shows."""
        seen = speedscope(self, flame, self.path("flame.png"), "lotus-bpf: the pipeline's spans per role", sandwich=True,
                          left_heavy=True)
        self.assertEqual(seen["requests"], [])
        self.assertEqual(seen["errors"], [])
        self.assertEqual(seen["warnings"], [], f"{len(seen['warnings'])} import warnings")
        # (a process's other threads, such as a queue's feeder thread, where they ran a native function: a
        # profile of their own, their spans overlapping the main thread's)
        self.assertEqual(sorted(n for n in seen["names"] if not n.endswith(", other threads")),
                         ["main", "worker 0", "worker 1"])
        with open(flame) as f:
            doc = json.load(f)
        with open(summary_path) as f:
            ops = json.load(f)["ops"]
        self.assertNotIn("left out", doc["name"])
        frames = [f["name"] for f in doc["shared"]["frames"]]
        totals, natives = defaultdict(int), set()
        for p in doc["profiles"]:
            stack = []
            for e in p["events"]:
                if e["type"] == "O":
                    stack.append((e["frame"], e["at"]))
                    continue
                frame, at = stack.pop()
                self.assertEqual(frame, e["frame"])
                if stack:
                    natives.add(frames[frame])
                else:
                    totals[frames[frame]] += e["at"] - at
            self.assertEqual(stack, [])
        self.assertNotIn("sample", totals)  # samples and batches are not frames
        self.assertNotIn("batch", totals)
        for op, st in ops.items():
            if op != "sample":
                self.assertAlmostEqual(totals.pop(op) / 1e6, st["total_ms"], delta=0.001, msg=op)
        # What speedscope itself shows, over the roles, is the summary's per-op totals (to its printed precision:
        # 2 decimals per role): its Sandwich view's totals per frame, and the totals of the Left Heavy flame
        # graph's top frames (the ops are root frames: a frame of each there, merged).
        unit = {"ns": 1e-6, "µs": 1e-3, "ms": 1.0, "s": 1e3}
        for view, per_role in (("Sandwich", seen["sandwich"]), ("Left Heavy", seen["leftHeavy"])):
            self.assertEqual(sorted(per_role), sorted(seen["names"]), view)
            shown = defaultdict(float)
            for role, rows in per_role.items():
                for name, total, *_ in rows:
                    m = re.match(r"([0-9.]+)(ns|µs|ms|s)\b", total)
                    self.assertIsNotNone(m, (view, role, name, total))
                    shown[name] += float(m.group(1)) * unit[m.group(2)]
            for op, st in ops.items():
                if op != "sample":
                    self.assertAlmostEqual(shown[op], st["total_ms"], delta=max(0.011 * len(per_role),
                                                                                st["total_ms"] * 0.005),
                                           msg=f"{view}: {op} {dict(shown)}")
        # the top row holds the root frames only: no native function called inside an op is there
        top = {name for rows in seen["leftHeavy"].values() for name, _ in rows}
        self.assertLessEqual(top, set(totals) | (set(ops) - {"sample"}), top)
        # left: the training loop's waits, and native calls outside any op (the training loop's own torch calls)
        self.assertIn("wait", totals)
        self.assertLessEqual(set(totals) - {"wait"}, native_names)
        self.assertIn("ImagingJpegDecode", natives)  # native functions inside the ops and loaders

    def test_html_report_renders_every_chart_offline(self):
        images, epochs, workers = 128, 2, 2
        data = dataset(images)
        html, js, rec = self.path("report.html"), self.path("summary.json"), self.path("run.lbt")
        r = run_lotus(["-q", "-o", self.path("t.json"), "--html", html, "--summary-json", js, "--record", rec, "--native-map",
                       "--counters", "default", "--", PY, EXAMPLE, data, "--epochs", str(epochs), "--workers",
                       str(workers)])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(js) as f:
            summary = json.load(f)
        ops = [op for op in summary["ops"] if op not in ("loader", "collate", "sample")]
        self.assertEqual(summary["ops"]["sample"]["count"], images * epochs)
        os.makedirs(ARTEFACTS, exist_ok=True)
        text = assert_report_renders(self, html, os.path.join(ARTEFACTS, "html-report.png"), ops)
        # each box plot's figures are the summary's
        for op, st in summary["ops"].items():
            label = "sample (whole pipeline)" if op == "sample" else op
            self.assertIn(f"{label}: {st['count']} calls; min ", text)
        self.assertIn(html_text(summary["batches"]["verdict"]), text)
        waits = summary["batches"]["wait"]["count"]
        self.assertEqual(waits, images * epochs // 32)
        self.assertIn(f"of {waits} (", text)  # the wait histogram's bars
        # the same report from the record file, without root
        again = self.path("again.html")
        r = run_lotus(["report", rec, "--html", again])
        self.assertEqual(r.returncode, 0, r.stderr)
        replayed = assert_report_renders(self, again, self.path("again.png"), ops)
        body = lambda t: t[t.index('<h2 id="verdict">'):t.index('<h2 id="notes">')]
        self.assertEqual(body(replayed), body(text))

    def test_the_check_sees_spans_that_overlap(self):
        # What the traces of earlier versions did: fractional µs where a loader ends exactly where its sample
        # begins reads as overlapping once ts + dur is added in floating point.
        bad = {"traceEvents": [
            {"ph": "X", "cat": "loader", "name": "loader", "pid": 1, "tid": 1, "ts": 152584.079, "dur": 0.1},
            {"ph": "X", "cat": "sample", "name": "sample", "pid": 1, "tid": 1, "ts": 152584.179, "dur": 10.0},
            {"ph": "X", "cat": "op", "name": "ToTensor", "pid": 1, "tid": 1, "ts": 152580.0, "dur": 8.0},
        ]}
        path = self.path("overlap.json")
        with open(path, "w") as f:
            json.dump(bad, f)
        seen = speedscope(self, path, self.path("overlap.png"))
        self.assertGreater(len(seen["warnings"]), 0, seen)
        self.assertNotEqual(strictly_nested(bad), [])
