#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test (unit and integration; the integration
# tests need root and BPF and run the real tracer on real Python processes).
set -euo pipefail
# Root is needed (BPF, cgroups, packages): through sudo only when not root already (a machine where you are root
# may have no sudo at all).
if [ "$(id -u)" -ne 0 ]; then exec sudo -E "$0" "$@"; fi
cd "$(dirname "$0")/.."
bash scripts/build.sh
# Debian's CPython 3.14 and 3.15 for the version tests (into /opt/lotus-bpf). If Debian unstable cannot be
# reached, the other tests still run and those versions' fail, saying so.
for v in 3.14 3.15; do
  bash scripts/install-python.sh "$v" >/dev/null ||
    echo "test.sh: Debian's CPython $v could not be installed (scripts/install-python.sh $v): its tests will fail" >&2
done
# The stack users run today (Debian unstable's CPython 3.14, torch 2.x, torchvision with transforms v2), built once
# into /var/cache/lotus-bpf/sid-root (about 1.5 minutes and 1.5 GB) and kept for later runs.
bash scripts/install-modern-stack.sh >/dev/null ||
  echo "test.sh: the modern stack could not be built (scripts/install-modern-stack.sh): its tests will fail" >&2
# Debian's Chromium and, from npm, speedscope and playwright-core for the browser test (kept in
# /var/cache/lotus-bpf/browser-test).
bash scripts/install-browser-test.sh >/dev/null ||
  echo "test.sh: the browser test's Chromium or npm packages could not be installed: its test will fail" >&2
# The kernel matrix's VM: a bookworm root with Debian's torch and Debian's 5.10, 6.1 and 6.12 kernels, built once
# into /var/cache/lotus-bpf/vm (about 7 minutes and 2 GB) and kept for later runs.
bash scripts/kernel-vm.sh prepare >/dev/null ||
  echo "test.sh: the kernel matrix's VM could not be built (scripts/kernel-vm.sh prepare): kernels.matrix will fail" >&2
cd build
ctest --output-on-failure "$@"
