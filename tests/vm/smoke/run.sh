#!/bin/bash
# The plumbing proof of tests/vm (README.md there): boot.sh's payload
# contract, run inside the VM by the image's runner. Checks that PID 1 is
# systemd, the cgroup hierarchy is the one the kernel args asked for, the
# boot finishes (running or degraded), there is no network device, and
# Debian's containerd starts from a written config (SystemdCgroup,
# restrict_oom_score_adj) and answers `ctr version`. Writes the facts to
# /payload/results/facts.
#
#   tests/vm/boot.sh bookworm tests/vm/smoke /tmp/smoke-results
#   tests/vm/boot.sh bookworm tests/vm/smoke /tmp/r systemd.unified_cgroup_hierarchy=0
#   tests/vm/boot.sh trixie tests/vm/smoke /tmp/r rkvm.poweroff=1
#
# rkvm.poweroff=1 ends with `systemctl poweroff --no-block` (the runner
# must then leave the shutdown alone) and a service that writes
# results/written-during-shutdown when the shutdown stops it.
set -uo pipefail

R=/payload/results
mkdir -p "$R"
passed=0 failed=0
ok() {
    passed=$((passed + 1))
    echo "ok - $RKVM_RELEASE/smoke/$1"
}
not_ok() {
    failed=$((failed + 1))
    echo "not ok - $RKVM_RELEASE/smoke/$1: $2"
}
check() { if [[ $2 == "$3" ]]; then ok "$1"; else not_ok "$1" "want '$2', got '$3'"; fi; }
fact() { echo "$1=$2" | tee -a "$R/facts"; }

: >"$R/facts"
fact release "$RKVM_RELEASE"
fact kernel "$(uname -r)"
fact systemd "$(systemctl --version | head -n1)"
fact cmdline "$(cat /proc/cmdline)"
fact rkvm_env "$(env | grep '^RKVM_' | sort | tr '\n' ' ')"

check pid1-is-systemd systemd "$(cat /proc/1/comm)"
if [[ -s /etc/machine-id ]]; then ok machine-id; else not_ok machine-id "/etc/machine-id is empty"; fi
# boot.sh always passes rkvm.timeout=N.
if [[ ${RKVM_TIMEOUT:-} =~ ^[0-9]+$ ]]; then ok rkvm-args-in-env; else not_ok rkvm-args-in-env "no RKVM_TIMEOUT"; fi
check cwd-is-payload /payload "$PWD"
check no-network-device lo "$(cd /sys/class/net && echo *)"

cgfs=$(stat -fc %T /sys/fs/cgroup)
fact cgroup_fs "$cgfs"
if grep -Eq '(^| )systemd\.unified_cgroup_hierarchy=(0|no|false)( |$)' /proc/cmdline; then
    check cgroup-v1 tmpfs "$cgfs"
    check cgroup-v1-memory cgroupfs "$(stat -fc %T /sys/fs/cgroup/memory 2>&1)"
else
    check cgroup-v2 cgroup2fs "$cgfs"
fi

state=$(timeout 300 systemctl is-system-running --wait 2>&1)
fact system_state "$state"
case $state in
running | degraded) ok "system-running($state)" ;;
*) not_ok system-running "systemctl is-system-running: $state" ;;
esac
[[ $state == degraded ]] && systemctl --failed --no-legend --no-pager | tee "$R/failed-units"
systemd-analyze 2>/dev/null | head -n1 | sed 's/^/boot: /' | tee -a "$R/facts"
systemd-analyze blame --no-pager >"$R/boot-blame" 2>&1

check containerd-disabled disabled "$(systemctl is-enabled containerd 2>&1)"
mkdir -p /etc/containerd
cat >/etc/containerd/config.toml <<'EOF'
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
EOF
if timeout 120 systemctl start containerd; then
    ok containerd-started
else
    not_ok containerd-started "$(systemctl status containerd --no-pager 2>&1 | tail -n 5)"
fi
v=
for _ in $(seq 1 60); do
    v=$(timeout 10 ctr version 2>&1) && break
    v=
    sleep 1
done
if [[ -n $v ]]; then ok ctr-version; else not_ok ctr-version "ctr version never answered"; fi
fact containerd "$(containerd --version 2>&1)"
fact runc "$(runc --version 2>&1 | head -n1)"
if command -v crun >/dev/null; then fact crun "$(crun --version 2>&1 | head -n1)"; fi
# The CRI plugin loaded the config (it is skipped on a config error).
if ctr plugins ls 2>/dev/null | grep -E 'io\.containerd\.grpc\.v1 +cri +.* ok' >/dev/null; then
    ok cri-plugin-ok
else
    not_ok cri-plugin-ok "$(ctr plugins ls 2>&1 | grep -i cri)"
fi
journalctl -u containerd --no-pager -o short-monotonic >"$R/containerd.log" 2>&1

if [[ ${RKVM_POWEROFF:-0} == 1 ]]; then
    # Stopped by the shutdown, before /payload is unmounted.
    systemd-run --unit=rkvm-smoke-stop --quiet --property=RequiresMountsFor=/payload \
        /bin/sh -c 'trap "date > /payload/results/written-during-shutdown; exit 0" TERM; while :; do sleep 1; done'
    echo "$passed passed, $failed failed"
    echo "smoke: systemctl poweroff --no-block"
    systemctl poweroff --no-block
    ((failed == 0))
    exit
fi
echo "$passed passed, $failed failed"
((failed == 0))
