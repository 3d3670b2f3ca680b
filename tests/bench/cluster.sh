#!/usr/bin/env bash
# make bench, cluster mode: rkubelet with --kubeconfig against the API server
# double (tests/apiserver) and a private containerd (tests/harness).
# Prints one line per figure:
#
#   time from creating 30 pods bound to the node (as fast as one client can)
#   until all 30 report Ready=True in the API
#   RSS and thread count of rkubelet idle with 0 API pods, then with 30
#   the same for 30 more pods with a token, a configMap and a secret volume
#   each, and for 30 more such pods (the RSS they add is the per-pod figure)
#   API requests per minute by rkubelet while idle with all 90 pods, over 60 s
#   after things settle, in total and by verb+resource
#   the second 30 volume pods deleted at once with grace 2 s; then, as in
#   earlier runs, the 30 plain pods with grace 2 s and the first 30 volume
#   pods with grace 10 s (containers ignore SIGTERM): seconds until gone from
#   the API, and the most threads seen meanwhile
#   then a device plugin (tests/plugins/deviceplugin.py, 30 devices) and 30
#   pods asking for one device each: time to Ready, RSS per pod, threads;
#   then a CSI driver (tests/plugins/csidriver.py) and 30 pods with one CSI
#   PV each: the same figures
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
port=${BENCH_HEALTHZ_PORT:-10392}
node=bench-node
work=$(mktemp -d /tmp/rk-bench-cluster.XXXXXX)
export RKUBELET_CNI_BRIDGE=${RKUBELET_CNI_BRIDGE:-rkbench1}
export RKUBELET_CNI_SUBNET=${RKUBELET_CNI_SUBNET:-10.88.241.0/24}
kpid=""
dpid=""
ppid_plugin=""
pid_driver=""

cleanup() {
    # (waited for, so that bash does not report them as Killed)
    [ -n "$kpid" ] && { kill -9 "$kpid" && wait "$kpid"; } 2>/dev/null || true
    [ -n "$dpid" ] && { kill -9 "$dpid" && wait "$dpid"; } 2>/dev/null || true
    [ -n "$ppid_plugin" ] && { kill -9 "$ppid_plugin" && wait "$ppid_plugin"; } 2>/dev/null || true
    [ -n "$pid_driver" ] && { kill -9 "$pid_driver" && wait "$pid_driver"; } 2>/dev/null || true
    bash "$harness" stop "$work/ctrd" >/dev/null 2>&1 || true
    cgroup_root_remove /rk-bench-cluster
    unmount_under "$work"
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

[ -x "$bin" ] || (cd "$root" && cargo build --release)
[ -x "$double" ] || (cd "$root" && cargo build --release -p rkubelet-apiserver-double)

fail() { echo "$*" >&2; tail -20 "$work/kubelet.log" >&2 2>/dev/null || true; exit 1; }

sock=$(bash "$harness" start "$work/ctrd" 2>"$work/harness.log" | sed -n 's/^CONTAINERD_SOCK=//p')
[ -n "$sock" ] || { cat "$work/harness.log" >&2; exit 1; }

"$double" --dir "$work/api" --port 0 --node-name "$node" >"$work/double.stdout" 2>"$work/double.log" &
dpid=$!
wait_for 15 grep -q '^LISTENING ' "$work/double.stdout" || { cat "$work/double.log" >&2; exit 1; }
url=$(sed -n 's/^LISTENING //p' "$work/double.stdout")

mkdir -p "$work/logs"
cgroup_root_create /rk-bench-cluster
cat >"$work/config.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupRoot: /rk-bench-cluster
podLogsDir: $work/logs
healthzPort: $port
containerRuntimeEndpoint: unix://$sock
failSwapOn: false
CFG

"$bin" --config "$work/config.yaml" --kubeconfig "$work/api/kubelet-$node.kubeconfig" \
    --root-dir "$work/root" --hostname-override "$node" >"$work/kubelet.log" 2>&1 &
kpid=$!

api() { WORK=$work URL=$url python3 "$root/tests/bench/api.py" "$@"; }


wait_for 30 healthy || fail "rkubelet did not become healthy"
wait_for 30 api node-ready "$node" || fail "node $node not Ready in the API within 30 s"
sleep 5
echo "cluster_idle_0_pods_rss_kb $(rss_kb) ($(rss_split))"
echo "cluster_idle_0_pods_threads $(threads)"

read -r took created < <(api start-pods "$node" "$pods" 120 plain) || fail "pods did not become Ready"
echo "cluster_${pods}_api_pods_ready_seconds $took (creating them took ${created} s; target <= 6 s)"

sleep 10
echo "cluster_idle_${pods}_pods_rss_kb $(rss_kb) ($(rss_split))"
echo "cluster_idle_${pods}_pods_threads $(threads)"
# And once idle code has been unmapped (housekeeping does it every 60 s,
# util/memory/code.rs), as run.sh reads it after its idle minute.
sleep "$idle_secs"
# The per-pod figures below start from here, after the trim, and are given
# both in RSS and in anonymous memory (which no trim touches).
rss_plain=$(rss_kb)
anon_plain=$(anon_kb)
echo "cluster_idle_${pods}_pods_rss_kb_after_${idle_secs}s $rss_plain ($(rss_split))"

# Then as many again, each with the default token volume, a configMap and a
# secret volume (issue 8's figures): time to Ready, RSS per added pod. The
# first 30 also start what volumes need once (the token manager's and the
# object watches' state, deeper stacks); the next 30 add only what a pod
# costs, which is the per-pod figure.
read -r took created < <(api start-pods "$node" "$pods" 120 volumes) || fail "volume pods did not become Ready"
echo "cluster_${pods}_volume_pods_ready_seconds $took (token + configMap + secret each; creating them took ${created} s; target <= 6 s)"
sleep 10
rss_vol=$(rss_kb)
anon_vol=$(anon_kb)
echo "cluster_idle_${pods}_plus_${pods}_volume_pods_rss_kb $rss_vol ($(rss_split)); $(( (rss_vol - rss_plain) / pods )) KB per volume pod (anon $(( (anon_vol - anon_plain) / pods ))), with the volume machinery's first start"
read -r took created < <(api start-pods "$node" "$pods" 120 volumes2) || fail "the second volume pods did not become Ready"
echo "cluster_${pods}_more_volume_pods_ready_seconds $took"
sleep 10
rss_vol2=$(rss_kb)
anon_vol2=$(anon_kb)
echo "cluster_idle_${pods}_plus_$((pods * 2))_volume_pods_rss_kb $rss_vol2 ($(rss_split)); per added volume pod $(( (rss_vol2 - rss_vol) / pods )) KB (anon $(( (anon_vol2 - anon_vol) / pods ))) (target <= 50)"
echo "cluster_idle_${pods}_plus_$((pods * 2))_volume_pods_threads $(threads)"

sleep "$settle_secs"
api stats-reset
sleep "$idle_secs"
echo "cluster_idle_$((pods * 3))_pods_api_requests_per_min $(api stats "system:node:$node" total)"
echo "cluster_idle_$((pods * 3))_pods_api_requests_per_min_by_verb_resource $(api stats "system:node:$node" breakdown)"

# The second volume pods go first, so that the deletion figures below are
# taken with the 60 pods of earlier runs.
read -r took n < <(api delete-pods volumes2 2 60) || fail "the second volume pods were not deleted"
echo "cluster_delete_${n}_more_volume_pods_grace_2s_gone_from_api_seconds $took"
# (their teardown, sandboxes and volumes, done before the next figures)
sleep 15

# Issue 9's deletion figures: stops overlap, no worker waits a grace period.
# Thread count sampled throughout (max).
max_threads() {
    local m=0 t
    while kill -0 "$kpid" 2>/dev/null && [ ! -e "$work/stop-sampling" ]; do
        t=$(threads); [ "$t" -gt "$m" ] && m=$t; echo "$m" >"$work/threads-max"; sleep 0.1
    done
}
rm -f "$work/stop-sampling"; max_threads & sampler=$!
read -r took n < <(api delete-pods plain 2 60) || fail "plain pods were not deleted"
echo "cluster_delete_${n}_pods_grace_2s_gone_from_api_seconds $took (target <= 5)"
read -r took n < <(api delete-pods volumes 10 60) || fail "volume pods were not deleted"
echo "cluster_delete_${n}_pods_grace_10s_gone_from_api_seconds $took (gone from the runtime before that; target <= 12)"
touch "$work/stop-sampling"; wait "$sampler" || true
echo "cluster_delete_threads_max $(cat "$work/threads-max") (after: $(threads))"
kill -0 "$kpid" 2>/dev/null || fail "rkubelet died during the bench"

# pods_of KIND NAME WHAT: $pods pods of api.py's KIND (each with one NAME)
# made Ready, their RSS and threads against the figures before, then
# deleted with a 2 s grace; WHAT says what each pod has.
pods_of() {
    local kind=$1 name=$2 what=$3 took created n rss anon
    read -r took created < <(api start-pods "$node" "$pods" 120 "$kind") || fail "$name pods did not become Ready"
    echo "cluster_${pods}_${name}_pods_ready_seconds $took ($what; creating them took ${created} s)"
    sleep 10
    rss=$(rss_kb)
    anon=$(anon_kb)
    echo "cluster_${pods}_${name}_pods_rss_kb $rss ($(rss_split)); per $name pod $(( (rss - rss_before) / pods )) KB (anon $(( (anon - anon_before) / pods )))"
    echo "cluster_${pods}_${name}_pods_threads $(threads)"
    read -r took n < <(api delete-pods "$kind" 2 90) || fail "$name pods were not deleted"
    echo "cluster_delete_${n}_${name}_pods_grace_2s_gone_from_api_seconds $took"
    kill -0 "$kpid" 2>/dev/null || fail "rkubelet died during the $name bench"
}

# Device plugins: 30 pods with one device each, from a plugin written to
# the v1beta1 text. Their cost over the same number of plain pods is the
# device manager's (Allocate on the completion queue, the checkpoint).
sleep 10
rss_before=$(rss_kb)
anon_before=$(anon_kb)
/usr/bin/python3 "$root/tests/plugins/deviceplugin.py" --dir "$work/root/device-plugins" \
    --devices "$pods" --mount-dir "$work/widget-data" >"$work/plugin.log" 2>&1 &
ppid_plugin=$!
wait_for 30 api node-allocatable "$node" example.com/widget "$pods" || fail "the device plugin's $pods devices are not in the node's allocatable"
echo "cluster_device_plugin_threads $(threads)"
pods_of devices device "one example.com/widget each"
kill "$ppid_plugin" 2>/dev/null || true

# CSI: 30 pods with one CSI PV each (its own claim), from the driver peer
# written to the CSI spec text and registered through plugins_registry/.
# Their cost over plain pods is the CSI plugin's: stage and publish on the
# completion queue, vol_data.json, the bind mounts the driver makes; the
# delete includes unpublish and unstage.
sleep 10
rss_before=$(rss_kb)
anon_before=$(anon_kb)
mkdir -p "$work/root/plugins/csi.example.com"
/usr/bin/python3 "$root/tests/plugins/csidriver.py" --name csi.example.com \
    --csi-address "$work/root/plugins/csi.example.com/csi.sock" --registry "$work/root/plugins_registry" \
    --data "$work/csi-data" >"$work/csi-driver.log" 2>&1 &
pid_driver=$!
wait_for 30 api csi-driver-registered "$node" csi.example.com || fail "the CSI driver did not register (CSINode)"
echo "cluster_csi_driver_threads $(threads)"
pods_of csi csi "one CSI PV each, staged and published"
kill "$pid_driver" 2>/dev/null || true
