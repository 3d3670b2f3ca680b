#!/usr/bin/env bash
# Probe load benchmark: rkubelet standalone against a private containerd
# (tests/harness), 110 static pods (maxPods) with 3 probes each:
#   startupProbe   exec `true`              period 2 s  (stops once it succeeds)
#   readinessProbe httpGet :8080/ready.html period 10 s
#   livenessProbe  tcpSocket :8080          period 10 s
# against a busybox httpd in every pod (`httpd -v` logs each request, so the
# container logs time-stamp every readiness check as the pod saw it).
# Exec probes go through CRI ExecSync, which is expensive in containerd, so the
# steady-state probes are network ones at realistic periods.
#
# Prints one figure per line:
#   threads and RSS (anon/file split) with 0 pods, and with 110 pods x 3 probes
#   time until all pods run, CPU seconds rkubelet uses per 60 s of probing
#   probe scheduling jitter: |interval - period| between consecutive readiness
#   checks of each pod, as seen by its httpd (mean, p50, p99, max), and the
#   number of Unhealthy events (should be 0)
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
BENCH_POLL=${BENCH_POLL:-0.2}
# shellcheck source=tests/bench/lib.sh source-path=SCRIPTDIR/../..
. "$root/tests/bench/lib.sh"
bin=${BENCH_BIN:-$root/target/release/rkubelet}
harness=$root/tests/harness/containerd.sh
pods=${BENCH_PROBE_PODS:-110}
probe_secs=${BENCH_PROBE_SECS:-60}
port=${BENCH_PROBE_HEALTHZ_PORT:-10392}
work=$(mktemp -d /tmp/rk-bench-probes.XXXXXX)
export RKUBELET_CNI_BRIDGE=${RKUBELET_CNI_BRIDGE:-rkbench2}
# A /22 (1022 addresses) so 110 pods fit; distinct from run.sh's 10.88.240.0/24
# and cluster.sh's 10.88.241.0/24.
export RKUBELET_CNI_SUBNET=${RKUBELET_CNI_SUBNET:-10.88.244.0/22}
kpid=""

cleanup() {
    [ -n "$kpid" ] && kill -9 "$kpid" 2>/dev/null || true
    if [ -n "${BENCH_KEEP_LOGS:-}" ]; then
        mkdir -p "$BENCH_KEEP_LOGS"
        cp -r "$work/logs" "$work/kubelet.log" "$BENCH_KEEP_LOGS/" 2>/dev/null || true
        [ -n "${sock:-}" ] && ctr_ containers ls >"$BENCH_KEEP_LOGS/containers.txt" 2>&1 || true
    fi
    bash "$harness" stop "$work/ctrd" >/dev/null 2>&1 || true
    cgroup_root_remove /rk-bench-probes
    unmount_under "$work"
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

[ -x "$bin" ] || (cd "$root" && cargo build --release)

sock=$(bash "$harness" start "$work/ctrd" 2>"$work/harness.log" | sed -n 's/^CONTAINERD_SOCK=//p')
[ -n "$sock" ] || { echo "containerd harness failed:" >&2; tail -20 "$work/harness.log" >&2; exit 1; }
ctr_() { ctr --address "$sock" -n k8s.io "$@"; }

mkdir -p "$work/manifests" "$work/logs"
cgroup_root_create /rk-bench-probes
cat >"$work/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: /rk-bench-probes
podLogsDir: $work/logs
fileCheckFrequency: 5s
healthzPort: $port
enableServer: false
maxPods: 110
failSwapOn: false
CFG

"$bin" --config "$work/config.yaml" --pod-manifest-path "$work/manifests" \
    --container-runtime-endpoint "unix://$sock" --root-dir "$work/root" \
    --hostname-override bench-node >"$work/kubelet.log" 2>&1 &
kpid=$!

running_tasks() { ctr_ tasks ls 2>/dev/null | awk 'NR>1 && $3=="RUNNING"' | wc -l; }

wait_for 30 healthy || { echo "rkubelet did not become healthy" >&2; tail -20 "$work/kubelet.log" >&2; exit 1; }
sleep 5
echo "probes_0_pods_threads $(threads)"
echo "probes_0_pods_rss_kb $(rss_kb) ($(rss_split))"

for i in $(seq 1 "$pods"); do
    cat >"$work/manifests/.p$i.yaml" <<POD
apiVersion: v1
kind: Pod
metadata:
  name: probe-$i
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: web
    image: docker.io/library/busybox:1.36
    imagePullPolicy: IfNotPresent
    command: ["sh", "-c", "trap 'exit 0' TERM; mkdir -p /www; echo ok >/www/ready.html; httpd -f -v -p 8080 -h /www & wait"]
    startupProbe:
      exec: {command: ["true"]}
      periodSeconds: 2
      failureThreshold: 30
    readinessProbe:
      httpGet: {path: /ready.html, port: 8080}
      periodSeconds: 10
    livenessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 10
POD
done
start=$(date +%s.%N)
for i in $(seq 1 "$pods"); do mv "$work/manifests/.p$i.yaml" "$work/manifests/p$i.yaml"; done
wait_for 300 bash -c "[ \$(ctr --address '$sock' -n k8s.io tasks ls 2>/dev/null | awk 'NR>1 && \$3==\"RUNNING\"' | wc -l) -ge $((2 * pods)) ]" \
    || { echo "not all pods ran: $(running_tasks) tasks running" >&2; tail -20 "$work/kubelet.log" >&2; exit 1; }
end=$(date +%s.%N)
echo "probes_start_${pods}_pods_seconds $(echo "$end - $start" | bc -l | xargs printf '%.2f')"

# Let startup probes finish and the readiness/liveness cadence settle.
sleep 20
t0=$(cpu_ticks)
mark=$(date -u +%Y-%m-%dT%H:%M:%S)
sleep "$probe_secs"
t1=$(cpu_ticks)
hz=$(getconf CLK_TCK)
echo "probes_${pods}_pods_threads $(threads)"
echo "probes_${pods}_pods_rss_kb $(rss_kb) ($(rss_split))"
echo "probes_${pods}_pods_cpu_seconds_per_${probe_secs}s $(echo "($t1 - $t0) / $hz" | bc -l | xargs printf '%.2f')"
echo "probes_thread_names $(ls /proc/$kpid/task | while read -r t; do cat "/proc/$kpid/task/$t/comm"; done | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}')"

# Jitter: CRI log lines are "<RFC3339Nano> <stream> <P|F> <text>"; httpd -v
# logs "IP:PORT: response:200" per HTTP request, i.e. per readiness check
# (the tcpSocket liveness check sends no request, so it logs nothing). Intervals between
# consecutive checks of one pod (after $mark), minus the 10 s period.
find "$work/logs" -name '0.log' -path '*/web/*' | while read -r f; do
    awk -v mark="$mark" -v file="$f" '
        $0 ~ /response:/ && substr($1, 1, 19) >= mark {
            split(substr($1, 12), hms, ":")
            t = hms[1] * 3600 + hms[2] * 60 + hms[3]
            if (prev != "") { d = t - prev; if (d < 0) d += 86400; print d }
            prev = t
        }' "$f"
done >"$work/intervals"
n=$(wc -l <"$work/intervals")
if [ "$n" -gt 0 ]; then
    sort -g "$work/intervals" | awk '{ dev = $1 - 10; if (dev < 0) dev = -dev; print dev * 1000 }' | sort -g >"$work/devs"
    awk -v n="$n" '{ v[NR] = $1; s += $1 } END {
        p50 = v[int((n - 1) * 0.50) + 1]; p99 = v[int((n - 1) * 0.99) + 1]
        printf "probes_readiness_intervals %d\n", n
        printf "probes_jitter_ms mean=%.1f p50=%.1f p99=%.1f max=%.1f\n", s / n, p50, p99, v[n] }' "$work/devs"
    sort -g "$work/intervals" | awk 'NR==1 {min=$1} {max=$1} END {printf "probes_readiness_interval_s min=%.3f max=%.3f (period 10)\n", min, max}'
else
    echo "probes_jitter_ms unavailable (no httpd request lines in the container logs); the prober unit-test figure stands"
fi
echo "probes_unhealthy_events $(grep -c 'Unhealthy' "$work/kubelet.log" || true)"
echo "probes_restarts $(ctr_ containers ls -q 2>/dev/null | wc -l | awk -v p="$pods" '{print $1 - 2 * p}') (containers beyond one app + one sandbox per pod)"
