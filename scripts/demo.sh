#!/usr/bin/env bash
# `make demo`: runs rkubelet in standalone mode with the static pods of
# etc/manifests against a private containerd (tests/harness/containerd.sh).
# Needs root. Ctrl-C stops rkubelet and containerd (which kills the pods) and
# removes the temporary directory.
#
# Environment (all optional):
#   RKUBELET_DEMO_DIR     temporary directory (default /tmp/rkubelet-demo);
#                         removed at exit
#   RKUBELET_DEMO_ARGS    extra rkubelet flags, split on spaces (e.g. "--v 4")
#   RKUBELET_CNI_BRIDGE   bridge for the pods (default rkdemo0, so the demo
#   RKUBELET_CNI_SUBNET   and a test run do not share one; subnet default
#                         10.88.99.0/24)
#   CARGO_TARGET_DIR      where cargo builds (default ./target)
set -euo pipefail

repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$repo"

dir=${RKUBELET_DEMO_DIR:-/tmp/rkubelet-demo}
node=demo-node
healthz=http://127.0.0.1:10248/healthz # healthzPort in etc/demo-config.yaml
api=https://127.0.0.1:10250              # address and port in etc/demo-config.yaml
bin=${CARGO_TARGET_DIR:-$repo/target}/release/rkubelet
export RKUBELET_CNI_BRIDGE=${RKUBELET_CNI_BRIDGE:-rkdemo0}
export RKUBELET_CNI_SUBNET=${RKUBELET_CNI_SUBNET:-10.88.99.0/24}

say() { printf '\n==> %s\n' "$*"; }
die() { printf '\ndemo.sh: %s\n' "$*" >&2; exit 1; }

((EUID == 0)) || die "needs root (containerd, mounts, network namespaces): sudo make demo"
[[ $dir == /* && $dir != / ]] || die "RKUBELET_DEMO_DIR must be an absolute path other than /"
dir=${dir%/}
hdir=$dir/containerd # the harness's own DIR (it uses DIR/root, so not $dir)
log=$dir/rkubelet.log
logs_dir=$dir/pod-logs

# One demo at a time per directory. Long-lived children (containerd,
# rkubelet, tail) get 8>&-, so a crashed demo's leftovers do not hold it.
mkdir -p "$(dirname "$dir")"
exec 8>"$dir.lock"
flock -n 8 || die "another demo is using $dir"
trap 'rm -f "$dir.lock"' EXIT

# --- cleanup -------------------------------------------------------------------
kpid='' tailpid='' cleaned=''

alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != [ZX] ]]
}

stop_rkubelet() {
    local pid=$1 i
    alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
        alive "$pid" || return 0
        sleep 0.1
    done
    echo "rkubelet ($pid) ignored SIGTERM for 15s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
}

# Whatever is still mounted under $dir (pod volumes, say), deepest first.
unmount_under() {
    local mp i
    for ((i = 0; i < 3; i++)); do
        local -a mps=()
        mapfile -t mps < <(awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | tac)
        ((${#mps[@]})) || return 0
        for mp in "${mps[@]}"; do
            mp=$(printf '%b' "$mp")
            umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
        done
    done
}

# Removes everything a run (this one or an interrupted earlier one) left in $dir.
teardown() {
    local pid
    if [[ -s $dir/rkubelet.pid ]]; then
        pid=$(<"$dir/rkubelet.pid")
        if tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "--root-dir $dir/root"; then
            stop_rkubelet "$pid"
        fi
    fi
    if [[ -d $hdir ]]; then
        bash tests/harness/containerd.sh stop "$hdir" || echo "demo.sh: harness stop failed" >&2
    fi
    if [[ -d $dir ]]; then
        unmount_under "$dir"
        rm -rf --one-file-system "$dir" || echo "demo.sh: could not remove all of $dir" >&2
    fi
    # Pod log dirs in the upstream default location, should rkubelet not have
    # used podLogsDir: only those of this demo's node.
    rm -rf /var/log/pods/default_*-"$node"_* 2>/dev/null || true
}

# shellcheck disable=SC2317 # reached through the traps below
cleanup() {
    [[ -z $cleaned ]] || return 0
    cleaned=1
    # The terminal (or a pipe such as | tee) may be gone: a write to it must not
    # kill the cleanup with SIGPIPE.
    trap '' INT TERM PIPE
    set +e
    [[ -n $tailpid ]] && kill "$tailpid" 2>/dev/null
    say "stopping rkubelet and the demo containerd, removing $dir"
    [[ -n $kpid ]] && stop_rkubelet "$kpid"
    teardown
    rm -f "$dir.lock"
    echo "done."
}

# --- prerequisites -------------------------------------------------------------
RKUBELET_DEPS_NO_KUBECTL=1 bash scripts/deps.sh

# Rebuild when the binary is missing or older than any source.
if [[ ! -x $bin ]] || [[ -n $(find src crates Cargo.toml Cargo.lock protos -newer "$bin" -print -quit 2>/dev/null) ]]; then
    say "building rkubelet (cargo build --release)"
    cargo build --release --bin rkubelet
fi
[[ -x $bin ]] || die "no $bin after the build"

# Leftovers of an interrupted run.
if [[ -e $dir ]]; then
    say "removing the leftovers of an earlier demo in $dir"
    teardown
fi

if curl -fsS -m 2 "$healthz" >/dev/null 2>&1; then
    die "something already answers on $healthz (another kubelet?); stop it first"
fi

trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM
trap cleanup EXIT

mkdir -p "$dir"/{manifests,root} "$logs_dir"

# --- containerd ----------------------------------------------------------------
say "starting a private containerd in $hdir"
env_out=$(bash tests/harness/containerd.sh start "$hdir" 8>&-)
sock=$(sed -n 's/^CONTAINERD_SOCK=//p' <<<"$env_out")
[[ -S $sock ]] || die "the harness printed no usable CONTAINERD_SOCK"
ctr_() { ctr --address "$sock" -n k8s.io "$@"; }

# --- rkubelet ------------------------------------------------------------------
cp etc/manifests/*.yaml "$dir/manifests/"
# podLogsDir has no flag upstream: append it to a copy of the demo config.
cp etc/demo-config.yaml "$dir/kubelet-config.yaml"
if ! grep -q '^podLogsDir:' "$dir/kubelet-config.yaml"; then
    printf '\n# Added by scripts/demo.sh\npodLogsDir: %s\n' "$logs_dir" >>"$dir/kubelet-config.yaml"
fi

# shellcheck disable=SC2206 # split on purpose
extra=(${RKUBELET_DEMO_ARGS:-})
cmd=("$bin"
    --config "$dir/kubelet-config.yaml"
    --pod-manifest-path "$dir/manifests"
    --container-runtime-endpoint "unix://$sock"
    --root-dir "$dir/root"
    --cert-dir "$dir/pki"
    --hostname-override "$node"
    --v 2
    "${extra[@]}")
say "starting: ${cmd[*]}"
echo "    (log: $log)"
"${cmd[@]}" </dev/null >"$log" 2>&1 8>&- &
kpid=$!
echo "$kpid" >"$dir/rkubelet.pid"

tail --pid="$kpid" -n +1 -F "$log" 2>/dev/null 8>&- &
tailpid=$!

deadline=$((SECONDS + 60))
until [[ $(curl -s -m 2 "$healthz" 2>/dev/null) == ok ]]; do
    alive "$kpid" || { wait "$kpid" && rc=0 || rc=$?; sleep 0.3; die "rkubelet exited (status $rc) before /healthz answered (its log is above)"; }
    ((SECONDS < deadline)) || die "no 'ok' from $healthz within 60s (rkubelet's log is above)"
    sleep 0.5
done

# 3 sandboxes + web + counter + init-demo's app once the init containers ran.
want=6
deadline=$((SECONDS + 30))
while ((SECONDS < deadline)); do
    running=$(ctr_ tasks ls 2>/dev/null | grep -c RUNNING || true)
    ((running >= want)) && break
    alive "$kpid" || break
    sleep 1
done

# Pause the log for a readable summary; resume where it stopped.
sleep 0.3
kill "$tailpid" 2>/dev/null || true
wait "$tailpid" 2>/dev/null || true
tailpid=
shown=$(stat -c %s "$log")

# app container id of pod $1, container $2 (CRI labels), if any.
container_id() {
    ctr_ containers ls -q "labels.\"io.kubernetes.pod.name\"==$1-$node,labels.\"io.kubernetes.container.name\"==$2" 2>/dev/null | head -n 1
}

manifests=("$dir"/manifests/*.yaml)
cat <<EOF

==========================================================================
 rkubelet is running: node $node, ${#manifests[@]} static pods from $dir/manifests
 /healthz says: $(curl -s -m 2 "$healthz")
 $api/pods answers HTTP $(curl -sk -m 2 -o /dev/null -w '%{http_code}' "$api/pods")

 Look around (from another terminal):
   curl 127.0.0.1:10248/healthz
   curl -sk $api/pods        # kubelet API; also /stats/summary, /configz, /metrics
   ctr --address $sock -n k8s.io containers ls
   ctr --address $sock -n k8s.io tasks ls
   ls $logs_dir/*/*          # container logs (<namespace>_<pod>_<uid>/<container>/N.log)
   less $log        # rkubelet's own log
 Edit or add a manifest in $dir/manifests: rkubelet picks it up.
==========================================================================

==> ctr tasks ls ($running of $want expected tasks running):
EOF
ctr_ tasks ls || true

if cid=$(container_id web web) && [[ -n $cid ]]; then
    echo
    echo "==> web: wget -qO- http://127.0.0.1:8080/ inside the web container:"
    # The task runs a moment before httpd listens: retry briefly. (Not wget -T:
    # Debian's busybox-static wget segfaults with it; busybox timeout bounds it.)
    page=''
    for attempt in 1 2 3 4 5; do
        page=$(ctr_ tasks exec --exec-id "demo-wget-$$-$attempt" "$cid" timeout 3 wget -qO- http://127.0.0.1:8080/ 2>/dev/null) && [[ -n $page ]] && break
        sleep 1
    done
    echo "${page:-(no answer yet; try the command above in a moment)}"
fi
if cid=$(container_id init-demo app) && [[ -n $cid ]]; then
    echo
    echo "==> init-demo: /data/result.txt, written by the two init containers in order:"
    ctr_ tasks exec --exec-id "demo-cat-$$" "$cid" cat /data/result.txt || true
fi
mapfile -t logfiles < <(find "$logs_dir" /var/log/pods -path "*_*-${node}_*" -name '*.log' 2>/dev/null | sort)
if ((${#logfiles[@]})); then
    echo
    echo "==> container logs:"
    printf '   %s\n' "${logfiles[@]}"
fi

say "following $log; Ctrl-C stops rkubelet, containerd and the pods, and removes $dir"
tail --pid="$kpid" -c "+$((shown + 1))" -F "$log" 2>/dev/null 8>&- &
tailpid=$!

# Until Ctrl-C, or until rkubelet exits by itself.
if wait "$kpid"; then rc=0; else rc=$?; fi
kpid=
sleep 0.3
die "rkubelet exited by itself with status $rc (its log is above)"
