#!/usr/bin/env bash
# Installs Debian's own CPython 3.MINOR (from Debian unstable, the only Debian suite that has 3.14 and 3.15) into
# /opt/lotus-bpf/python3.MINOR for the version tests, without touching the system: the packages are unpacked
# there, with unstable's glibc (3.14+ need glibc >= 2.42; this machine has 2.36), and the interpreter's ELF loader
# path is pointed at that glibc (patchelf) so that it runs as an ordinary process whose executable is python3.MINOR.
# Debian's python3.X is a static interpreter; for the shared-libpython case, python3.X-shared is a two-line
# launcher linked against Debian's libpython3.X.so (what an --enable-shared build or an embedding program is).
# Its headers (libpython3.X-dev) are unpacked too: scripts/cpython-layouts.sh measures the layout there.
#   scripts/install-python.sh 3.15     (default 3.14; LOTUS_PY3<MINOR>_DIR, e.g. LOTUS_PY315_DIR, moves it)
# Idempotent; prints the static interpreter's path.
set -euo pipefail
ver=${1:-3.14}
[[ "$ver" =~ ^3\.[0-9]+$ ]] || { echo "install-python: give a version as 3.MINOR, not '$ver'" >&2; exit 2; }
dirvar="LOTUS_PY${ver/./}_DIR"
dest=${!dirvar:-/opt/lotus-bpf/python$ver}
exe="$dest/usr/bin/python$ver"
shared="$dest/usr/bin/python$ver-shared"
if [ -x "$exe" ] && "$exe" -c 'import multiprocessing' 2>/dev/null && "$shared" -c '' 2>/dev/null &&
   [ -f "$dest/usr/include/python$ver/internal/pycore_frame.h" ]; then
  echo "$exe"
  exit 0
fi
me="install-python $ver"
command -v patchelf >/dev/null || { echo "$me: patchelf missing (scripts/install-deps.sh)" >&2; exit 1; }
# This machine's own Debian mirror ($DEBIAN_MIRROR overrides it; scripts/debian-mirror.sh).
mirror=$(bash "$(dirname "$0")/debian-mirror.sh")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
curl -fsS --retry 3 "$mirror/dists/sid/main/binary-amd64/Packages.xz" | xz -d >"$work/Packages"
# Pool path of a package's current version in unstable.
filename() {
  awk -v p="$1" '$0 == "Package: " p {found = 1} found && /^Filename: / {print $2; exit} /^$/ {found = 0}' "$work/Packages"
}
rm -rf "$dest.new"
mkdir -p "$dest.new"
# libzstd1: 3.15's interpreter links libzstd >= 1.5.5 (bookworm has 1.5.4), 3.14's compression.zstd too.
for p in "python$ver-minimal" "libpython$ver-minimal" "libpython$ver-stdlib" "libpython$ver" "libpython$ver-dev" \
         libc6 libexpat1 libzstd1; do
  f=$(filename "$p")
  [ -n "$f" ] || { echo "$me: $p is not in Debian unstable's index" >&2; exit 1; }
  curl -fsS --retry 3 -o "$work/$p.deb" "$mirror/$f"
  dpkg-deb -x "$work/$p.deb" "$dest.new"
done
libdir='$ORIGIN/../lib/x86_64-linux-gnu'
patchelf --set-interpreter "$dest/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$libdir" \
  "$dest.new/usr/bin/python$ver"
printf 'int Py_BytesMain(int, char **);\nint main(int argc, char **argv) { return Py_BytesMain(argc, argv); }\n' \
  >"$work/launcher.c"
# --allow-shlib-undefined: libpython needs symbols of unstable's glibc, which it finds at run time
gcc -O1 -o "$dest.new/usr/bin/python$ver-shared" "$work/launcher.c" \
  "$dest.new/usr/lib/x86_64-linux-gnu/libpython$ver.so.1.0" -Wl,--allow-shlib-undefined \
  -Wl,--dynamic-linker="$dest/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" -Wl,--disable-new-dtags \
  -Wl,-rpath,"$libdir"
rm -rf "$dest"
mv "$dest.new" "$dest"
for e in "$exe" "$shared"; do
  "$e" -c "import multiprocessing, sys; assert sys.version_info[:2] == (3, ${ver#3.})"
done
echo "$exe"
