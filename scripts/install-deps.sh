#!/usr/bin/env bash
# Installs the Debian packages lotus-bpf needs to build, test and run its example. Idempotent.
set -euo pipefail
pkgs=(
  build-essential cmake pkg-config clang llvm libclang-rt-14-dev
  libbpf-dev bpftool libelf-dev zlib1g-dev libfmt-dev libcli11-dev
  libdw-dev  # --sample-unwind cfi: libdw reads the libraries' .eh_frame
  libcapstone-dev  # native probes: a function's return instructions, found by decoding it (linked statically)
  libgtest-dev nlohmann-json3-dev python3-jsonschema
  prometheus-cpp-dev  # --metrics: the registry and its HTTP exposer (civetweb)
  prometheus  # the metrics test: a real Prometheus server scrapes lotus-bpf (and promtool checks the exposition)
  bash-completion groff-base dpkg-dev  # tests of the install: completion, man page, cpack -G DEB
  tmux  # the test of `lotus-bpf top` runs it in a terminal
  python3 python3-torch python3-torchvision python3-pil python3-numpy
  libc6-dbg  # detached symbols of libc: names memcpy & co. in the native map
  libgdbm6  # a library the test of late-loaded native libraries loads with ctypes (nothing else here maps it)
  curl xz-utils patchelf  # scripts/install-python.sh (Debian unstable's CPython 3.14, 3.15 for the version tests)
  ccache  # scripts/ccache.sh: a clean clone's build reuses the objects of earlier builds on the machine
)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
