#!/usr/bin/env bash
# The overhead rows per kernel (issue 78 item 5): bench/many_cores.py's pairs (untraced vs traced example,
# interleaved), BPF time per sample (bpftool prog stats), tracer CPU, the cost account and an unrelated process's
# slowdown beside the tracer, run inside Debian's 6.1 and 6.12 in QEMU (scripts/kernel-vm.sh: TCG, 2 vCPUs) and,
# for comparison, on this host's kernel, directly. Every figure is a ratio measured inside one machine: TCG makes
# absolute times many times longer, so only the in-VM ratios mean anything. 5.10 is not benchmarked: lotus-bpf
# refuses it in one line (recorded here, from the guest).
# Usage (root, from anywhere; needs build/lotus-bpf and the VM cache, scripts/kernel-vm.sh prepare):
#   bench/kernels.sh [OUT_DIR]        (default /tmp/lotus-bench-kernels; about an hour on a 2-core host: TCG)
# Environment: KERNELS (default "5.10 6.12 6.1 host"), BENCH_ARGS (many_cores.py's sizes, below), VM_LIMIT (each
# VM's wall-clock limit, boot included), NO_WAIT=1 (do not wait for other QEMU VMs to end).
# Per kernel OUT_DIR/KERNEL/many_cores.txt holds the run's output; the rows are printed at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/tmp/lotus-bench-kernels}
KERNELS=${KERNELS:-"5.10 6.12 6.1 host"}
# Sizes that fit TCG, where `import torch` alone takes ~30 s: 32 images x 2 epochs, 3 interleaved pairs, the call
# counts of the trap measure and of the unrelated process at 5 % of the host's (100,000 calls of a function, not
# 2,000,000). The default mode only: the account's target is the default mode's, and --native-map does not load on
# 6.1 (the program unsampled_threads: no task_struct.perf_event_ctxp there). No --budget: many_cores.py gives the
# later rows a share of it that 3 pairs under TCG already exceed, so the sizes bound each run, and VM_LIMIT is the
# hard cap. Two runs of many_cores.py per machine: the pairs, BPF time, tracer CPU and the account, then the
# unrelated process (its own run: on 6.1 the kernel matrix's unrelated-process check locked the guest up with a
# build of 2026-12-06 03:51, soft lockups of lotus-bpf and its target until the VM was killed).
BENCH_ARGS=${BENCH_ARGS:-"--workers 2 --images 32 --calls-scale 0.05 --default-only"}
# A kernel's VM: ~7 minutes for the 3 pairs alone on a 2-core host (6.12, December 2026, beside another VM), so
# the account (2 runs each for the BPF time and the tracer's CPU, the trap measure) and the unrelated run need ~25.
VM_LIMIT=${VM_LIMIT:-1500}
[ "$(id -u)" -eq 0 ] || { echo "bench/kernels.sh: needs root (BPF, the VM cache)" >&2; exit 1; }
[ -x "$root/build/lotus-bpf" ] || { echo "bench/kernels.sh: no $root/build/lotus-bpf" >&2; exit 1; }

# One copy of the binary for every kernel (the guest's root has its libraries, python3 with torch and bpftool).
carry=$(mktemp -d /var/tmp/lotus-bench-carry.XXXXXX)
trap 'rm -rf "$carry"' EXIT
mkdir -p "$carry/build"
cp "$root/build/lotus-bpf" "$carry/build/"
mkdir -p "$out"
echo "build/lotus-bpf: md5 $(md5sum <"$carry/build/lotus-bpf" | cut -c1-12), built $(date -r "$root/build/lotus-bpf" '+%F %T')" |
    tee "$out/binary.txt" >&2
cp -r "$root/bench" "$root/examples" "$carry/"
find "$carry" -name __pycache__ -prune -exec rm -rf {} +
# The bench, writing its output under $1 (the guest's /results, or OUT_DIR/host).
bench() {
    echo "set -o pipefail; python3 bench/many_cores.py $BENCH_ARGS --repeats 3 --rows pairs,bpf,tracer,account 2>&1 | tee $1/many_cores.txt;" \
        "python3 bench/many_cores.py $BENCH_ARGS --repeats 0 --rows unrelated 2>&1 | tee -a $1/many_cores.txt"
}

# A ratio is only as good as the machine is quiet: another VM on these few cores skews it.
quiet() {
    [ "${NO_WAIT:-}" = 1 ] && return
    while pgrep -x qemu-system-x86 >/dev/null; do  # (the process name, cut at 15 characters)
        echo "bench/kernels.sh: waiting for other QEMU VMs to end ($(pgrep -x qemu-system-x86 | tr '\n' ' '))" >&2
        sleep 15
    done
}

for k in $KERNELS; do
    mkdir -p "$out/$k"
    [ "$k" = 5.10 ] || quiet  # (5.10 measures nothing)
    case $k in
    host)  # this machine's kernel, directly
        echo "== host $(uname -r): $(bench "$out/host")" >&2
        uname -r >"$out/host/uname-r"
        # The trap measure's bare probes need tracefs (the VMs' init mounts it; a host may not have it mounted).
        mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
        (cd "$carry" && bash -c "$(bench "$out/host")") || echo "bench/kernels.sh: host: the bench ended with status $?" >&2
        ;;
    5.10)  # refused before anything is traced: the one line is the result
        echo "== 5.10: the refusal" >&2
        bash "$root/scripts/kernel-vm.sh" run 5.10 "$carry" "$out/5.10" 300 -- \
            'build/lotus-bpf -q -o /dev/null -- true 2>&1 | tee /results/many_cores.txt; echo "lotus-bpf exit status ${PIPESTATUS[0]}" | tee -a /results/many_cores.txt' \
            >/dev/null 2>&1 || true
        ;;
    *)
        echo "== $k in QEMU: $(bench /results)" >&2
        bash "$root/scripts/kernel-vm.sh" run "$k" "$carry" "$out/$k" "$VM_LIMIT" -- "$(bench /results)" \
            >/dev/null 2>"$out/$k/kernel-vm.stderr" ||
            echo "bench/kernels.sh: $k: the VM ended with status $? (see $out/$k/vm-output.txt)" >&2
        ;;
    esac
done

for k in $KERNELS; do
    f=$out/$k/many_cores.txt
    release=$(cat "$out/$k/vm-uname-r" "$out/$k/uname-r" 2>/dev/null | head -n 1 || true)
    echo "== $k (${release:-no kernel release recorded})"
    if [ ! -s "$f" ]; then
        echo "  no output (see $out/$k)"
    elif [ "$k" = 5.10 ]; then  # the refusal
        sed 's/^/  /' "$f"
    else  # each run's summary rows; a run cut off before its summary: the rows it printed as it went
        awk 'function flush() { if (!summary) for (i = 1; i <= n; i++) print "  (cut off) " said[i]; n = 0 }
             /many_cores: / { flush(); summary = 0; next }
             /many_cores summary/ { summary = 1; next }
             summary && /^  / { print; next }
             /^\[ *[0-9]+ s\] (samples|BPF|tracer|kernel|cost|unrelated|DataLoader|default)/ { said[++n] = $0 }
             END { flush() }' "$f"
    fi
done
