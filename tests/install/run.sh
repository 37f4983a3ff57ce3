#!/usr/bin/env bash
# The install: `cmake --install` into a DESTDIR puts the binary, man page, bash completion, docs and schemas in
# place; the installed binary runs; the man page renders without warnings; the completion completes; `cpack -G
# DEB` makes a package whose dependencies are Debian package names known to this system.
# Usage: tests/install/run.sh BUILD_DIR
set -euo pipefail
build="$(cd "$1" && pwd)"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
fail() { echo "install test: $*" >&2; exit 1; }

DESTDIR="$work/dest" cmake --install "$build" --prefix /usr >/dev/null
d="$work/dest/usr"
for f in bin/lotus-bpf share/man/man1/lotus-bpf.1 share/bash-completion/completions/lotus-bpf \
         share/doc/lotus-bpf/README.md share/doc/lotus-bpf/trace-format.md \
         share/lotus-bpf/schemas/summary.schema.json; do
  [ -f "$d/$f" ] || fail "missing $f"
done
[ "$("$d/bin/lotus-bpf" -V)" = "$("$build/lotus-bpf" --version)" ] || fail "-V"
"$d/bin/lotus-bpf" --help | grep -q "Exit status" || fail "--help has no exit status"

warnings=$(groff -man -ww -z "$d/share/man/man1/lotus-bpf.1" 2>&1)
[ -z "$warnings" ] || fail "man page: $warnings"
man -l "$d/share/man/man1/lotus-bpf.1" 2>/dev/null | grep -q "EXIT STATUS" || fail "man page does not render"

complete_words() { # the completion's answer for a command line whose last word is being typed
  bash -c 'source /usr/share/bash-completion/bash_completion; source "$1"; shift
           COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
           _lotus_bpf lotus-bpf "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"; echo "${COMPREPLY[*]}"' \
    _ "$d/share/bash-completion/completions/lotus-bpf" "$@"
}
[ "$(complete_words lotus-bpf rep)" = "report" ] || fail "completion of 'rep': $(complete_words lotus-bpf rep)"
[[ " $(complete_words lotus-bpf --sum) " == *" --summary-json "* ]] || fail "completion of '--sum'"
[[ " $(complete_words lotus-bpf --counters def) " == *" default "* ]] || fail "completion of --counters"

(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" >/dev/null) || fail "cpack -G DEB failed"
deb=$(ls "$work"/*.deb)
depends=$(dpkg-deb -f "$deb" Depends)
[ -n "$depends" ] || fail "the package has no dependencies"
for dep in $(echo "$depends" | tr ',' '\n' | sed 's/(.*)//; s/|.*//' ); do
  dpkg-query -W "$dep" >/dev/null 2>&1 || fail "dependency '$dep' is not a Debian package known here"
done
dpkg-deb -c "$deb" | grep -q "usr/share/man/man1/lotus-bpf.1" || fail "no man page in the package"
dpkg-deb -x "$deb" "$work/x"
"$work/x/usr/bin/lotus-bpf" -V >/dev/null || fail "the packaged binary does not run"
echo "install test: ok ($(basename "$deb"): Depends: $depends)"
