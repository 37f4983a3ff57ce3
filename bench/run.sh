#!/usr/bin/env bash
# The benchmark: builds, then measures side by side in one run (interleaved repeats, medians) and prints a
# table of ratios. Needs root (BPF). Usage: sudo bench/run.sh [--repeats N]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
# The floor rows set a bare uprobe through tracefs (not mounted by default on some machines).
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
exec /usr/bin/python3 bench/run.py "$@"
