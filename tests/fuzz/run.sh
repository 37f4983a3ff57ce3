#!/usr/bin/env bash
# Builds the record-file fuzzer with clang (libFuzzer + AddressSanitizer + UBSan, the reader, engine and
# exporters instrumented) and runs it for a bounded time from a seed recorded by the real tracer.
# Usage: tests/fuzz/run.sh BUILD_DIR SECONDS   (needs root for the seed recording)
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
build="$1"; seconds="${2:-60}"
work="$build/fuzz"; mkdir -p "$work/corpus"
us="$src/userspace"
srcs=("$us/export/record_file.cpp" "$us/export/record_codec.cpp" "$us/export/duration_series.cpp"
      "$us/export/chrome_trace.cpp" "$us/export/summary.cpp"
      "$us/export/native_summary.cpp" "$us/export/output_file.cpp" "$us/model/engine.cpp" "$us/model/batches.cpp" "$us/model/messages.cpp"
      "$us/model/role_spaces.cpp" "$us/model/rules.cpp" "$us/model/spans.cpp" "$us/model/native_map.cpp" "$us/export/json.cpp" "$us/export/run_info.cpp" "$us/common/utf8.cpp")
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$us" -I"$src/bpf" "$src/tests/fuzz/record_fuzzer.cpp" "${srcs[@]}" -lfmt -lz -o "$work/record_fuzzer"
# Seeds: a real recording of the pure-Python pipeline (main process and two workers), as a file and as its
# first block's inflated streams.
seed="$work/seed.lbt"
if [ ! -s "$seed" ] || [ "$build/lotus-bpf" -nt "$seed" ]; then  # (the tracer may write another format now)
  "$build/lotus-bpf" record -q -o "$seed" --pipeline Pipeline --span '*work*' -- /usr/bin/python3 \
    "$src/tests/integration/workloads/pure_pipeline.py" 6 >/dev/null
fi
clang++ -std=c++20 -O1 -I"$us" -I"$src/bpf" "$src/tests/fuzz/make_seeds.cpp" -lz -o "$work/make_seeds"
rm -f "$work/corpus/seed.lbt"  # format 1 seed of earlier builds
"$work/make_seeds" "$seed" "$work/corpus"
# -rss_limit_mb: a bad length must not make the reader allocate without bound.
"$work/record_fuzzer" "$work/corpus" -max_total_time="$seconds" -rss_limit_mb=1024 -max_len=65536 \
  -print_final_stats=1 2>&1 | tail -n 12
