#!/usr/bin/env bash
# The benchmark: builds, then measures side by side in one run (interleaved repeats, medians) and prints a
# table of ratios. Needs root (BPF). Usage: sudo bench/run.sh [--repeats N]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh >/dev/null
exec /usr/bin/python3 bench/run.py "$@"
