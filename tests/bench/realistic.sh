#!/usr/bin/env bash
# make bench, cluster mode as a real API server charges it: the double
# (tests/apiserver) answers each request in the service time a v1.22.3
# kube-apiserver took (--latency real, charges.rs) and replays rkubelet's
# client rate limits (kubeAPIQPS/kubeAPIBurst, eventRecordQPS/eventBurst
# at rkubelet's defaults) from the request times, counting any request
# over them. cluster.sh gives the same figures on a double that charges
# nothing. Prints one line per figure:
#
#   time from creating 30 pods bound to the node until all 30 are Ready
#   rkubelet's CPU over 60 s idle with them, in % of one core (from the
#   threads' schedstat, and as before from utime and stime, which the
#   kernel samples each clock tick), and its API requests per minute
#   meanwhile
#   the 30 pods deleted at once with grace 2 s: seconds until gone from
#   the API
#   requests over the client limits during all of it (must be 0)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/lib.sh source-path=SCRIPTDIR/../..
. "$root/tests/bench/lib.sh"
bin=${BENCH_BIN:-$root/target/release/rkubelet}
double=${BENCH_DOUBLE_BIN:-$root/target/release/apiserver-double}
harness=$root/tests/harness/containerd.sh
pods=${BENCH_PODS:-30}
idle_secs=${BENCH_IDLE_SECS:-60}
settle_secs=${BENCH_SETTLE_SECS:-20}
port=${BENCH_HEALTHZ_PORT:-10394}
# rkubelet's defaults (KubeletConfiguration v1beta1 as of upstream 1.27).
qps=${BENCH_KUBE_API_QPS:-50}
burst=${BENCH_KUBE_API_BURST:-100}
event_qps=${BENCH_EVENT_QPS:-50}
event_burst=${BENCH_EVENT_BURST:-100}
node=bench-node
work=$(mktemp -d /tmp/rk-bench-real.XXXXXX)
export RKUBELET_CNI_BRIDGE=${RKUBELET_CNI_BRIDGE:-rkbench2}
export RKUBELET_CNI_SUBNET=${RKUBELET_CNI_SUBNET:-10.88.242.0/24}
kpid=""
dpid=""

cleanup() {
    [ -n "$kpid" ] && { kill -9 "$kpid" && wait "$kpid"; } 2>/dev/null || true
    [ -n "$dpid" ] && { kill -9 "$dpid" && wait "$dpid"; } 2>/dev/null || true
    bash "$harness" stop "$work/ctrd" >/dev/null 2>&1 || true
    cgroup_root_remove /rk-bench-real
    unmount_under "$work"
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

[ -x "$bin" ] || (cd "$root" && cargo build --release)
[ -x "$double" ] || (cd "$root" && cargo build --release -p rkubelet-apiserver-double)

fail() { echo "$*" >&2; tail -20 "$work/kubelet.log" >&2 2>/dev/null || true; exit 1; }

sock=$(bash "$harness" start "$work/ctrd" 2>"$work/harness.log" | sed -n 's/^CONTAINERD_SOCK=//p')
[ -n "$sock" ] || { cat "$work/harness.log" >&2; exit 1; }

"$double" --dir "$work/api" --port 0 --node-name "$node" --latency real \
    --client-qps "$qps" --client-burst "$burst" --event-qps "$event_qps" --event-burst "$event_burst" \
    >"$work/double.stdout" 2>"$work/double.log" &
dpid=$!
wait_for 15 grep -q '^LISTENING ' "$work/double.stdout" || { cat "$work/double.log" >&2; exit 1; }
url=$(sed -n 's/^LISTENING //p' "$work/double.stdout")

mkdir -p "$work/logs"
cgroup_root_create /rk-bench-real
cat >"$work/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: /rk-bench-real
podLogsDir: $work/logs
healthzPort: $port
containerRuntimeEndpoint: unix://$sock
failSwapOn: false
kubeAPIQPS: $qps
kubeAPIBurst: $burst
eventRecordQPS: $event_qps
eventBurst: $event_burst
CFG

"$bin" --config "$work/config.yaml" --kubeconfig "$work/api/kubelet-$node.kubeconfig" \
    --root-dir "$work/root" --hostname-override "$node" >"$work/kubelet.log" 2>&1 &
kpid=$!

cpu_s() { python3 -c "print(f'{($2 - $1) / $hz:.2f}')"; }
api() { WORK=$work URL=$url python3 "$root/tests/bench/api.py" "$@"; }

wait_for 30 healthy || fail "rkubelet did not become healthy"
wait_for 30 api node-ready "$node" || fail "node $node not Ready in the API within 30 s"
sleep 5

hz=$(getconf CLK_TCK)
m0=$(machine_ticks) k0=$(cpu_ticks)
read -r took created < <(api start-pods "$node" "$pods" 120 plain) || fail "pods did not become Ready"
m1=$(machine_ticks) k1=$(cpu_ticks)
echo "cluster_real_${pods}_api_pods_ready_seconds $took (creating them took ${created} s; machine CPU $(cpu_s "$m0" "$m1") s, rkubelet's $(cpu_s "$k0" "$k1") s; target <= 2.5 s)"

sleep "$settle_secs"
api stats-reset
t0=$(cpu_ticks) n0=$(cpu_ns)
sleep "$idle_secs"
t1=$(cpu_ticks) n1=$(cpu_ns)
idle_ns=$(python3 -c "print(f'{($n1 - $n0) / 1e9 / $idle_secs * 100:.3f}')")
idle_ticks=$(python3 -c "print(f'{($t1 - $t0) / $hz / $idle_secs * 100:.3f}')")
echo "cluster_real_idle_${pods}_pods_cpu_percent $idle_ns (over ${idle_secs} s, the threads' schedstat; $idle_ticks from clock ticks; target <= 0.15)"
echo "cluster_real_idle_${pods}_pods_api_requests_per_min $(api stats "system:node:$node" total)"

m0=$(machine_ticks) k0=$(cpu_ticks)
read -r took n < <(api delete-pods plain 2 60) || fail "plain pods were not deleted"
m1=$(machine_ticks) k1=$(cpu_ticks)
echo "cluster_real_delete_${n}_pods_grace_2s_gone_from_api_seconds $took (machine CPU $(cpu_s "$m0" "$m1") s, rkubelet's $(cpu_s "$k0" "$k1") s; target <= 3)"
echo "cluster_real_requests_over_client_limits $(api over-limits)"
kill -0 "$kpid" 2>/dev/null || fail "rkubelet died during the bench"
