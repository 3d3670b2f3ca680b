#!/usr/bin/env bash
# make bench at the pod counts edge nodes run (issue 53): for each N in
# BENCH_SCALE_PODS (default "110 250"), rkubelet in cluster mode against
# the double as a real server charges it (--latency real, rkubelet's client
# limits replayed, as realistic.sh), maxPods 250, a private containerd:
#
#   30 plain pods made Ready and deleted, as the reference for the writes
#   per pod; then N plain pods: seconds until all are Ready in the API and,
#   deleted at once with grace 2 s, until all are gone; the node's status
#   patches and event writes per pod
#   N pods each with one tcpSocket readiness probe every 10 s: rkubelet's
#   CPU over BENCH_IDLE_SECS (60) of steady state, in % of one core (the
#   threads' schedstat), its API requests per minute meanwhile, RSS and
#   threads
#   then, rkubelet stopped, the runtime's own floor at N pods
#   (runtime_floor.sh's example, 4 at a time as the pod workers make them)
#
# Each figure is checked against the issue's bar and a miss is printed as
# "FAIL ..."; the script exits 1 after the last figure when any missed:
#   Ready and delete within 10 % of the floor of the same run
#   idle CPU <= 0.3 % of a core; API requests per minute at idle that do
#   not grow with pods (the largest N within 2 of the smallest N's)
#   RSS <= 30 MB (glibc) or 15 MB (static: BENCH_STATIC=1 or an ELF without
#   an interpreter); threads the same with N pods as with none
#   no request of the node's over its client limits; status patches and event writes
#   per pod at most 10 % above the 30-pod reference
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/lib.sh source-path=SCRIPTDIR/../..
. "$root/tests/bench/lib.sh"
bin=${BENCH_BIN:-$root/target/release/rkubelet}
double=${BENCH_DOUBLE_BIN:-$root/target/release/apiserver-double}
harness=$root/tests/harness/containerd.sh
counts=${BENCH_SCALE_PODS:-110 250}
idle_secs=${BENCH_IDLE_SECS:-60}
settle_secs=${BENCH_SETTLE_SECS:-30}
port=${BENCH_HEALTHZ_PORT:-10395}
qps=50 burst=100 event_qps=50 event_burst=100
node=bench-node
export RKUBELET_CNI_BRIDGE=${RKUBELET_CNI_BRIDGE:-rkbench4}
# A /23 holds 250 pods and the gateway; distinct from the other scripts'.
export RKUBELET_CNI_SUBNET=${RKUBELET_CNI_SUBNET:-10.88.246.0/23}
if [ "${BENCH_STATIC:-}" = 1 ] || ! readelf -l "$bin" 2>/dev/null | grep -q INTERP; then
    build=static rss_limit_kb=$((15000000 / 1024))
else
    build=glibc rss_limit_kb=$((30000000 / 1024))
fi
kpid="" dpid="" work=""
failed=()

stop_all() {
    [ -n "$kpid" ] && { kill -9 "$kpid" && wait "$kpid"; } 2>/dev/null || true
    [ -n "$dpid" ] && { kill -9 "$dpid" && wait "$dpid"; } 2>/dev/null || true
    kpid="" dpid=""
    if [ -n "$work" ]; then
        bash "$harness" stop "$work/ctrd" >/dev/null 2>&1 || true
        cgroup_root_remove /rk-bench-scale
        unmount_under "$work"
        rm -rf "$work"
        work=""
    fi
}
trap stop_all EXIT INT TERM

[ -x "$bin" ] || (cd "$root" && cargo build --release)
[ -x "$double" ] || (cd "$root" && cargo build --release -p rkubelet-apiserver-double)
(cd "$root" && cargo build --release -q -p rkubelet-cri --example runtime_floor)
floor_tool=$root/target/release/examples/runtime_floor

die() { echo "$*" >&2; tail -20 "$work/kubelet.log" >&2 2>/dev/null || true; exit 1; }
api() { WORK=$work URL=$url python3 "$root/tests/bench/api.py" "$@"; }
pct() { python3 -c "print(f'{$1:.3f}')"; }
# check NAME OK DETAIL: prints the verdict; a miss is remembered.
check() {
    if [ "$2" = 1 ]; then
        echo "ok   $1: $3"
    else
        echo "FAIL $1: $3"
        failed+=("$1")
    fi
}
le() { python3 -c "import sys; sys.exit(0 if $1 <= $2 else 1)" && echo 1 || echo 0; }

start_node() {
    work=$(mktemp -d /tmp/rk-bench-scale.XXXXXX)
    sock=$(bash "$harness" start "$work/ctrd" 2>"$work/harness.log" | sed -n 's/^CONTAINERD_SOCK=//p')
    [ -n "$sock" ] || { cat "$work/harness.log" >&2; exit 1; }
    "$double" --dir "$work/api" --port 0 --node-name "$node" --latency real \
        --client-qps "$qps" --client-burst "$burst" --event-qps "$event_qps" --event-burst "$event_burst" \
        >"$work/double.stdout" 2>"$work/double.log" &
    dpid=$!
    wait_for 15 grep -q '^LISTENING ' "$work/double.stdout" || { cat "$work/double.log" >&2; exit 1; }
    url=$(sed -n 's/^LISTENING //p' "$work/double.stdout")
    mkdir -p "$work/logs"
    cgroup_root_create /rk-bench-scale
    cat >"$work/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: /rk-bench-scale
podLogsDir: $work/logs
healthzPort: $port
containerRuntimeEndpoint: unix://$sock
failSwapOn: false
maxPods: 250
kubeAPIQPS: $qps
kubeAPIBurst: $burst
eventRecordQPS: $event_qps
eventBurst: $event_burst
CFG
    "$bin" --config "$work/config.yaml" --kubeconfig "$work/api/kubelet-$node.kubeconfig" \
        --root-dir "$work/root" --hostname-override "$node" >"$work/kubelet.log" 2>&1 &
    kpid=$!
    wait_for 30 healthy || die "rkubelet did not become healthy"
    wait_for 30 api node-ready "$node" || die "node $node not Ready in the API within 30 s"
    sleep 5
}

# thread_ns: "tid comm ns-on-cpu" for each of rkubelet's threads.
thread_ns() {
    local t
    for t in /proc/"$kpid"/task/*; do
        echo "${t##*/} $(tr ' ' _ <"$t/comm") $(cut -d' ' -f1 "$t/schedstat")"
    done
}
# by_thread BEFORE AFTER: CPU ms between the two, summed by thread name
# (pod-worker-0..3 as pod-worker-*), largest first.
by_thread() {
    python3 - "$1" "$2" <<'PY'
import re, sys
def read(p):
    return {t: (c, int(ns)) for t, c, ns in (l.split() for l in open(p))}
a, b = read(sys.argv[1]), read(sys.argv[2])
by = {}
for t, (c, ns) in b.items():
    name = re.sub(r"-[0-9]+$", "-*", c)
    by[name] = by.get(name, 0) + ns - a.get(t, (c, 0))[1]
print(" ".join(f"{k}={v / 1e6:.1f}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])))
PY
}

# writes_per_pod N: the node's status patches and event writes since the
# last stats reset, per pod.
writes_per_pod() {
    read -r status events < <(api writes)
    python3 -c "print(f'{$status / $1:.2f} {$events / $1:.2f}')"
}

declare -A idle_rpm
for n in $counts; do
    start_node
    threads0=$(threads)
    echo "scale_${n}_build $build ($bin)"
    echo "scale_${n}_idle_0_pods_threads $threads0"
    echo "scale_${n}_idle_0_pods_rss_kb $(rss_kb) ($(rss_split))"

    # The reference: 30 pods, as the fidelity tests and the 30-pod benches.
    api stats-reset
    api start-pods "$node" 30 120 ref >/dev/null || die "30 reference pods did not become Ready"
    api delete-pods ref 2 60 >/dev/null || die "30 reference pods were not deleted"
    read -r ref_status ref_events < <(writes_per_pod 30)
    sleep 10

    api stats-reset
    read -r ready_s created < <(api start-pods "$node" "$n" 600 plain) || die "$n pods did not become Ready"
    echo "scale_${n}_pods_ready_seconds $ready_s (creating them took $created s)"
    sleep 5
    read -r del_s gone < <(api delete-pods plain 2 600) || die "$n pods were not deleted"
    echo "scale_delete_${gone}_pods_grace_2s_gone_seconds $del_s"
    read -r status events < <(writes_per_pod "$n")
    check "scale_${n}_status_patches_per_pod" "$(le "$status" "1.1 * $ref_status")" \
        "$status (30 pods: $ref_status)"
    check "scale_${n}_event_writes_per_pod" "$(le "$events" "1.1 * $ref_events")" \
        "$events (30 pods: $ref_events)"
    sleep 10

    read -r _ _ < <(api start-pods "$node" "$n" 600 probed) || die "$n probed pods did not become Ready"
    sleep "$settle_secs"
    api stats-reset
    thread_ns >"$work/threads0"
    n0=$(cpu_ns)
    sleep "$idle_secs"
    n1=$(cpu_ns)
    thread_ns >"$work/threads1"
    idle=$(pct "($n1 - $n0) / 1e9 / $idle_secs * 100")
    read -r rpm _ < <(api stats "system:node:$node" total)
    idle_rpm[$n]=$rpm
    check "scale_${n}_probed_pods_idle_cpu_percent" "$(le "$idle" 0.3)" \
        "$idle (over $idle_secs s, schedstat; bar 0.3)"
    echo "scale_${n}_probed_pods_idle_cpu_ms_by_thread $(by_thread "$work/threads0" "$work/threads1")"
    # The same connects with no kubelet: what the kernel charges for them.
    read -r floor_ms probed _ < <(api probe-floor probed 6)
    echo "scale_${n}_probe_floor_cpu_ms_per_min $floor_ms (a process connecting to the $probed pods' :8080 six times, as their probes do in a minute; rkubelet's probe-worker threads above)"
    echo "scale_${n}_probed_pods_idle_api_requests_per_min $rpm ($(api stats "system:node:$node" breakdown))"
    rss=$(rss_kb)
    check "scale_${n}_probed_pods_rss_kb" "$(le "$rss" "$rss_limit_kb")" \
        "$rss ($(rss_split); $build bar $rss_limit_kb)"
    t=$(threads)
    check "scale_${n}_probed_pods_threads" "$([ "$t" = "$threads0" ] && echo 1 || echo 0)" \
        "$t (0 pods: $threads0)"
    api delete-pods probed 2 600 >/dev/null || die "$n probed pods were not deleted"
    over=$(api over-limits "system:node:")
    check "scale_${n}_requests_over_client_limits" "$([ "${over%% *}" = 0 ] && echo 1 || echo 0)" "$over"
    kill -0 "$kpid" 2>/dev/null || die "rkubelet died during the bench"

    # The runtime alone, on the same containerd, rkubelet gone.
    { kill -9 "$kpid" && wait "$kpid"; } 2>/dev/null || true
    kpid=""
    floor=$("$floor_tool" "unix://$sock" "$n" 4 2 /rk-bench-scale "$work/floor-logs")
    echo "$floor"
    floor_ready=$(sed -n 's/^runtime_floor_.*_started_seconds \([0-9.]*\).*/\1/p' <<<"$floor")
    floor_del=$(sed -n 's/^runtime_floor_.*_sandboxes_stopped_seconds \([0-9.]*\).*/\1/p' <<<"$floor")
    check "scale_${n}_ready_vs_floor" "$(le "$ready_s" "1.1 * $floor_ready")" \
        "$ready_s s against the runtime's $floor_ready s (bar +10 %)"
    check "scale_${n}_delete_vs_floor" "$(le "$del_s" "1.1 * $floor_del")" \
        "$del_s s against the runtime's $floor_del s (bar +10 %)"
    stop_all
done

read -r -a ns <<<"$counts"
if [ "${#ns[@]}" -gt 1 ]; then
    lo=${ns[0]} hi=${ns[${#ns[@]}-1]}
    check "scale_idle_api_requests_flat" "$(le "${idle_rpm[$hi]}" "${idle_rpm[$lo]} + 2")" \
        "${idle_rpm[$hi]}/min at $hi pods, ${idle_rpm[$lo]}/min at $lo"
fi
if [ "${#failed[@]}" -gt 0 ]; then
    echo "scale: ${#failed[@]} figures missed their bar: ${failed[*]}" >&2
    exit 1
fi
