#!/usr/bin/env bash
# Installs the Debian packages (idempotent) and builds lotus-bpf into build/: every target, or the ones named
# (scripts/build.sh lotus-bpf: the tool alone, as the demo does).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# As root (CI, the demo) objects are cached between clones in /var/cache/lotus-bpf (scripts/ccache.sh).
launcher=()
if [ "$(id -u)" -eq 0 ] && command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER="$PWD/scripts/ccache.sh")
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
if [ $# -gt 0 ]; then
  cmake --build build -j"$(nproc)" --target "$@"
else
  cmake --build build -j"$(nproc)"
fi
