#!/usr/bin/env bash
# make bench: the figures the issues ask for, measured on this machine
# against a private containerd (tests/harness). Prints one line per figure.
#
#   binary size (release, and static if built)
#   RSS and thread count idle with 0 static pods, then with 30
#   time from dropping 30 manifests into the manifest dir until all 30
#   containers run (as containerd reports them)
#   CPU seconds rkubelet uses over 60 s idle with 30 pods
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/lib.sh source-path=SCRIPTDIR/../..
. "$root/tests/bench/lib.sh"
bin=${BENCH_BIN:-$root/target/release/rkubelet}
harness=$root/tests/harness/containerd.sh
pods=${BENCH_PODS:-30}
idle_secs=${BENCH_IDLE_SECS:-60}
port=${BENCH_HEALTHZ_PORT:-10391}
work=$(mktemp -d /tmp/rk-bench.XXXXXX)
export RKUBELET_CNI_BRIDGE=${RKUBELET_CNI_BRIDGE:-rkbench0}
export RKUBELET_CNI_SUBNET=${RKUBELET_CNI_SUBNET:-10.88.240.0/24}
kpid=""

cleanup() {
    [ -n "$kpid" ] && kill -9 "$kpid" 2>/dev/null || true
    bash "$harness" stop "$work/ctrd" >/dev/null 2>&1 || true
    cgroup_root_remove /rk-bench
    unmount_under "$work"
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

[ -x "$bin" ] || (cd "$root" && cargo build --release)

sock=$(bash "$harness" start "$work/ctrd" 2>"$work/harness.log" | sed -n 's/^CONTAINERD_SOCK=//p')
ctr_() { ctr --address "$sock" -n k8s.io "$@"; }

mkdir -p "$work/manifests" "$work/logs"
cgroup_root_create /rk-bench
cat >"$work/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: /rk-bench
podLogsDir: $work/logs
fileCheckFrequency: 20s
healthzPort: $port
CFG

"$bin" --config "$work/config.yaml" --pod-manifest-path "$work/manifests" \
    --container-runtime-endpoint "unix://$sock" --root-dir "$work/root" \
    --hostname-override bench-node >"$work/kubelet.log" 2>&1 &
kpid=$!

running_apps() { ctr_ tasks ls 2>/dev/null | awk 'NR>1 && $3=="RUNNING"' | wc -l; }

wait_for 30 healthy || { echo "rkubelet did not become healthy" >&2; tail -20 "$work/kubelet.log" >&2; exit 1; }
sleep 5
echo "binary_size_release_bytes $(stat -c %s "$bin")"
# The static binary (make bench builds it first); its budget is checked by
# tests/bench/budget.sh at the end of make bench.
static_bin=$root/target/static/x86_64-unknown-linux-musl/dist/rkubelet
if [ -x "$static_bin" ]; then
    echo "binary_size_static_bytes $(stat -c %s "$static_bin")"
else
    echo "binary_size_static_bytes missing (make static)"
fi
echo "idle_0_pods_rss_kb $(rss_kb) ($(rss_split))"
echo "idle_0_pods_threads $(threads)"

for i in $(seq 1 "$pods"); do
    cat >"$work/manifests/.p$i.yaml" <<POD
apiVersion: v1
kind: Pod
metadata:
  name: bench-$i
spec:
  containers:
  - name: sleep
    image: docker.io/library/busybox:1.36
    command: ["sleep", "100000"]
POD
done
# Dot-files are ignored: renaming them in is the "drop" (one inotify burst).
start=$(date +%s.%N)
for i in $(seq 1 "$pods"); do mv "$work/manifests/.p$i.yaml" "$work/manifests/p$i.yaml"; done
# Each pod runs a sandbox task and an app task.
wait_for 120 bash -c "[ \$(ctr --address '$sock' -n k8s.io tasks ls 2>/dev/null | awk 'NR>1 && \$3==\"RUNNING\"' | wc -l) -ge $((2 * pods)) ]" \
    || { echo "not all pods ran: $(running_apps) tasks running" >&2; exit 1; }
end=$(date +%s.%N)
echo "start_${pods}_pods_seconds $(echo "$end - $start" | bc -l | xargs printf '%.2f')"

sleep 10
echo "idle_${pods}_pods_rss_kb $(rss_kb) ($(rss_split))"
echo "idle_${pods}_pods_threads $(threads)"
t0=$(cpu_ticks)
sleep "$idle_secs"
t1=$(cpu_ticks)
hz=$(getconf CLK_TCK)
echo "idle_${pods}_pods_cpu_seconds_per_${idle_secs}s $(echo "($t1 - $t0) / $hz" | bc -l | xargs printf '%.2f')"
echo "idle_${pods}_pods_rss_kb_after_${idle_secs}s $(rss_kb)"
echo "thread_names $(ls /proc/$kpid/task | while read -r t; do cat "/proc/$kpid/task/$t/comm"; done | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}')"
