#!/usr/bin/env bash
# usage: tests/vm/boot.sh RELEASE PAYLOAD_DIR RESULTS_DIR [kernel args...]
#
# Boots the Debian RELEASE image of tests/vm/image.sh in QEMU (no network
# device) with PAYLOAD_DIR as its second disk, lets the image's runner run
# PAYLOAD_DIR/run.sh there, then copies the payload disk's /results into
# RESULTS_DIR, with the serial console as RESULTS_DIR/console.log, and
# exits with run.sh's status (1, naming the release, when the VM gave none:
# no boot, a panic, a timeout). The contract of run.sh: tests/vm/README.md.
#
# Kernel args: e.g. systemd.unified_cgroup_hierarchy=0 for cgroup v1, or
# rkvm.NAME=VALUE, which run.sh sees as RKVM_NAME=VALUE.
#
# Environment:
#   RKUBELET_VM_ACCEL  auto (default) | kvm | tcg. auto
#       tries KVM when /dev/kvm is usable and falls back to TCG when the
#       runner did not start within RKVM_BOOT_DEADLINE seconds (default 90).
#   RKVM_TIMEOUT   seconds for the whole run, boots included (default 1500);
#       qemu is killed then. run.sh gets rkvm.timeout (RKVM_TIMEOUT minus
#       what the boot may take) and is killed inside the VM first.
#   RKVM_VERBOSE=1 streams the console to stderr, each line prefixed with
#       the release.
#   RKUBELET_VM_CACHE  the image cache (image.sh).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MARKER='rkubelet-vm: runner started'

release=${1:-}
say() { echo "boot.sh${release:+ ($release)}: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}

if (($# < 3)); then
    echo "usage: $0 bookworm|trixie PAYLOAD_DIR RESULTS_DIR [kernel args...]" >&2
    exit 2
fi
payload=$2
results=$3
shift 3
extra=("$@")
case $release in
bookworm | trixie) ;;
*) die "unknown release '$release' (bookworm or trixie)" ;;
esac
[[ -d $payload ]] || die "no payload directory $payload"
[[ -f $payload/run.sh ]] || die "no run.sh in $payload"
accel=${RKUBELET_VM_ACCEL:-auto}
case $accel in
auto | kvm | tcg) ;;
*) die "RKUBELET_VM_ACCEL=$accel: want auto, kvm or tcg" ;;
esac
timeout_total=${RKVM_TIMEOUT:-1500}
boot_deadline=${RKVM_BOOT_DEADLINE:-90}
verbose=${RKVM_VERBOSE:-0}
[[ $timeout_total =~ ^[0-9]+$ && $boot_deadline =~ ^[0-9]+$ ]] ||
    die "RKVM_TIMEOUT and RKVM_BOOT_DEADLINE must be whole seconds"
for tool in qemu-system-x86_64 mkfs.ext4 debugfs e2fsck; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install qemu-system-x86 e2fsprogs)"
done
mkdir -p "$results"
results=$(cd "$results" && pwd)

t_img=$SECONDS
img=$(bash "$here/image.sh" "$release") || die "no image (tests/vm/image.sh $release failed)"
say "image $img ($((SECONDS - t_img)) s)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/rkvm-$release.XXXXXX")
qpid=
tpid=
stop_qemu() {
    [[ -n $qpid ]] || return 0
    if kill -0 "$qpid" 2>/dev/null; then
        kill -TERM "$qpid" 2>/dev/null || true
        local _
        for _ in $(seq 1 50); do
            kill -0 "$qpid" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL "$qpid" 2>/dev/null || true
    fi
    wait "$qpid" 2>/dev/null || true
    qpid=
    if [[ -n $tpid ]]; then
        # tail --pid ends once qemu is gone; sed when tail ends.
        wait "$tpid" 2>/dev/null || true
        tpid=
    fi
}
# shellcheck disable=SC2317 # run by the trap
cleanup() {
    stop_qemu
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM HUP

# A fresh payload disk: PAYLOAD_DIR plus room for the results.
make_payload() {
    local mib
    mib=$(du -s --block-size=1M "$payload" | cut -f1)
    mib=$((mib + mib / 10 + 512 + 16))
    rm -f "$tmp/payload.ext4"
    truncate -s "${mib}M" "$tmp/payload.ext4"
    mkfs.ext4 -q -F -L rkvm-payload -E root_owner=0:0 -d "$payload" "$tmp/payload.ext4" ||
        die "mkfs.ext4 -d $payload failed"
}

# A sed script: the console without SeaBIOS' terminal escapes and CRs,
# each line prefixed with $1.
plain() { printf 's/\x1b\\[[0-9;?!]*[a-zA-Z]//g; s/\x1b[c=>]//g; s/\x1b\\][^\x07]*\x07//g; s/\\r//g; s/^/%s/' "$1"; }

kvm_usable() { [[ -c /dev/kvm && -r /dev/kvm && -w /dev/kvm ]]; }

start=$SECONDS
elapsed() { echo $((SECONDS - start)); }

# run_vm ACCEL MARKER_DEADLINE: boots once. Returns 0 when qemu exited
# by itself, 2 when the runner did not start within MARKER_DEADLINE
# seconds (0: no such deadline), 3 at the overall timeout.
booted_after=
run_vm() {
    local acc=$1 deadline=$2 t0=$SECONDS accel_args
    case $acc in
    kvm) accel_args=(-accel kvm -cpu host) ;;
    tcg) accel_args=(-accel "tcg,thread=multi" -cpu max) ;;
    esac
    # run.sh's own limit: what is left, less the boot and the shutdown.
    local guest_timeout=$((timeout_total - $(elapsed) - 240))
    ((guest_timeout >= 60)) || guest_timeout=60
    local append="root=/dev/vda rw console=ttyS0 quiet systemd.show_status=0 panic=-1 rkvm.timeout=$guest_timeout ${extra[*]}"
    log=$tmp/console-$acc.log
    : >"$log"
    say "booting with $acc: $append"
    TMPDIR=$tmp qemu-system-x86_64 -name "rkvm-$release" \
        -m 2048 -smp 2 -nodefaults -nographic -no-reboot -nic none \
        "${accel_args[@]}" \
        -kernel "$img/vmlinuz" -initrd "$img/initrd.img" -append "$append" \
        -drive "file=$img/rootfs.ext4,format=raw,if=virtio,snapshot=on" \
        -drive "file=$tmp/payload.ext4,format=raw,if=virtio" \
        -serial "file:$log" \
        </dev/null >"$tmp/qemu-$acc.out" 2>&1 &
    qpid=$!
    if [[ $verbose == 1 ]]; then
        tail -n +1 -F --pid="$qpid" "$log" 2>/dev/null | sed -u "$(plain "[$release] ")" >&2 &
        tpid=$!
    fi
    booted_after=
    while kill -0 "$qpid" 2>/dev/null; do
        if [[ -z $booted_after ]] && grep -qF "$MARKER" "$log"; then
            booted_after=$((SECONDS - t0))
            say "runner started $booted_after s after qemu ($acc)"
        fi
        if [[ -z $booted_after ]] && ((deadline > 0 && SECONDS - t0 >= deadline)); then
            say "no '$MARKER' within $deadline s with $acc: stopping qemu"
            stop_qemu
            return 2
        fi
        if (($(elapsed) >= timeout_total)); then
            say "timed out after $timeout_total s (RKVM_TIMEOUT): stopping qemu"
            stop_qemu
            return 3
        fi
        sleep 1
    done
    local qrc=0
    wait "$qpid" || qrc=$?
    qpid=
    [[ -n $tpid ]] && { wait "$tpid" 2>/dev/null || true; tpid=; }
    if [[ -z $booted_after ]] && grep -qF "$MARKER" "$log"; then booted_after=$((SECONDS - t0)); fi
    say "qemu exited with status $qrc after $((SECONDS - t0)) s"
    ((qrc == 0)) || sed 's/^/  qemu: /' "$tmp/qemu-$acc.out" >&2
    return 0
}

outcome=0
used=$accel
make_payload
case $accel in
kvm)
    kvm_usable || die "RKUBELET_VM_ACCEL=kvm but /dev/kvm is not usable"
    run_vm kvm 0 || outcome=$?
    ;;
tcg)
    run_vm tcg 0 || outcome=$?
    ;;
auto)
    used=tcg
    if kvm_usable; then
        used=kvm
        run_vm kvm "$boot_deadline" || outcome=$?
        if [[ -z $booted_after ]] && ((outcome != 3)); then
            say "KVM did not boot (console: console-kvm.log): falling back to TCG"
            cp "$tmp/console-kvm.log" "$results/console-kvm.log"
            used=tcg
            outcome=0
            make_payload
            run_vm tcg 0 || outcome=$?
        fi
    else
        say "/dev/kvm is not usable: TCG"
        run_vm tcg 0 || outcome=$?
    fi
    ;;
esac
say "VM done after $(elapsed) s ($used)"

# The results, also after an unclean end: e2fsck replays the journal.
cp "$log" "$results/console.log"
rm -f "$results/rc"
e2fsck -fy "$tmp/payload.ext4" >"$tmp/e2fsck.out" 2>&1 || true
mkdir -p "$tmp/extract"
debugfs -R "rdump /results $tmp/extract" "$tmp/payload.ext4" >"$tmp/debugfs.out" 2>&1 || true
if [[ -d $tmp/extract/results ]]; then
    cp -a "$tmp/extract/results/." "$results/"
fi
cat >"$results/boot-info" <<EOF
release=$release
accel=$used
args=${extra[*]}
runner_started_after_s=${booted_after:-none}
total_s=$(elapsed)
EOF

if [[ -f $results/rc ]]; then
    rc=$(tr -dc '0-9' <"$results/rc")
    [[ -n $rc ]] || die "results/rc of the $release VM is not a number: $(head -c 100 "$results/rc")"
    say "run.sh exited with status $rc"
    exit "$rc"
fi
if ((outcome == 3)); then
    why="timed out after $timeout_total s"
elif grep -q 'Kernel panic' "$log"; then
    why="kernel panic: $(grep -m1 'Kernel panic' "$log" | tr -d '\r')"
elif [[ -z $booted_after ]]; then
    why="the runner never started (no '$MARKER')"
else
    why="the VM stopped before run.sh finished"
fi
say "error: no results/rc from the $release VM: $why. Last 40 console lines ($results/console.log):"
tail -n 40 "$log" | sed "$(plain "  [$release] ")" >&2
exit 1
