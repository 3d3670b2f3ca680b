#!/usr/bin/env bash
# make bench, cluster mode: rkubelet with --kubeconfig against the API server
# double (tests/apiserver) and a private containerd (tests/harness).
# Prints one line per figure:
#
#   time from creating 30 pods bound to the node (as fast as one client can)
#   until all 30 report Ready=True in the API
#   RSS and thread count of rkubelet idle with 0 API pods, then with 30
#   the same for 30 more pods with a token, a configMap and a secret volume each
#   API requests per minute by rkubelet while idle with all 60 pods, over 60 s
#   after things settle, in total and by verb+resource
#   the 30 plain pods deleted at once with grace 2 s, then the 30 volume pods
#   with grace 10 s (containers ignore SIGTERM): seconds until gone from the
#   API, and the most threads seen meanwhile
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

cleanup() {
    # (waited for, so that bash does not report them as Killed)
    [ -n "$kpid" ] && { kill -9 "$kpid" && wait "$kpid"; } 2>/dev/null || true
    [ -n "$dpid" ] && { kill -9 "$dpid" && wait "$dpid"; } 2>/dev/null || true
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

# A tiny admin client (python3 standard library): api.py METHOD PATH [JSON]
cat >"$work/api.py" <<'PY'
import http.client, json, os, ssl, sys, time

work = os.environ["WORK"]
url = os.environ["URL"]
host, port = url.split("//")[1].split(":")
ctx = ssl.create_default_context(cafile=f"{work}/api/ca.crt")
token = open(f"{work}/api/admin-token").read().strip()
conn = None

def call(method, path, body=None):
    global conn
    for attempt in range(3):
        try:
            if conn is None:
                conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=10)
            h = {"Authorization": "Bearer " + token, "User-Agent": "rk-bench/1"}
            data = None
            if body is not None:
                data = json.dumps(body)
                h["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            text = r.read()
            return r.status, (json.loads(text) if text else None)
        except (OSError, http.client.HTTPException):
            conn = None
            if attempt == 2:
                raise

def ready(p):
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in p.get("status", {}).get("conditions", []))

cmd = sys.argv[1]
if cmd == "node-ready":
    code, n = call("GET", "/api/v1/nodes/" + sys.argv[2])
    sys.exit(0 if code == 200 and ready(n) else 1)
elif cmd == "start-pods":
    # plain: no volumes at all (automountServiceAccountToken false), the
    # figure comparable with earlier runs; volumes: the admission's projected
    # token volume plus a configMap and a secret volume each.
    node, n, limit, kind = sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
    def pod(i):
        spec = {"nodeName": node, "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "sleep", "image": "docker.io/library/busybox:1.36",
                                "imagePullPolicy": "IfNotPresent",
                                "command": ["sleep", "100000"]}]}
        if kind == "plain":
            spec["automountServiceAccountToken"] = False
        else:
            spec["volumes"] = [{"name": "cfg", "configMap": {"name": "bench-config"}},
                               {"name": "sec", "secret": {"secretName": "bench-secret"}}]
            spec["containers"][0]["volumeMounts"] = [
                {"name": "cfg", "mountPath": "/cfg"}, {"name": "sec", "mountPath": "/sec"}]
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"bench-{kind}-{i}", "namespace": "default",
                             "labels": {"bench": kind}},
                "spec": spec}
    if kind != "plain":
        call("POST", "/api/v1/namespaces/default/configmaps",
             {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bench-config"},
              "data": {"a": "1"}})
        call("POST", "/api/v1/namespaces/default/secrets",
             {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bench-secret"},
              "data": {"k": "dg=="}})
    pods = [pod(i) for i in range(1, n + 1)]
    t0 = time.monotonic()
    for p in pods:
        code, body = call("POST", "/api/v1/namespaces/default/pods", p)
        if code != 201:
            sys.exit(f"create {p['metadata']['name']}: {code} {body}")
    created = time.monotonic() - t0
    while True:
        code, lst = call("GET", "/api/v1/namespaces/default/pods?labelSelector=bench%3D" + kind)
        n_ready = sum(1 for p in lst["items"] if ready(p)) if code == 200 else 0
        if n_ready >= n:
            break
        if time.monotonic() - t0 > limit:
            sys.exit(f"only {n_ready}/{n} pods Ready after {limit} s")
        time.sleep(0.05)
    print(f"{time.monotonic() - t0:.2f} {created:.2f}")
elif cmd == "delete-pods":
    # DELETE every pod of a kind at once with the given grace (busybox sleep
    # as PID 1 ignores SIGTERM, so each one takes the whole grace period);
    # seconds until none is left in the API.
    kind, grace, limit = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    sel = "/api/v1/namespaces/default/pods?labelSelector=bench%3D" + kind
    code, lst = call("GET", sel)
    names = [p["metadata"]["name"] for p in lst["items"]]
    t0 = time.monotonic()
    for n in names:
        code, body = call("DELETE", "/api/v1/namespaces/default/pods/" + n,
                          {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace})
        if code not in (200, 202):
            sys.exit(f"delete {n}: {code} {body}")
    while True:
        code, lst = call("GET", sel)
        if code == 200 and not lst["items"]:
            break
        if time.monotonic() - t0 > limit:
            sys.exit(f"{len(lst['items'])} pods still in the API after {limit} s")
        time.sleep(0.05)
    print(f"{time.monotonic() - t0:.2f} {len(names)}")
elif cmd == "stats-reset":
    call("POST", "/__double/stats/reset", {})
elif cmd == "stats":
    user, kind = sys.argv[2], sys.argv[3]
    code, s = call("GET", "/__double/stats")
    secs = s["elapsedSeconds"]
    per_min = lambda c: c * 60.0 / secs
    if kind == "total":
        print(f"{per_min(s['byUser'].get(user, 0)):.1f} (all clients {s['perMinute']:.1f}, over {secs:.0f} s)")
    else:
        print(" ".join(f"{k.replace(' ', ':')}={per_min(v):.1f}"
                       for k, v in sorted(s["byVerbResource"].items(), key=lambda kv: -kv[1])))
PY
api() { WORK=$work URL=$url python3 "$work/api.py" "$@"; }


wait_for 30 healthy || fail "rkubelet did not become healthy"
wait_for 30 api node-ready "$node" || fail "node $node not Ready in the API within 30 s"
sleep 5
echo "cluster_idle_0_pods_rss_kb $(rss_kb) ($(rss_split))"
echo "cluster_idle_0_pods_threads $(threads)"

read -r took created < <(api start-pods "$node" "$pods" 120 plain) || fail "pods did not become Ready"
echo "cluster_${pods}_api_pods_ready_seconds $took (creating them took ${created} s; target <= 6 s)"

sleep 10
rss_plain=$(rss_kb)
echo "cluster_idle_${pods}_pods_rss_kb $rss_plain ($(rss_split))"
echo "cluster_idle_${pods}_pods_threads $(threads)"

# Then as many again, each with the default token volume, a configMap and a
# secret volume (issue 8's figures): time to Ready, RSS per added pod.
read -r took created < <(api start-pods "$node" "$pods" 120 volumes) || fail "volume pods did not become Ready"
echo "cluster_${pods}_volume_pods_ready_seconds $took (token + configMap + secret each; creating them took ${created} s; target <= 6 s)"
sleep 10
rss_vol=$(rss_kb)
echo "cluster_idle_${pods}_plus_${pods}_volume_pods_rss_kb $rss_vol ($(rss_split)); per added volume pod $(( (rss_vol - rss_plain) / pods )) KB (target <= 50)"
echo "cluster_idle_${pods}_plus_${pods}_volume_pods_threads $(threads)"

sleep "$settle_secs"
api stats-reset
sleep "$idle_secs"
echo "cluster_idle_$((pods * 2))_pods_api_requests_per_min $(api stats "system:node:$node" total)"
echo "cluster_idle_$((pods * 2))_pods_api_requests_per_min_by_verb_resource $(api stats "system:node:$node" breakdown)"

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
