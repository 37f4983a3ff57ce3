#!/usr/bin/env bash
# Installs the Debian packages (idempotent) and builds lotus-bpf into build/: every target, or the ones named
# (scripts/build.sh lotus-bpf: the tool alone, as the demo does).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if [ $# -gt 0 ]; then
  cmake --build build -j"$(nproc)" --target "$@"
else
  cmake --build build -j"$(nproc)"
fi
