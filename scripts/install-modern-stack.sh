#!/usr/bin/env bash
# Builds (once) and caches a Debian unstable root with the PyTorch stack users run today: CPython 3.14,
# torch 2.x, torchvision with transforms v2, Pillow. The integration tests run their pipelines there through
# chroot (tests/integration/modern.py). Kept between runs at $LOTUS_MODERN_ROOT (default
# /var/cache/lotus-bpf/sid-root); rebuilt only when missing or incomplete. Prints the root's path.
#   --check   only say whether the root is ready (exit 0) or not (exit 1)
set -euo pipefail
root=${LOTUS_MODERN_ROOT:-/var/cache/lotus-bpf/sid-root}
# This machine's own Debian mirror ($DEBIAN_MIRROR overrides it; scripts/debian-mirror.sh).
mirror=$(bash "$(dirname "$0")/debian-mirror.sh")
stamp="$root/.lotus-ready"

ready() {
    [ -f "$stamp" ] && [ -x "$root/usr/bin/python3" ]
}
if [ "${1:-}" = "--check" ]; then
    ready
    exit
fi
if ready; then
    echo "$root"
    exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "install-modern-stack: needs root (debootstrap, chroot)" >&2; exit 1; }
if ! command -v debootstrap >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; }
fi

new="$root.new"
# A mount left by an interrupted build would make rm -rf descend into the host's /proc.
umount -l "$new/proc" 2>/dev/null || true
rm -rf --one-file-system "$new"
mkdir -p "$(dirname "$root")"
echo "install-modern-stack: debootstrap Debian unstable into $new (about 5 minutes, 1.5 GB)" >&2
debootstrap --variant=minbase sid "$new" "$mirror" >"$new.log" 2>&1 ||
    { tail -20 "$new.log" >&2; echo "install-modern-stack: debootstrap failed (log: $new.log)" >&2; exit 1; }
# The mirror's Release files can be older than this machine's clock.
chroot "$new" apt-get -o Acquire::Check-Valid-Until=false -qq update >>"$new.log" 2>&1
DEBIAN_FRONTEND=noninteractive chroot "$new" apt-get -o Acquire::Check-Valid-Until=false install -y -qq \
    --no-install-recommends python3-torchvision python3-torch python3-pil python3-numpy >>"$new.log" 2>&1 ||
    { tail -20 "$new.log" >&2; echo "install-modern-stack: apt-get install in the root failed (log: $new.log)" >&2; exit 1; }
chroot "$new" apt-get clean
# torch looks at /proc when imported; a private mount namespace keeps the mount from outliving the check.
versions=$(unshare --mount --propagation private sh -c 'mount -t proc proc "$1/proc" && exec chroot "$1" python3 -c "
import sys, torch, torchvision, PIL
from torchvision.transforms import v2
print(sys.version.split()[0], torch.__version__, torchvision.__version__, PIL.__version__)"' sh "$new" 2>/dev/null | tail -n 1)
echo "$versions" >"$new/.lotus-ready"
rm -rf --one-file-system "$root"
mv "$new" "$root"
rm -f "$new.log"
echo "install-modern-stack: python, torch, torchvision, Pillow: $versions" >&2
echo "$root"
