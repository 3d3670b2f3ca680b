#!/usr/bin/env bash
# RSS of an idle standalone rkubelet (no pods) split by mapping
# (tests/bench/smaps.py), against a private containerd (tests/harness), as
# tests/bench/run.sh starts one. Usage: idle_rss.sh [BINARY] (default: the
# static binary). Root only. `make size` runs it.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/lib.sh source-path=SCRIPTDIR/../..
. "$root/tests/bench/lib.sh"
bin=${1:-$root/target/static/x86_64-unknown-linux-musl/dist/rkubelet}
harness=$root/tests/harness/containerd.sh
settle=${SIZE_IDLE_SECS:-10}
port=${SIZE_HEALTHZ_PORT:-10393}
work=$(mktemp -d /tmp/rk-idle.XXXXXX)
export RKUBELET_CNI_BRIDGE=${RKUBELET_CNI_BRIDGE:-rkbench3}
export RKUBELET_CNI_SUBNET=${RKUBELET_CNI_SUBNET:-10.88.243.0/24}
kpid=""

cleanup() {
    # (waited for, so that bash does not report it as Killed)
    if [ -n "$kpid" ]; then kill -9 "$kpid" 2>/dev/null || true; wait "$kpid" 2>/dev/null || true; fi
    bash "$harness" stop "$work/ctrd" >/dev/null 2>&1 || true
    cgroup_root_remove /rk-idle
    unmount_under "$work"
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

[ -x "$bin" ] || { echo "idle_rss.sh: no binary at $bin" >&2; exit 1; }
sock=$(bash "$harness" start "$work/ctrd" 2>"$work/harness.log" | sed -n 's/^CONTAINERD_SOCK=//p')
[ -n "$sock" ] || { cat "$work/harness.log" >&2; exit 1; }

mkdir -p "$work/manifests" "$work/logs"
cgroup_root_create /rk-idle
cat >"$work/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: /rk-idle
podLogsDir: $work/logs
healthzPort: $port
CFG

"$bin" --config "$work/config.yaml" --pod-manifest-path "$work/manifests" \
    --container-runtime-endpoint "unix://$sock" --root-dir "$work/root" \
    --hostname-override idle-node >"$work/kubelet.log" 2>&1 &
kpid=$!

wait_for 30 healthy || { echo "rkubelet did not become healthy" >&2; tail -20 "$work/kubelet.log" >&2; exit 1; }
sleep "$settle"
echo "binary $bin, idle ${settle}s after healthy, $(threads) threads"
python3 "$root/tests/bench/smaps.py" "$kpid" "$bin"
if [ -n "${SIZE_SMAPS_OUT:-}" ]; then cp "/proc/$kpid/smaps" "$SIZE_SMAPS_OUT"; fi
