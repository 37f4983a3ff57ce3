"""--record / --replay: the raw event stream written during tracing reconstructs offline, identically; corrupt
or truncated record files give one line and a non-zero exit, never a crash."""
import json
import os
import random
import subprocess
import unittest

from harness import PY, WORKLOAD, BpfTestCase, dataset, load_trace, run_lotus, spans


def events(trace):
    return sorted(json.dumps(e, sort_keys=True) for e in trace["traceEvents"])


class RecordReplay(BpfTestCase):
    def test_replay_reproduces_the_live_trace(self):
        live, rec, replayed = self.path("live.json"), self.path("run.lbt"), self.path("replay.json")
        r = run_lotus(["-q", "-o", live, "--record", rec, "--", PY, WORKLOAD, dataset(64), "--workers", "2"])
        self.assertEqual(r.returncode, 0, r.stderr)
        # replay needs no BPF and no target: run it as an unprivileged user
        os.chmod(self.tmp, 0o777)
        os.chmod(rec, 0o644)
        r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", os.environ.get("LOTUS_BPF"),
                            "-o", replayed, "--replay", rec], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        a, b = load_trace(live), load_trace(replayed)
        self.assertEqual(len(spans(b, "sample")), 64)
        self.assertEqual(events(a), events(b))
        for key in ("events", "lost_events", "samples", "python", "interpreter"):
            self.assertEqual(a["otherData"][key], b["otherData"][key], key)
        self.assertIn("RandomResizedCrop", r.stdout)

    def test_record_export_report_subcommands(self):
        # perf-style: record writes only the event stream (with the rules it ran with); export and report
        # reconstruct it without them being repeated.
        rec, out, summ = self.path("run.lbt"), self.path("t.json.gz"), self.path("s.json")
        pure = os.path.join(os.path.dirname(WORKLOAD), "pure_pipeline.py")
        r = run_lotus(["record", "-q", "-o", rec, "--pipeline", "Pipeline", "--", PY, pure, "40"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertIn(f"to {rec}", r.stderr)
        self.assertTrue(os.path.getsize(rec) > 0)
        r = run_lotus(["export", rec, "-o", out, "--summary-json", summ])
        self.assertEqual(r.returncode, 0, r.stderr)
        trace = load_trace(out)
        self.assertEqual(len(spans(trace, "sample")), 80)  # 40 in the main process, 40 in the workers
        self.assertEqual(trace["otherData"]["stop_reason"], f"replayed {rec}")  # whole: it has its end record
        with open(summ) as f:
            self.assertEqual(json.load(f)["ops"]["Scale"]["count"], 80)
        r = run_lotus(["report", rec])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"Scale\s+80\s")
        for bad in (["export", self.path("missing.lbt")], ["report", out], ["record", "-o", rec]):
            r = run_lotus(bad)
            self.assertNotEqual(r.returncode, 0, bad)
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)

    def test_corrupt_and_truncated_files(self):
        rec = self.path("run.lbt")
        r = run_lotus(["-q", "-o", self.path("l.json"), "--record", rec, "--pipeline", "Pipeline", "--", PY,
                       os.path.join(os.path.dirname(WORKLOAD), "pure_pipeline.py"), "50"])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(rec, "rb") as f:
            good = f.read()
        rng = random.Random(7)
        bad = self.path("bad.lbt")
        # the intact file, cuts, then random damage (inside a block deflate's checksum catches it; in the
        # header's metadata it may pass)
        cases = [good] + [good[:n] for n in (0, 5, 27, 40, len(good) // 2, len(good) - 3)]
        for _ in range(150):
            b = bytearray(good)
            for _ in range(rng.randint(1, 20)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            cases.append(bytes(b))
        outcomes = set()
        for data in cases:
            with open(bad, "wb") as f:
                f.write(data)
            r = run_lotus(["-q", "-o", self.path("out.json"), "--replay", bad], timeout=60)
            self.assertIn(r.returncode, (0, 1), f"crashed: rc={r.returncode} stderr={r.stderr[-300:]}")
            if r.returncode:
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertFalse(os.path.exists(self.path("out.json")), "half-written trace left behind")
            else:
                load_trace(self.path("out.json"))  # a replay that succeeds writes valid JSON
                os.unlink(self.path("out.json"))
            outcomes.add(r.returncode)
        self.assertEqual(outcomes, {0, 1})


if __name__ == "__main__":
    unittest.main()
