#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test (unit and integration; the integration
# tests need root and BPF and run the real tracer on real Python processes).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
bash scripts/install-python3.14.sh >/dev/null  # Debian's CPython 3.14 for the version tests (into /opt/lotus-bpf)
cd build
ctest --output-on-failure "$@"
