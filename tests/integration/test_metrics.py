"""--metrics: a real Prometheus server (Debian's) scrapes lotus-bpf while it traces the example; what Prometheus
stores equals the run's summary and the job's own log, promtool finds the exposition clean, and the labels stay
bounded."""
import json
import os
import socket
import subprocess
import time
import urllib.parse
import urllib.request

from harness import (BpfTestCase, EXAMPLE, LOTUS, PY, dataset, free_port, read_lines, run_lotus, start_lotus,
                     wait_for_attach)

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def listening_inode(port):
    """The inode of the socket listening on 127.0.0.1:port (/proc/net/tcp), or None."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":
                return fields[9]
    return None


class PrometheusServer:
    """Debian's prometheus on 127.0.0.1, scraping one target every second, its data in a directory of the test."""

    def __init__(self, tmp, target):
        self.port = free_port()
        self.dir = os.path.join(tmp, "prometheus")
        os.makedirs(self.dir)
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: lotus\n    static_configs:\n"
                    f"      - targets: ['{target}']\n")
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={self.dir}/data",
                                      f"--web.listen-address=127.0.0.1:{self.port}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def query(self, expr):
        """The instant vector of expr now: [(labels, value)]."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        body = json.loads(http_get(url))
        assert body["status"] == "success", body
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def scalar(self, expr):
        r = self.query(expr)
        return r[0][1] if r else None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class MetricsTest(BpfTestCase):
    def test_prometheus_scrapes_what_the_summary_says(self):
        data = dataset(128)
        port = free_port()
        prom = PrometheusServer(self.tmp, f"127.0.0.1:{port}")
        try:
            self.scrape_the_example(prom, data, port)
        finally:
            prom.stop()

    def scrape_the_example(self, prom, data, port):
        linger, log, summary = self.path("linger"), self.path("batches.log"), self.path("summary.json")
        sig_ign = self.path("sigign")
        # The job starts through sh, whose SIGPIPE disposition it records: the endpoint's HTTP library ignores
        # SIGPIPE in lotus-bpf, and the launched job must not inherit that.
        job = (f"grep SigIgn /proc/self/status > {sig_ign}; exec {PY} {EXAMPLE} {data} --epochs 2 --workers 2 "
               f"--log {log} --linger {linger}")
        lotus = start_lotus(["-q", "--metrics", f"127.0.0.1:{port}", "--node", "node-a", "--summary-json", summary,
                             "-o", self.path("t.json"), "--", "sh", "-c", job])
        try:
            wait_for_attach(lotus)
            self.assertIn(f"metrics at http://127.0.0.1:{port}/metrics", lotus.stderr.readline())
            while "lingering" not in (line := lotus.stdout.readline()):
                self.assertTrue(line, "the job ended before its last epoch was done")
            paused_at = time.time()
            # Counters are still now: wait for scrapes taken well after the pause (the tracer reads its ring
            # buffer at least once a second).
            deadline = time.time() + 60
            while True:
                at = prom.scalar('max(timestamp(lotus_samples_total{job="lotus"}))')
                if at is not None and at > paused_at + 2.5:
                    break
                self.assertLess(time.time(), deadline, f"Prometheus did not scrape lotus-bpf in time: {at}")
                time.sleep(0.5)
            scraped = {
                "samples": prom.scalar("sum(lotus_samples_total)"),
                "ToTensor": prom.scalar('sum(lotus_op_duration_seconds_count{op="ToTensor"})'),
                "crop_s": prom.scalar('sum(lotus_op_duration_seconds_sum{op="RandomResizedCrop"})'),
                "consumed": prom.scalar("sum(lotus_batches_consumed_total)"),
                "waits": prom.scalar("sum(lotus_wait_duration_seconds_count)"),
                "prepared": prom.scalar("sum(lotus_batch_preparation_duration_seconds_count)"),
                "loads": prom.scalar("sum(lotus_load_duration_seconds_count)"),
                "lost": prom.scalar("sum(lotus_events_lost_total)"),
                "wait_ratio": prom.scalar("lotus_wait_ratio"),
                "grade": prom.scalar("lotus_input_bound_grade"),
            }
            worker_cpu = prom.query('lotus_cpu_seconds_total{role="worker"}')
            info = prom.query("lotus_job_info")
            with_pid = prom.query('count by (__name__) ({__name__=~"lotus_.+", pid!=""})')
            values = prom.query('{__name__=~"lotus_.+"}')
            exposition = http_get(f"http://127.0.0.1:{port}/metrics")
            # The listening socket is lotus-bpf's alone: the job did not inherit it.
            inode = listening_inode(port)
            self.assertIsNotNone(inode)
            job_pid = int(info[0][0]["pid"])
            job_sockets = {os.readlink(f"/proc/{job_pid}/fd/{fd}") for fd in os.listdir(f"/proc/{job_pid}/fd")}
            self.assertNotIn(f"socket:[{inode}]", job_sockets)
        finally:
            open(linger, "w").close()
        out, err = lotus.communicate(timeout=120)
        self.assertEqual(lotus.returncode, 0, err)
        self.assert_detached()
        with open(summary) as f:
            s = json.load(f)
        consumed = len(read_lines(log))  # the job's own count
        self.assertEqual(consumed, 8)
        # What Prometheus holds is the summary's figures, and the job's.
        self.assertEqual(scraped["samples"], s["throughput"]["samples"])
        self.assertEqual(scraped["samples"], 256)
        self.assertEqual(scraped["ToTensor"], s["ops"]["ToTensor"]["count"])
        self.assertAlmostEqual(scraped["crop_s"] * 1e3, s["ops"]["RandomResizedCrop"]["total_ms"], delta=0.01)
        self.assertEqual(scraped["consumed"], consumed)
        self.assertEqual(scraped["waits"], s["batches"]["wait"]["count"])
        self.assertEqual(scraped["prepared"], s["batches"]["prepare"]["count"])
        self.assertEqual(scraped["loads"], 256)
        self.assertEqual(scraped["lost"], 0)
        # The loop's waiting share and graded verdict: the summary's (its last next() was before the pause).
        self.assertAlmostEqual(scraped["wait_ratio"], s["batches"]["waiting_share"], delta=0.00005)
        self.assertEqual(scraped["grade"], {"not": 0, "moderately": 1, "highly": 2}[s["batches"]["input_bound_grade"]])
        # Per-role CPU: both workers' ids, each with time; the info series names the node, job and version.
        self.assertEqual(sorted(m["worker"] for m, v in worker_cpu if v > 0), ["0", "1"], worker_cpu)
        self.assertEqual(len(info), 1, info)
        self.assertEqual(info[0][0]["node"], "node-a")
        self.assertEqual(info[0][0]["python"], s["run"]["python"])
        self.assertTrue(info[0][0]["version"])
        # Bounded labels: a pid only in the info series, no path, no batch or sample id.
        self.assertEqual([m["__name__"] for m, v in with_pid], ["lotus_job_info"])
        for m, v in values:
            for k, label in m.items():
                self.assertNotIn("/", label, m)
                self.assertNotIn(k, ("batch", "sample", "path", "tid"), m)
        # promtool lints the exposition lotus-bpf served (names, units, _total on counters, HELP on each family).
        lint = subprocess.run([PROMTOOL, "check", "metrics"], input=exposition, capture_output=True, text=True)
        self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        self.assertEqual(lint.stdout + lint.stderr, "", lint.stdout + lint.stderr)
        # The job started with SIGPIPE as lotus-bpf was given it (SIGPIPE is bit 13 of SigIgn).
        with open(sig_ign) as f:
            mask = int(f.read().split()[1], 16)
        self.assertEqual(mask & (1 << 12), 0, f"the launched job inherited an ignored SIGPIPE: {mask:#x}")
        # Nothing listens there any more (the job did not keep the socket either).
        self.assertIsNone(listening_inode(port))

    def test_record_of_an_attached_job_serves_metrics_and_replays_to_the_same_figures(self):
        data = dataset(64)
        port, linger, steps = free_port(), self.path("linger"), self.tmp
        job = subprocess.Popen([PY, EXAMPLE, data, "--epochs", "1", "--workers", "2", "--steps", steps,
                                "--linger", linger], stdout=subprocess.PIPE, text=True)
        try:
            self.assertIn("images", job.stdout.readline())  # (it waits for go-0 before its first iterator)
            record = self.path("run.lbt")
            lotus = start_lotus(["record", "-q", "--metrics", f":{port}", "-o", record, "--pid", str(job.pid)])
            wait_for_attach(lotus)
            open(os.path.join(steps, "go-0"), "w").close()
            while "lingering" not in (line := job.stdout.readline()):
                self.assertTrue(line, "the job ended before its epoch was done")
            time.sleep(2.5)
            text = http_get(f"http://127.0.0.1:{port}/metrics")
        finally:
            open(linger, "w").close()
            job.wait(timeout=60)
            job.stdout.close()
        lotus.communicate(timeout=60)
        self.assertEqual(lotus.returncode, 0)
        samples = sum(float(l.split()[-1]) for l in text.splitlines() if l.startswith("lotus_samples_total{"))
        r = run_lotus(["report", record, "--summary-json", self.path("s.json")])
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("s.json")) as f:
            s = json.load(f)
        self.assertEqual(samples, s["throughput"]["samples"])
        self.assertEqual(samples, 64)

    def test_a_port_in_use_is_one_line_and_nothing_starts(self):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            started = self.path("started")
            r = run_lotus(["--metrics", f"127.0.0.1:{port}", "-o", self.path("t.json"), "--", PY, "-c",
                           f"open('{started}', 'w')"], timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertIn(f"--metrics 127.0.0.1:{port}", r.stderr)
        self.assertIn("in use", r.stderr)
        self.assertFalse(os.path.exists(started), "the command ran although lotus-bpf could not serve its metrics")
        self.assertEqual(os.listdir(self.tmp), [], "an output was left")
        self.assert_detached()

    def test_a_malformed_address_is_a_usage_error(self):
        for bad in ["9464", "example.com:9464", "127.0.0.1:65536"]:
            r = run_lotus(["--metrics", bad, "--", PY, "-c", "pass"])
            self.assertEqual(r.returncode, 2, (bad, r.stderr))
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
            self.assertIn("--metrics", r.stderr)
