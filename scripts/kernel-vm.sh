#!/usr/bin/env bash
# Boots Debian's own kernels (5.10, 6.1, 6.12) in QEMU and runs a command there as root, for the kernel matrix
# (tests/kernels). KVM guests hang at early boot on these machines (no nested virtualization), so QEMU runs TCG.
#   kernel-vm.sh prepare      build once, cached in $LOTUS_VM_CACHE (default /var/cache/lotus-bpf/vm): a Debian
#                             bookworm root image (Python, Debian's torch and torchvision, lotus-bpf's libraries,
#                             bpftool) and, installed in it, Debian's cloud kernels with their initrds
#   kernel-vm.sh check        exit 0 when that cache is ready, 1 if not
#   kernel-vm.sh run KERNEL CARRY_DIR OUT_DIR [TIMEOUT_S] -- COMMAND...
#       boots KERNEL (5.10|6.1|6.12) with 2 vCPUs and 6 GiB, CARRY_DIR's contents at /carry (read-write, a copy),
#       runs COMMAND (its words joined, run by bash -c as ssh does) as root in /carry, then powers off. What the
#       command writes under /results comes back into OUT_DIR, with vm-output.txt (its output), vm-exit-code,
#       vm-uname-r and vm-console.log (the serial console: boot, the command's output). The whole VM, boot
#       included, is killed after TIMEOUT_S (default 1800). Exit status: the command's; 124 when it ran out of
#       time, 125 when the VM gave no exit status (it did not boot, or crashed).
# The root image is never written: each run writes to a throwaway snapshot (QEMU snapshot=on).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${LOTUS_VM_CACHE:-/var/cache/lotus-bpf/vm}
KERNELS=(5.10 6.1 6.12)
# Debian suite of each kernel: bullseye (Debian 11), bookworm (12), bookworm-backports (the 6.12 of Debian 13,
# installable in the bookworm root). The cloud flavour: virtio drivers, BTF, uprobes, and a small initrd.
declare -A SUITE=([5.10]=bullseye [6.1]=bookworm [6.12]=bookworm-backports)

die() { echo "kernel-vm: $*" >&2; exit 1; }

ready() {
    [ -f "$cache/ready" ] && [ -s "$cache/root.img" ] || return 1
    local k
    for k in "${KERNELS[@]}"; do
        [ -s "$cache/kernels/$k/vmlinuz" ] && [ -s "$cache/kernels/$k/initrd.img" ] || return 1
    done
}

# Runs a command in the root being built, with /proc mounted in a private mount namespace (initramfs-tools and
# torch look at /proc; the mount cannot outlive the command, even when it is interrupted).
in_root() {
    unshare --mount --propagation private sh -c 'root=$1; shift; mount -t proc proc "$root/proc" && exec chroot "$root" "$@"' \
        sh "$tree" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"
}

host_tools() {
    local missing=() p
    for p in qemu-system-x86 debootstrap e2fsprogs; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }
}

prepare() {
    [ "$(id -u)" -eq 0 ] || die "prepare needs root (debootstrap, chroot)"
    host_tools
    if ready; then echo "$cache"; return; fi
    local mirror new log
    mirror=$(bash "$here/debian-mirror.sh")
    new="$cache.new"
    tree="$new/tree"
    log="$cache.log"
    rm -rf --one-file-system "$new"
    mkdir -p "$new/kernels"
    echo "kernel-vm: debootstrap bookworm into $tree, then torch and three kernels (about 7 minutes, 2 GB; log: $log)" >&2
    debootstrap --variant=minbase bookworm "$tree" "$mirror" >"$log" 2>&1 ||
        { tail -20 "$log" >&2; die "debootstrap failed (log: $log)"; }
    # The kernels come from bullseye and bookworm-backports; nothing else may: bullseye is pinned below
    # bookworm (backports are pinned low by their Release file already).
    cat >"$tree/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $mirror bookworm-backports main
deb $mirror bullseye main
EOF
    printf 'Package: *\nPin: release n=bullseye\nPin-Priority: 100\n' >"$tree/etc/apt/preferences.d/bullseye"
    # The mirror's Release files can be older than this machine's clock.
    echo 'Acquire::Check-Valid-Until "false";' >"$tree/etc/apt/apt.conf.d/99lotus"
    # initrds that hold only what mounts an ext4 root on virtio (a small initrd unpacks fast under TCG).
    mkdir -p "$tree/etc/initramfs-tools/conf.d"
    printf 'MODULES=list\nCOMPRESS=gzip\n' >"$tree/etc/initramfs-tools/conf.d/lotus"
    printf 'virtio_pci\nvirtio_blk\next4\n' >"$tree/etc/initramfs-tools/modules"
    printf '127.0.0.1 localhost\n::1 localhost\n' >"$tree/etc/hosts"
    echo lotus-vm >"$tree/etc/hostname"
    in_root apt-get -qq update >>"$log" 2>&1
    # What the integration tests run (Debian's torch stack, jsonschema, bpftool), lotus-bpf's shared libraries
    # (ldd build/lotus-bpf), and what the guest's init uses (mount, ip, ps, modprobe).
    in_root apt-get install -y -qq --no-install-recommends \
        python3 python3-torch python3-torchvision python3-pil python3-numpy python3-jsonschema \
        libbpf1 libelf1 libdw1 zlib1g libfmt9 libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 \
        bpftool procps util-linux mount iproute2 kmod initramfs-tools >>"$log" 2>&1 ||
        { tail -20 "$log" >&2; die "apt-get install in the root failed (log: $log)"; }
    local k suite meta image
    for k in "${KERNELS[@]}"; do
        suite=${SUITE[$k]}
        # The suite's linux-image-cloud-amd64 names its kernel's package: install that one (the metapackages of
        # three suites cannot be installed side by side).
        meta=$(in_root apt-cache madison linux-image-cloud-amd64 |
            awk -F' [|] ' -v s=" $suite/main " 'index($3, s) { gsub(/ /, "", $2); print $2; exit }')
        image=$(in_root apt-cache show "linux-image-cloud-amd64=$meta" |
            sed -n 's/^Depends: \(linux-image-[^ ,]*\).*/\1/p' | head -n 1)
        [ -n "$image" ] || die "no linux-image-cloud-amd64 in $suite on $mirror"
        echo "kernel-vm: $k: $image ($suite)" >&2
        in_root apt-get install -y -qq --no-install-recommends -t "$suite" "$image" >>"$log" 2>&1 ||
            { tail -20 "$log" >&2; die "installing $image failed (log: $log)"; }
        local release
        release=$(cd "$tree/boot" && ls vmlinuz-"$k".* | sed 's/^vmlinuz-//' | head -n 1)
        [ -n "$release" ] && [ -s "$tree/boot/initrd.img-$release" ] || die "no vmlinuz/initrd for $k in $tree/boot"
        mkdir -p "$new/kernels/$k"
        cp "$tree/boot/vmlinuz-$release" "$new/kernels/$k/vmlinuz"
        cp "$tree/boot/initrd.img-$release" "$new/kernels/$k/initrd.img"
        echo "$release" >"$new/kernels/$k/release"
    done
    in_root apt-get clean
    # PID 1 of the VM. The run's own init comes on its job disk (/dev/vdc), written by `run` from this script,
    # so changing it rebuilds nothing.
    cat >"$tree/sbin/lotus-boot" <<'EOF'
#!/bin/sh
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /job && mount -t ext4 /dev/vdc /job && exec /bin/bash /job/init
echo "lotus-boot: no job disk (/dev/vdc)"
echo o >/proc/sysrq-trigger
EOF
    chmod 755 "$tree/sbin/lotus-boot"
    local versions
    versions=$(in_root python3 -c 'import sys, torch, torchvision; print("python", sys.version.split()[0], "torch", torch.__version__, "torchvision", torchvision.__version__)' 2>/dev/null | tail -n 1)
    [ -n "$versions" ] || die "torch does not import in the root (log: $log)"
    # The image: the tree plus 2 GB free (a sparse file); runs write to a snapshot of it, never to it.
    local size
    size=$(( $(du -sm --one-file-system "$tree" | cut -f1) + 2048 ))
    mkfs.ext4 -q -F -L lotus-root -d "$tree" "$new/root.img" "${size}M" >>"$log" 2>&1 ||
        { tail -20 "$log" >&2; die "mkfs.ext4 -d failed (log: $log)"; }
    rm -rf --one-file-system "$tree"
    { echo "$versions"; for k in "${KERNELS[@]}"; do echo "linux $k: $(cat "$new/kernels/$k/release")"; done; } >"$new/ready"
    rm -rf --one-file-system "$cache"
    mv "$new" "$cache"
    sed 's/^/kernel-vm: /' "$cache/ready" >&2
    echo "$cache"
}

# The run's init, PID 1 in the guest (exec'd by /sbin/lotus-boot). Not systemd: the guest boots to the command
# in seconds. /job/limit: the VM's time limit in seconds, boot included.
guest_init() {
    cat <<'EOF'
#!/bin/bash
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 TERM=dumb
mnt() {  # TYPE DIR [OPTIONS]: what the initrd has not mounted already
    mountpoint -q "$2" && return
    mkdir -p "$2"
    mount -t "$1" ${3:+-o "$3"} "$1" "$2" || echo "lotus-init: cannot mount $1 at $2"
}
mnt proc /proc; mnt sysfs /sys; mnt devtmpfs /dev
mnt devpts /dev/pts; mnt tmpfs /dev/shm mode=1777; mnt tmpfs /tmp mode=1777; mnt tmpfs /run mode=755
ln -sfn /proc/self/fd /dev/fd
# BPF, uprobes and the tracer's cgroups, as a distribution's systemd mounts them.
mnt bpf /sys/fs/bpf; mnt tracefs /sys/kernel/tracing; mnt debugfs /sys/kernel/debug; mnt cgroup2 /sys/fs/cgroup
hostname lotus-vm
# A kernel that hangs (a soft lockup: a CPU stuck 20 s in the kernel) panics, which ends the VM (panic=-1,
# -no-reboot) with what came back so far, instead of idling to the host's limit; its stacks go to the console.
sysctl -q kernel.softlockup_panic=1
dmesg -n 6
ip link set lo up
ulimit -l unlimited  # before 5.11 BPF maps count against RLIMIT_MEMLOCK
ulimit -n 65536
mkdir -p /carry /results /job/vm
mount -t ext4 /dev/vdb /carry
mount --bind /job/results /results
uname -r >/job/vm/uname-r
# The command's own limit leaves time for the results to come back before the host's hard limit kills QEMU.
limit=$(( $(cat /job/limit) - $(cut -d. -f1 /proc/uptime) - 30 ))
echo "lotus-init: $(uname -r) up in $(cut -d' ' -f1 /proc/uptime) s; running the command (limit ${limit} s)"
cd /carry
{ timeout -k 10 "$limit" bash /job/command </dev/null 2>&1; echo $? >/job/vm/exit-code; } | tee /job/vm/output.txt
echo "lotus-init: exit status $(cat /job/vm/exit-code), powering off"
cd /
sync
umount /results /carry
mount -o remount,ro /job  # (bash reads this script from it: it cannot be unmounted)
echo o >/proc/sysrq-trigger
sleep 30
EOF
}

run() {
    [ "$(id -u)" -eq 0 ] || die "run needs root (it reads the cached image)"
    [ $# -ge 4 ] || die "usage: kernel-vm.sh run KERNEL CARRY_DIR OUT_DIR [TIMEOUT_S] -- COMMAND..."
    local kernel=$1 carry=$2 out=$3 limit=1800
    shift 3
    if [ "$1" != "--" ]; then limit=$1; shift; fi
    [ "${1:-}" = "--" ] && [ $# -ge 2 ] || die "usage: kernel-vm.sh run KERNEL CARRY_DIR OUT_DIR [TIMEOUT_S] -- COMMAND..."
    shift
    ready && command -v qemu-system-x86_64 >/dev/null || die "no VM cache at $cache, or no QEMU: run scripts/kernel-vm.sh prepare"
    local kdir="$cache/kernels/$kernel"
    [ -d "$kdir" ] || die "unknown kernel $kernel (have: ${KERNELS[*]})"
    [ -d "$carry" ] || die "no directory $carry"
    mkdir -p "$out"
    work=$(mktemp -d /var/tmp/lotus-vm.XXXXXX)  # global: the EXIT trap runs after run() returned
    trap 'rm -rf "$work"' EXIT
    # The carry disk: a copy of CARRY_DIR (nothing the guest does reaches the host's files). The job disk: the
    # init, the command, and /results, read back with debugfs (no loop device, no mount on the host).
    mkfs.ext4 -q -F -L carry -d "$carry" "$work/carry.img" "$(( $(du -sm "$carry" | cut -f1) * 2 + 256 ))M"
    mkdir -p "$work/job/results" "$work/job/vm"
    guest_init >"$work/job/init"
    printf '%s\n' "$*" >"$work/job/command"
    echo "$limit" >"$work/job/limit"
    mkfs.ext4 -q -F -L job -d "$work/job" "$work/job.img" 4G
    rm -f "$out"/vm-console.log "$out"/vm-output.txt "$out"/vm-exit-code "$out"/vm-uname-r
    # Debian's 6.12 double-faults early under TCG with the default CPU model and with -cpu max; qemu64 without
    # cmpxchg16b boots all three (one model for all, so their timings compare).
    # thread=single: one host thread runs both vCPUs in turn. With a thread each (MTTCG), the guest's patching of its
    # own text (jump labels, through an int3) raced the other vCPU: a 6.1 guest spun at a patched jump label, and a
    # 6.12 guest died of "Oops: int3" in __schedule twice in one run on a busy host.
    # -no-reboot + panic=-1: if init dies, the kernel's panic ends QEMU instead of looping. nosoftlockup nowatchdog:
    # a vCPU thread the busy host does not run for seconds read as a soft lockup, which Debian's cloud kernels
    # panic on (seen on 6.1, during a BPF program's verification).
    local start=$SECONDS rc=0
    timeout -s KILL "$limit" qemu-system-x86_64 -nodefaults -no-user-config -display none -no-reboot \
        -accel tcg,thread=single -cpu qemu64,-cx16 -smp 2 -m 6G \
        -kernel "$kdir/vmlinuz" -initrd "$kdir/initrd.img" \
        -append "root=/dev/vda rw console=ttyS0 quiet loglevel=4 panic=-1 nosoftlockup nowatchdog init=/sbin/lotus-boot" \
        -drive "file=$cache/root.img,if=virtio,format=raw,snapshot=on" \
        -drive "file=$work/carry.img,if=virtio,format=raw" \
        -drive "file=$work/job.img,if=virtio,format=raw" \
        -serial "file:$out/vm-console.log" &
    local qemu=$!
    # The console, live on stderr.
    tail -n +1 -F --pid="$qemu" "$out/vm-console.log" 2>/dev/null | sed -u 's/\r$//' >&2 &
    local tailer=$!
    wait "$qemu" || rc=$?
    sleep 1; kill "$tailer" 2>/dev/null || true; wait "$tailer" 2>/dev/null || true
    local elapsed=$(( SECONDS - start ))
    debugfs -R "rdump /results /vm $work" "$work/job.img" >/dev/null 2>&1 || true
    if [ -d "$work/results" ]; then cp -a "$work/results/." "$out/"; fi
    local f
    for f in output.txt exit-code uname-r; do
        if [ -f "$work/vm/$f" ]; then cp "$work/vm/$f" "$out/vm-$f"; fi
    done
    if [ -s "$out/vm-exit-code" ]; then
        rc=$(cat "$out/vm-exit-code")
        echo "kernel-vm: linux $(cat "$out/vm-uname-r" 2>/dev/null): the command exited $rc (VM ${elapsed} s)" >&2
        [ "$rc" -eq 124 ] && echo "kernel-vm: the command ran out of time (${limit} s for the VM, boot included)" >&2
        return "$rc"
    fi
    if [ "$rc" -eq 137 ]; then
        echo "kernel-vm: $kernel: the VM was killed at its time limit (${limit} s); console: $out/vm-console.log" >&2
        return 124
    fi
    echo "kernel-vm: $kernel: the VM ended without the command's exit status (QEMU exit $rc); console: $out/vm-console.log" >&2
    tail -n 20 "$out/vm-console.log" >&2 || true
    return 125
}

case "${1:-}" in
    prepare) prepare ;;
    check) ready ;;
    run) shift; run "$@" ;;
    *) die "usage: kernel-vm.sh prepare | check | run KERNEL CARRY_DIR OUT_DIR [TIMEOUT_S] -- COMMAND..." ;;
esac
