#!/usr/bin/env bash
# Runs the record-file fuzzer (libFuzzer + AddressSanitizer + UBSan; the reader, engine and exporters
# instrumented; the CMake target record_fuzzer) for a bounded time from a seed recorded by the real tracer.
# Usage: tests/fuzz/run.sh BUILD_DIR SECONDS   (needs root for the seed recording)
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="$1"; seconds="${2:-60}"
work="$build/fuzz"; mkdir -p "$work/corpus"
bin="$build/fuzz/build" # the CMake target record_fuzzer (tests/fuzz/CMakeLists.txt) builds it
[ -x "$bin/record_fuzzer" ] && [ -x "$bin/make_seeds" ] ||
  { echo "fuzz/run.sh: $bin/record_fuzzer is not built (cmake --build $build --target record_fuzzer)" >&2; exit 1; }
# Seeds: a real recording of the pure-Python pipeline (main process and two workers), as a file and as its
# first block's inflated streams.
seed="$work/seed.lbt"
if [ ! -s "$seed" ] || [ "$build/lotus-bpf" -nt "$seed" ]; then  # (the tracer may write another format now)
  "$build/lotus-bpf" record -q -o "$seed" --pipeline Pipeline --span '*work*' -- /usr/bin/python3 \
    "$src/tests/integration/workloads/pure_pipeline.py" 6 >/dev/null
fi
rm -f "$work/corpus/seed.lbt"  # format 1 seed of earlier builds
"$bin/make_seeds" "$seed" "$work/corpus"
# -rss_limit_mb: a bad length must not make the reader allocate without bound.
"$bin/record_fuzzer" "$work/corpus" -max_total_time="$seconds" -rss_limit_mb=1024 -max_len=65536 \
  -print_final_stats=1 2>&1 | tail -n 12
