#!/usr/bin/env bash
# The runtime's own floor under realistic.sh's burst and delete, with no
# kubelet: the harness containerd, and crates/cri's runtime_floor example
# making 30 pods straight through CRI (a sandbox on the harness's CNI
# network, one busybox sleep each, both configured as the kubelet
# configures realistic.sh's pods), PARALLEL at a time, then stopping
# them all at once with grace 2 s. Prints, per PARALLEL in
# BENCH_FLOOR_PARALLEL (default "4 30"):
#
#   seconds from the first RunPodSandbox until the last StartContainer
#   returned (rkubelet's "all Ready" adds the relist and status PATCH)
#   seconds from the first StopContainer until the last StopPodSandbox
#   returned (rkubelet's "gone" adds the final status and DELETE)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/lib.sh source-path=SCRIPTDIR/../..
. "$root/tests/bench/lib.sh"
pods=${BENCH_PODS:-30}
parallel=${BENCH_FLOOR_PARALLEL:-4 30}
harness=$root/tests/harness/containerd.sh
work=$(mktemp -d /tmp/rk-bench-floor.XXXXXX)
export RKUBELET_CNI_BRIDGE=${RKUBELET_CNI_BRIDGE:-rkbench3}
export RKUBELET_CNI_SUBNET=${RKUBELET_CNI_SUBNET:-10.88.243.0/24}

cleanup() {
    bash "$harness" stop "$work/ctrd" >/dev/null 2>&1 || true
    cgroup_root_remove /rk-bench-floor
    unmount_under "$work"
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

(cd "$root" && cargo build --release -q -p rkubelet-cri --example runtime_floor)
tool=$root/target/release/examples/runtime_floor

sock=$(bash "$harness" start "$work/ctrd" 2>"$work/harness.log" | sed -n 's/^CONTAINERD_SOCK=//p')
[ -n "$sock" ] || { cat "$work/harness.log" >&2; exit 1; }
cgroup_root_create /rk-bench-floor

for k in $parallel; do
    "$tool" "unix://$sock" "$pods" "$k" 2 /rk-bench-floor "$work/logs"
    rm -rf "$work/logs"
done
