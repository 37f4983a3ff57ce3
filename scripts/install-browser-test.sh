#!/usr/bin/env bash
# What the browser test needs, all offline once installed: Debian's Chromium, and from npm speedscope (its web app,
# the trace viewer that works without the internet) and playwright-core (drives Chromium headless). The npm
# packages are kept in LOTUS_BROWSER_TEST_DIR (default /var/cache/lotus-bpf/browser-test) between runs.
# Idempotent; prints that directory.
set -euo pipefail
dir=${LOTUS_BROWSER_TEST_DIR:-/var/cache/lotus-bpf/browser-test}
speedscope=1.25.0
playwright=1.65.1
if ! command -v chromium >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; }
fi
if ! command -v npm >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null; }
fi
stamp="$dir/.ready-$speedscope-$playwright"
if [ ! -f "$stamp" ]; then
  mkdir -p "$dir"
  (cd "$dir" && npm install --no-audit --no-fund --silent "speedscope@$speedscope" "playwright-core@$playwright" 2>&1 |
     grep -v 'Unknown user config' >&2 || true)
  [ -f "$dir/node_modules/speedscope/dist/release/index.html" ] && [ -d "$dir/node_modules/playwright-core" ] ||
    { echo "install-browser-test: npm install of speedscope and playwright-core into $dir failed" >&2; exit 1; }
  touch "$stamp"
fi
echo "$dir"
