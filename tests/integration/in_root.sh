#!/bin/sh
# in_root.sh ROOT COMMAND...: runs COMMAND chrooted into ROOT (the Debian unstable root of
# scripts/install-modern-stack.sh), with /proc, /dev (and /dev/shm, which DataLoader workers share tensors
# through), /tmp and this source tree mounted at the same paths as outside. The mounts live in a private mount
# namespace: they vanish with the command, whatever way it ends.
set -e
root=$1
shift
src=$(cd "$(dirname "$0")/../.." && pwd)
exec unshare --mount --propagation private sh -c '
  root=$1 src=$2; shift 2
  mount -t proc proc "$root/proc"
  mount --rbind /dev "$root/dev"
  mount --bind /tmp "$root/tmp"
  mkdir -p "$root$src"
  mount --bind "$src" "$root$src"
  cd "$root$src"
  exec chroot "$root" "$@"' sh "$root" "$src" "$@"
