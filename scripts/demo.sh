#!/usr/bin/env bash
# The main job on the bundled example: installs, builds, makes a small deterministic JPEG ImageFolder, starts
# examples/train.py (RandomResizedCrop/RandomHorizontalFlip/ToTensor/Normalize, 2 DataLoader workers, batch
# 32), attaches to it by PID once it runs with the native map and counters on, prints the summary and writes
# the trace (default lotus-trace.json) and the HTML report (default lotus-report.html). On a 2-core machine:
# the Debian packages when missing (minutes, once), about 1 minute of build (the tool only: 58 s measured; its tests are not built), a few seconds of dataset, then
# the job's 6 epochs (about 20 s, traced).
set -euo pipefail
# Root is needed (BPF, cgroups, packages): through sudo only when not root already (a machine where you are root
# may have no sudo at all).
if [ "$(id -u)" -ne 0 ]; then exec sudo -E "$0" "$@"; fi
cd "$(dirname "$0")/.."
out="${1:-lotus-trace.json}"
report="${2:-lotus-report.html}"
start=$SECONDS
bash scripts/build.sh lotus-bpf
echo "demo: lotus-bpf built in $((SECONDS - start)) s"
data="${LOTUS_DEMO_DATA:-/tmp/lotus-demo-images}"
/usr/bin/python3 examples/make_dataset.py "$data" --images 512
log=$(mktemp)
/usr/bin/python3 -u examples/train.py "$data" --epochs 6 --workers 2 --batch-size 32 > >(tee "$log") &
job=$!
trap 'kill $job 2>/dev/null || true; rm -f "$log"' EXIT
# Attach once the job runs (it prints its pid after importing torch); the tracer follows the DataLoader
# workers it forks at every epoch and stops when the job exits.
until grep -q "train.py: pid" "$log"; do sleep 0.1; done
# --native-map: which native functions (libjpeg, Pillow, libtorch) each op ran; --counters: per-op counters
# (software events on machines without a PMU).
./build/lotus-bpf --pid "$job" -o "$out" --html "$report" --native-map --counters default
wait "$job"
trap - EXIT
echo "Open $report in any browser (one file, offline): the charts."
echo "Open $out in speedscope (offline: npm install -g speedscope; speedscope $out) or https://ui.perfetto.dev (online)."
