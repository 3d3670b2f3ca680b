#!/usr/bin/env bash
# make soak (not in CI): pod churn with probes and logs through rkubelet,
# standalone and cluster mode side by side, each against its own private
# containerd, for SOAK_SECS (default 3600). tests/bench/soak.py churns and
# samples RSS, threads, open fds and CPU every SOAK_SAMPLE_SECS (60) into
# a CSV and prints the slope of each; gnuplot (Debian's gnuplot-nox,
# installed if missing) draws them into one PNG.
#
#   bash tests/bench/soak.sh [both|standalone|cluster|plot]
#
# (`plot` only draws the PNG again from the CSVs in SOAK_OUT.)
#
# Settable: SOAK_SECS, SOAK_SAMPLE_SECS, SOAK_CHURN_SECS (20: two pods
# replaced), SOAK_POOL (10 pods), SOAK_WARMUP_SECS (300: left out of the
# slopes), SOAK_OUT (tests/bench/results: CSVs, figures, soak.png).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/bench/lib.sh source-path=SCRIPTDIR/../..
. "$root/tests/bench/lib.sh"
bin=${BENCH_BIN:-$root/target/release/rkubelet}
double=${BENCH_DOUBLE_BIN:-$root/target/release/apiserver-double}
harness=$root/tests/harness/containerd.sh
out=${SOAK_OUT:-$root/tests/bench/results}
mode=${1:-both}
mkdir -p "$out"

plot() {
    command -v gnuplot >/dev/null ||
        { echo "installing gnuplot-nox" >&2; apt-get install -y -q gnuplot-nox >/dev/null; }
    gnuplot <<GP
set terminal pngcairo size 1000,900 font ",10"
set output "$out/soak.png"
set datafile separator ","
set key autotitle columnhead
set multiplot layout 3,1 title "rkubelet soak: $(date -u -r "$out/soak-cluster.csv" +%F), $(( ${SOAK_SECS:-3600} / 60 )) min, ${SOAK_POOL:-10} pods, 2 replaced every ${SOAK_CHURN_SECS:-20} s"
set xlabel "minutes"
set grid
set ylabel "RSS (MiB)"
plot "$out/soak-standalone.csv" using (\$1/60):(\$2/1024) with linespoints title "standalone", \
     "$out/soak-cluster.csv" using (\$1/60):(\$2/1024) with linespoints title "cluster"
set ylabel "threads"
plot "$out/soak-standalone.csv" using (\$1/60):3 with linespoints title "standalone", \
     "$out/soak-cluster.csv" using (\$1/60):3 with linespoints title "cluster"
set ylabel "open fds"
plot "$out/soak-standalone.csv" using (\$1/60):4 with linespoints title "standalone", \
     "$out/soak-cluster.csv" using (\$1/60):4 with linespoints title "cluster"
unset multiplot
GP
    echo "plot: $out/soak.png"
}

if [ "$mode" = plot ]; then
    plot
    exit 0
fi
if [ "$mode" = both ]; then
    [ -x "$bin" ] || (cd "$root" && cargo build --release)
    [ -x "$double" ] || (cd "$root" && cargo build --release -p rkubelet-apiserver-double)
    bash "$0" standalone >"$out/soak-standalone.txt" 2>&1 &
    a=$!
    bash "$0" cluster >"$out/soak-cluster.txt" 2>&1 &
    b=$!
    ra=0 rb=0
    wait "$a" || ra=$?
    wait "$b" || rb=$?
    cat "$out/soak-standalone.txt" "$out/soak-cluster.txt"
    [ "$ra" = 0 ] && [ "$rb" = 0 ] || { echo "soak failed (standalone $ra, cluster $rb)" >&2; exit 1; }
    plot
    exit 0
fi

case $mode in
standalone) n=0 ;;
cluster) n=1 ;;
*) echo "usage: $0 [both|standalone|cluster|plot]" >&2; exit 2 ;;
esac
node=soak-node
cgroot=/rk-soak-$mode
port=$((10395 + n))
work=$(mktemp -d "/tmp/rk-soak-$mode.XXXXXX")
export RKUBELET_CNI_BRIDGE=rksoak$n
export RKUBELET_CNI_SUBNET=10.88.$((244 + n)).0/24
kpid=""
dpid=""

cleanup() {
    [ -n "$kpid" ] && { kill -9 "$kpid" && wait "$kpid"; } 2>/dev/null || true
    [ -n "$dpid" ] && { kill -9 "$dpid" && wait "$dpid"; } 2>/dev/null || true
    bash "$harness" stop "$work/ctrd" >/dev/null 2>&1 || true
    cgroup_root_remove "$cgroot"
    unmount_under "$work"
    rm -rf "$work"
}
trap cleanup EXIT INT TERM
fail() { echo "$*" >&2; tail -20 "$work/kubelet.log" >&2 2>/dev/null || true; exit 1; }

sock=$(bash "$harness" start "$work/ctrd" 2>"$work/harness.log" | sed -n 's/^CONTAINERD_SOCK=//p')
[ -n "$sock" ] || { cat "$work/harness.log" >&2; exit 1; }
mkdir -p "$work/manifests" "$work/logs"
cgroup_root_create "$cgroot"
cat >"$work/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: $cgroot
podLogsDir: $work/logs
healthzPort: $port
port: $((10350 + n))
readOnlyPort: 0
containerRuntimeEndpoint: unix://$sock
fileCheckFrequency: 5s
failSwapOn: false
containerLogMaxSize: 1Mi
CFG

args=(--config "$work/config.yaml" --root-dir "$work/root" --hostname-override "$node")
if [ "$mode" = cluster ]; then
    "$double" --dir "$work/api" --port 0 --node-name "$node" >"$work/double.stdout" 2>"$work/double.log" &
    dpid=$!
    wait_for 15 grep -q '^LISTENING ' "$work/double.stdout" || { cat "$work/double.log" >&2; exit 1; }
    export URL WORK=$work
    URL=$(sed -n 's/^LISTENING //p' "$work/double.stdout")
    args+=(--kubeconfig "$work/api/kubelet-$node.kubeconfig")
else
    args+=(--pod-manifest-path "$work/manifests")
fi
"$bin" "${args[@]}" >"$work/kubelet.log" 2>&1 &
kpid=$!
wait_for 30 healthy || fail "rkubelet did not become healthy"
if [ "$mode" = cluster ]; then
    wait_for 30 python3 "$root/tests/bench/api.py" node-ready "$node" || fail "node not Ready"
fi

python3 "$root/tests/bench/soak.py" --mode "$mode" --pid "$kpid" --node "$node" \
    --manifests "$work/manifests" --csv "$out/soak-$mode.csv" \
    --secs "${SOAK_SECS:-3600}" --sample "${SOAK_SAMPLE_SECS:-60}" \
    --every "${SOAK_CHURN_SECS:-20}" --pool "${SOAK_POOL:-10}" \
    --warmup "${SOAK_WARMUP_SECS:-300}" || fail "soak ($mode) failed"
echo "soak_${mode}_thread_names $(ls "/proc/$kpid/task" | while read -r t; do cat "/proc/$kpid/task/$t/comm"; done | sort | uniq -c | awk '{printf "%s=%s ", $2, $1}')"
