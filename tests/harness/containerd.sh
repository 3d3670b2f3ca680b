#!/usr/bin/env bash
# A private containerd (with the CRI plugin, CNI and offline images) for
# rkubelet's integration tests and `make demo`.
#
# Usage:
#   tests/harness/containerd.sh start DIR            start (idempotent), import images,
#                                                    print KEY=VALUE lines, CONTAINERD_SOCK=... last
#   tests/harness/containerd.sh stop DIR             tear everything down; DIR is then removable
#   tests/harness/containerd.sh kill-runtime DIR     stop the daemon only (shims/containers live on)
#   tests/harness/containerd.sh restart-runtime DIR  kill-runtime, then start the daemon again
#
# Environment (all optional):
#   RKUBELET_IMAGE_CACHE      where images.sh keeps its tarballs (default DIR/../images)
#   RKUBELET_SNAPSHOTTER      overlayfs|native (default: overlayfs if a test mount works)
#   RKUBELET_CNI_BRIDGE       bridge link name (default rkbr0)
#   RKUBELET_CNI_SUBNET       pod subnet, a /24 (default 10.88.77.0/24)
#   RKUBELET_CONTAINERD_TIMEOUT  seconds to wait for the socket (default 30)
# Two harnesses running at the same time need distinct bridge and subnet.
# With the native snapshotter, `ctr run` needs --snapshotter native (or
# CONTAINERD_SNAPSHOTTER=native, which is printed by start).
#
# Needs (Debian): containerd runc containernetworking-plugins busybox-static
# iproute2 iptables; plus coreutils/util-linux (flock, setsid, mount).
#
# Everything containerd owns lives under DIR: root, state, sockets, CNI
# config and IPAM state, runc state, and the pod network namespaces
# (netns_mounts_under_state_dir), so it never touches a system containerd
# and `stop` can find all of it. What necessarily lives outside DIR:
#   - the bridge link and the CNI ipMasq/portmap iptables rules (host netns);
#     `stop` removes those that carry this harness's network name;
#   - shim sockets in /run/containerd/s (named by a hash that includes our
#     socket path, so no clash; `stop` removes those of shims it must kill),
#     runc state of non-CRI (ctr) tasks in /run/containerd/runc, and ctr's
#     fifos in /run/containerd/fifo;
#   - libcni's result cache in /var/lib/cni/results (also cleaned by `stop`);
#   - net.ipv4.ip_forward=1, which the bridge plugin sets for isGateway;
#   - cgroups: runc removes a container's own cgroup, and `stop` removes those
#     of containers it had to kill, but parents (the kubelet's cgroup_parent,
#     or /k8s.io for `ctr run`) are left, empty, for their creator.
#
# Findings on the sandbox this was written on (Debian 12, kernel 6.18, root,
# PID 1 is neither systemd nor a prompt reaper):
#   - cgroups are hybrid v1 (tmpfs /sys/fs/cgroup with v1 controllers plus
#     cgroup2 at /sys/fs/cgroup/unified): containerd and runc handle that with
#     the cgroupfs driver, hence SystemdCgroup = false (no systemd anyway).
#   - overlayfs mounts work on the ext4 root disk; the probe below still falls
#     back to the native snapshotter where they don't (overlay on overlay,
#     some container sandboxes).
#   - iptables is the nft variant (Debian's default alternative) and works;
#     the CNI plugins call plain `iptables`, so that is what cleanup uses.
#   - orphans are reparented to PID 1, which reaps them only lazily (seconds
#     later), so a dead containerd or shim lingers as a zombie for a while:
#     liveness checks look at the process state, not only `kill -0`.
#   - there is no cri-tools/crictl package in Debian 12.
set -euo pipefail

here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")

usage() {
    echo "usage: $0 start|stop|restart-runtime|kill-runtime DIR" >&2
    exit 2
}
[[ $# -eq 2 ]] || usage
cmd=$1
case $cmd in start | stop | restart-runtime | kill-runtime) ;; *) usage ;; esac
mkdir -p "$2"
dir=$(readlink -f "$2")

sock=$dir/containerd.sock
conf=$dir/config.toml
pidfile=$dir/containerd.pid
log=$dir/containerd.log
envfile=$dir/harness.env
# Per directory: the stop-time iptables cleanup deletes the rules carrying
# this name, and must not touch those of harnesses running beside it.
netname=rkubelet-harness-$(printf %s "$dir" | md5sum | cut -c1-8)
timeout_s=${RKUBELET_CONTAINERD_TIMEOUT:-30}
images=(docker.io/library/busybox:1.36 registry.k8s.io/pause:3.9)

say() { echo "containerd.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# Unix socket paths are limited to 107 bytes; fail clearly instead of with a
# bind error buried in the log.
(( ${#sock} + 6 <= 107 )) || die "DIR too long for a unix socket path: $sock.ttrpc"

ctr_() { timeout 60 ctr --address "$sock" "$@"; }

# Alive and not a zombie (see the PID 1 note above).
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != [ZX] ]]
}

# Pid of this DIR's containerd daemon, if running.
daemon_pid() {
    local pid
    [[ -s $pidfile ]] || return 1
    pid=$(<"$pidfile")
    alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--config $conf" || return 1
    echo "$pid"
}

answers() { timeout 5 ctr --address "$sock" version >/dev/null 2>&1; }

# Overlay needs a filesystem it can stack on (not overlayfs itself, not some
# FUSE/9p mounts) and permission to mount: try it for real, with two lower
# dirs as containerd's overlayfs snapshotter requires.
pick_snapshotter() {
    if [[ -n ${RKUBELET_SNAPSHOTTER:-} ]]; then
        echo "$RKUBELET_SNAPSHOTTER"
        return
    fi
    local p=$dir/root/.overlay-probe ok=native
    rm -rf "$p"
    mkdir -p "$p"/{l1,l2,u,w,m}
    echo x >"$p/l1/f"
    if mount -t overlay overlay -o "lowerdir=$p/l1:$p/l2,upperdir=$p/u,workdir=$p/w" "$p/m" 2>/dev/null; then
        if echo y >"$p/m/f" 2>/dev/null && [[ $(cat "$p/u/f" 2>/dev/null) == y ]]; then
            ok=overlayfs
        fi
        umount "$p/m" || umount -l "$p/m"
    fi
    rm -rf "$p"
    echo "$ok"
}

write_config() {
    local snap=$1 bridge=$2 subnet=$3
    local prefix=${subnet%.*/*}
    mkdir -p "$dir"/{root,state,tmp,opt,runc,cni/net.d,cni/ipam}

    cat >"$dir/cni/net.d/10-rkubelet.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$netname",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$bridge",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/cni/ipam",
        "ranges": [[{"subnet": "$subnet", "gateway": "$prefix.1"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
    # The CRI plugin adds the loopback interface itself (CNI "loopback"
    # plugin from bin_dir), so it is not in the list above.

    cat >"$conf" <<EOF
# Generated by tests/harness/containerd.sh
version = 2
root = "$dir/root"
state = "$dir/state"
temp = "$dir/tmp"
# Snapshotters that cannot work here only add noise to the log.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$sock"

# Explicit, so nothing falls back to /run/containerd paths.
[ttrpc]
  address = "$sock.ttrpc"

# No debug or metrics listeners: empty addresses mean none are opened.
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/opt"

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "registry.k8s.io/pause:3.9"
  # Pod netns bind mounts under DIR/state instead of /var/run/netns.
  netns_mounts_under_state_dir = true
  # Streaming (exec/attach/port-forward) on an ephemeral loopback port.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_tcp_service = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "$snap"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc state of CRI containers stays under DIR too.
        Root = "$dir/runc"
    # A second handler for RuntimeClass tests: runc again, under its own name.
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc-test]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc-test.options]
        SystemdCgroup = false
        Root = "$dir/runc"
EOF
}

start_daemon() {
    : >>"$log"
    # setsid: the daemon must outlive this script and not share the caller's
    # process group. All fds go to the log: a test that captures our stdout
    # would otherwise wait for EOF until containerd exits. fd 9 is the lock.
    setsid containerd --config "$conf" </dev/null >>"$log" 2>&1 9>&- &
    echo $! >"$pidfile"
}

wait_ready() {
    local pid deadline=$((SECONDS + timeout_s))
    pid=$(<"$pidfile")
    until answers; do
        if ! alive "$pid"; then
            tail -n 30 "$log" >&2 || true
            die "containerd exited during startup (log: $log)"
        fi
        (( SECONDS < deadline )) || { tail -n 30 "$log" >&2 || true; die "containerd did not answer on $sock within ${timeout_s}s"; }
        sleep 0.2
    done
    if ! ctr_ plugins ls | grep -Eq '^io\.containerd\.grpc\.v1[[:space:]]+cri[[:space:]].*[[:space:]]ok[[:space:]]*$'; then
        ctr_ plugins ls | grep -E 'cri|error|skip' >&2 || true
        die "the CRI plugin did not load (log: $log)"
    fi
}

stop_daemon() {
    local pid i
    pid=$(daemon_pid) || { rm -f "$pidfile"; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        say "containerd ($pid) ignored SIGTERM for 10s; killing"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do alive "$pid" || break; sleep 0.1; done
    fi
    rm -f "$pidfile"
}

import_images() {
    local snap=$1 cache=${RKUBELET_IMAGE_CACHE:-$dir/../images} have name
    have=$(ctr_ -n k8s.io images ls -q)
    local missing=0
    for name in "${images[@]}"; do
        grep -qxF "$name" <<<"$have" || missing=1
    done
    ((missing)) || return 0
    "$here/images.sh" "$cache" 9>&-
    # Unpack for the snapshotter the CRI plugin uses, so the first pod does
    # not pay for it (and `ctr run` needs it unpacked there too).
    for name in busybox pause; do
        ctr_ -n k8s.io images import --all-platforms --snapshotter "$snap" "$cache/$name.tar" >&2
    done
    have=$(ctr_ -n k8s.io images ls -q)
    for name in "${images[@]}"; do
        grep -qxF "$name" <<<"$have" || die "image $name missing after import"
    done
}

print_env() {
    echo "CONTAINERD_SNAPSHOTTER=$SNAPSHOTTER"
    echo "CONTAINERD_NAMESPACE=k8s.io"
    echo "CNI_BRIDGE=$BRIDGE"
    echo "CNI_SUBNET=$SUBNET"
    echo "CONTAINERD_LOG=$log"
    echo "CONTAINERD_SOCK=$sock"
}

load_env() {
    if [[ -s $envfile ]]; then
        # shellcheck disable=SC1090 # written by save_env below
        . "$envfile"
    fi
    BRIDGE=${BRIDGE:-${RKUBELET_CNI_BRIDGE:-rkbr0}}
    SUBNET=${SUBNET:-${RKUBELET_CNI_SUBNET:-10.88.77.0/24}}
    SNAPSHOTTER=${SNAPSHOTTER:-}
}

save_env() {
    printf 'SNAPSHOTTER=%s\nBRIDGE=%s\nSUBNET=%s\n' "$SNAPSHOTTER" "$BRIDGE" "$SUBNET" >"$envfile"
}

# Pids of processes named $1* whose command line mentions DIR.
pids_named_with_dir() {
    local p comm
    for p in /proc/[0-9]*; do
        comm=$(cat "$p/comm" 2>/dev/null) || continue
        [[ $comm == "$1"* ]] || continue
        tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$dir/" || continue
        alive "${p#/proc/}" && echo "${p#/proc/}"
    done
}

# All descendants of the given pids.
descendants() {
    local -A kids=()
    local p stat pid ppid
    for p in /proc/[0-9]*/stat; do
        stat=$(cat "$p" 2>/dev/null) || continue
        pid=${stat%% *}
        stat=${stat##*) }
        ppid=$(cut -d' ' -f2 <<<"$stat")
        kids[$ppid]+=" $pid"
    done
    local queue=("$@") cur
    while ((${#queue[@]})); do
        cur=${queue[0]}
        queue=("${queue[@]:1}")
        for p in ${kids[$cur]:-}; do
            echo "$p"
            queue+=("$p")
        done
    done
}

# Kill and delete every task while the daemon still runs: the shims then exit
# cleanly and remove their sockets, runc state and rootfs mounts themselves.
reap_tasks() {
    local ns id
    for ns in $(ctr_ namespaces ls -q 2>/dev/null); do
        for id in $(ctr_ -n "$ns" tasks ls -q 2>/dev/null); do
            ctr_ -n "$ns" tasks delete --force "$id" >/dev/null 2>&1 || true
        done
    done
}

kill_shims() {
    local shims victims
    mapfile -t shims < <(pids_named_with_dir containerd-shim)
    ((${#shims[@]})) || return 0
    # Container processes first: once their shim is gone they would be
    # reparented to PID 1 and keep running.
    mapfile -t victims < <(descendants "${shims[@]}")
    say "killing ${#shims[@]} leftover shim(s) and ${#victims[@]} container process(es)"
    # Nobody will run `runc delete` for them, so note their cgroups to remove.
    local -a cgroups=()
    if ((${#victims[@]})); then
        mapfile -t cgroups < <(for pid in "${victims[@]}"; do
            cut -d: -f3- "/proc/$pid/cgroup" 2>/dev/null; done | grep -v '^/$' | sort -u)
        kill -KILL "${victims[@]}" 2>/dev/null || true
    fi
    local pid ns id args hash
    for pid in "${shims[@]}"; do
        mapfile -t args < <(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null)
        kill -KILL "$pid" 2>/dev/null || true
        ns=$(arg_after -namespace "${args[@]}") id=$(arg_after -id "${args[@]}")
        [[ -n $ns && -n $id ]] || continue
        # A killed shim leaves its socket, named (containerd 1.6) by
        # sha256("<containerd address>/<namespace>/<id>") ...
        hash=$(printf '%s' "$sock/$ns/$id" | sha256sum | cut -d' ' -f1)
        rm -f "/run/containerd/s/$hash"
        # ... and, for non-CRI tasks, runc state in the default runc root.
        if grep -qsF -- "$dir/" "/run/containerd/runc/$ns/$id/state.json"; then
            rm -rf "/run/containerd/runc/$ns/$id"
        fi
    done
    sleep 0.2
    remove_cgroups "${cgroups[@]}"
}

# remove_cgroups PATH...: rmdir PATH in every cgroup hierarchy (v1 controllers
# and the v2 tree alike) once the killed processes have left it.
remove_cgroups() {
    (($#)) || return 0
    local -a roots
    local i p r
    # The fstype follows the "-" that ends mountinfo's variable-length fields.
    mapfile -t roots < <(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) ~ /^cgroup2?$/) print $5; break } }' /proc/self/mountinfo)
    for ((i = 0; i < 20; i++)); do
        local left=0
        for p in "$@"; do
            for r in "${roots[@]}"; do
                [[ -d $r$p ]] || continue
                rmdir "$r$p" 2>/dev/null || left=1
            done
        done
        ((left)) || return 0
        sleep 0.1
    done
}

# arg_after FLAG ARGS...: the word following FLAG in ARGS.
arg_after() {
    local flag=$1
    shift
    while (($#)); do
        if [[ $1 == "$flag" && $# -ge 2 ]]; then
            echo "$2"
            return
        fi
        shift
    done
}

unmount_all() {
    local i mp
    local -a mps
    for ((i = 0; i < 5; i++)); do
        # Mount points are field 5 of mountinfo, octal-escaped; reverse order
        # unmounts children before parents.
        mapfile -t mps < <(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | tac)
        ((${#mps[@]})) || return 0
        for mp in "${mps[@]}"; do
            mp=$(printf '%b' "$mp")
            umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
        done
    done
    awk -v d="$dir/" 'index($5, d) == 1 { print "still mounted: " $5 }' /proc/self/mountinfo >&2
}

# Rules that the bridge (ipMasq) and portmap plugins leave behind when a pod
# was never torn down through CNI DEL: they carry `name: "<netname>"` in a
# comment. Delete those rules and the per-pod chains they jump to.
clean_iptables() {
    command -v iptables >/dev/null || return 0
    local chain n target
    local -a chains=()
    for chain in PREROUTING OUTPUT POSTROUTING CNI-HOSTPORT-DNAT CNI-HOSTPORT-SETMARK CNI-HOSTPORT-MASQ; do
        iptables -w -t nat -L "$chain" -n --line-numbers 2>/dev/null | grep -F "name: \"$netname\"" | sort -rn |
            while read -r n target _; do
                iptables -w -t nat -D "$chain" "$n" 2>/dev/null || true
                [[ $target == CNI-* ]] && echo "$target"
            done >>"$dir/.stale-chains" || true
    done
    if [[ -s $dir/.stale-chains ]]; then
        mapfile -t chains < <(sort -u "$dir/.stale-chains")
        for chain in "${chains[@]}"; do
            iptables -w -t nat -F "$chain" 2>/dev/null || true
            iptables -w -t nat -X "$chain" 2>/dev/null || true
        done
    fi
    rm -f "$dir/.stale-chains"
    # portmap's shared chains: drop them once no pod of any network uses them.
    if iptables -w -t nat -S CNI-HOSTPORT-DNAT 2>/dev/null | grep -q '^-A'; then
        return 0
    fi
    iptables -w -t nat -D PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT 2>/dev/null || true
    iptables -w -t nat -D OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT 2>/dev/null || true
    iptables -w -t nat -D POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ 2>/dev/null || true
    for chain in CNI-HOSTPORT-DNAT CNI-HOSTPORT-MASQ CNI-HOSTPORT-SETMARK; do
        iptables -w -t nat -F "$chain" 2>/dev/null || true
        iptables -w -t nat -X "$chain" 2>/dev/null || true
    done
}

# libcni caches each ADD result in /var/lib/cni/results (not configurable in
# containerd 1.6); entries of pods never torn down name our netns paths.
clean_cni_cache() {
    local f
    for f in /var/lib/cni/results/*; do
        [[ -f $f ]] && grep -qF -- "$dir/" "$f" && rm -f "$f"
    done
    return 0
}

cmd_start() {
    load_env
    if daemon_pid >/dev/null && answers; then
        [[ -n $SNAPSHOTTER ]] || SNAPSHOTTER=$(pick_snapshotter)
        import_images "$SNAPSHOTTER"
        print_env
        return 0
    fi
    # A daemon that is up but not answering is of no use: replace it.
    stop_daemon
    [[ -n $SNAPSHOTTER ]] || SNAPSHOTTER=$(pick_snapshotter)
    save_env
    say "starting containerd in $dir (snapshotter $SNAPSHOTTER, bridge $BRIDGE, subnet $SUBNET)"
    write_config "$SNAPSHOTTER" "$BRIDGE" "$SUBNET"
    start_daemon
    wait_ready
    import_images "$SNAPSHOTTER"
    print_env
}

cmd_stop() {
    load_env
    if daemon_pid >/dev/null && answers; then
        reap_tasks
    fi
    stop_daemon
    # A daemon whose pidfile was lost is still ours if it runs our config.
    local p
    for p in $(pids_named_with_dir containerd); do
        if [[ $(cat "/proc/$p/comm" 2>/dev/null) == containerd ]]; then kill -KILL "$p" 2>/dev/null || true; fi
    done
    kill_shims
    unmount_all
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link delete "$BRIDGE" || true
    fi
    clean_iptables
    clean_cni_cache
}

cmd_restart_runtime() {
    load_env
    [[ -s $conf ]] || die "no config in $dir: run start first"
    stop_daemon
    start_daemon
    wait_ready
    print_env
}

# One command at a time per DIR (tests may start/stop concurrently).
exec 9>"$dir/.harness.lock"
flock 9

case $cmd in
start) cmd_start ;;
stop) cmd_stop ;;
restart-runtime) cmd_restart_runtime ;;
kill-runtime) stop_daemon ;;
*) usage ;;
esac
