#!/usr/bin/env bash
# Prints the Debian mirror this machine's apt uses (e.g. http://deb.debian.org/debian), for the install scripts
# that fetch from Debian unstable (install-modern-stack.sh, install-python.sh), so that a machine behind its
# own mirror gets that mirror. In order:
#   1. $DEBIAN_MIRROR, when set (the override);
#   2. the first http(s) URI of a deb822 stanza in /etc/apt/sources.list.d/*.sources (and
#      /etc/apt/sources.list.d/debian.sources) whose Types has deb, that is not Enabled: no, and whose Suites are
#      Debian's (a Debian codename or stable/testing/unstable, with -updates or -backports; not -security);
#   3. the first `deb URL SUITE` line of /etc/apt/sources.list (or a one-line sources.list.d/*.list) with such
#      a suite;
#   4. http://deb.debian.org/debian, also when the one found has no unstable (dists/sid/Release).
# A stanza or line counts only with the main component.
# $LOTUS_APT_ETC names another apt directory (default /etc/apt), for tests.
set -euo pipefail
if [ -n "${DEBIAN_MIRROR:-}" ]; then
    echo "${DEBIAN_MIRROR%/}"
    exit 0
fi
etc=${LOTUS_APT_ETC:-/etc/apt}
# Debian's suite names: the release codenames and the archive's aliases. A suite counts when its name, less
# -updates, -backports or -proposed-updates, is one of them; -security suites live on another archive.
suites='^(buzz|rex|bo|hamm|slink|potato|woody|sarge|etch|lenny|squeeze|wheezy|jessie|stretch|buster|bullseye|bookworm|trixie|forky|duke|sid|oldoldstable|oldstable|stable|testing|unstable|experimental)(-updates|-backports|-backports-sloppy|-proposed-updates)?$'

found=
shopt -s nullglob
# debian.sources first: a third-party repository (Docker's, Chrome's) may name a Debian suite too.
sources=()
[ -r "$etc/sources.list.d/debian.sources" ] && sources+=("$etc/sources.list.d/debian.sources")
for f in "$etc"/sources.list.d/*.sources; do
    [ -r "$f" ] && [ "$f" != "$etc/sources.list.d/debian.sources" ] && sources+=("$f")
done
if [ ${#sources[@]} -gt 0 ]; then
    found=$(awk -v suites="$suites" '
        function flush() {
            if (!done && types ~ /(^|[ \t])deb([ \t]|$)/ && tolower(enabled) !~ /^(no|false|off|0)$/ && uri != "" &&
                debian && main)
                { print uri; done = 1 }
            types = ""; uri = ""; enabled = ""; debian = 0; main = 0
        }
        FNR == 1 { flush() }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        {
            line = $0
            field = tolower(line); sub(/:.*/, "", field)
            value = line; sub(/^[^:]*:[ \t]*/, "", value)
            n = split(value, words, /[ \t]+/)
            if (field == "types") types = value
            else if (field == "enabled") enabled = value
            else if (field == "uris") {
                for (i = 1; i <= n; i++) if (uri == "" && words[i] ~ /^https?:\/\//) uri = words[i]
            } else if (field == "suites") {
                for (i = 1; i <= n; i++) if (words[i] ~ suites) debian = 1
            } else if (field == "components") {
                for (i = 1; i <= n; i++) if (words[i] == "main") main = 1
            }
        }
        END { flush() }
    ' "${sources[@]}" || true)
fi
if [ -z "$found" ]; then
    lists=()
    [ -r "$etc/sources.list" ] && lists+=("$etc/sources.list")
    for f in "$etc"/sources.list.d/*.list; do
        [ -r "$f" ] && lists+=("$f")
    done
    if [ ${#lists[@]} -gt 0 ]; then
        found=$(awk -v suites="$suites" '
            $1 == "deb" && !done {
                i = 2
                # Options: [arch=amd64 signed-by=...], possibly over several words.
                if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                main = 0
                for (j = i + 2; j <= NF; j++) if ($j == "main") main = 1
                if ($i ~ /^https?:\/\// && $(i + 1) ~ suites && main) { print $i; done = 1 }
            }
        ' "${lists[@]}" || true)
    fi
fi
found=${found%/}
# A mirror that carries no unstable (a local mirror of stable only) cannot serve the install scripts.
if [ -n "$found" ] && command -v curl >/dev/null && ! curl -fsI --max-time 10 "$found/dists/sid/Release" >/dev/null 2>&1; then
    found=
fi
found=${found:-http://deb.debian.org/debian}
echo "$found"
