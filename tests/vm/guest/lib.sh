# Helpers for the tests that run inside the VM (tests/vm/guest/run.sh):
# results named row/driver/test (row: release-v2 or release-v1), waits with deadlines, the API server
# double's admin client (the real kubectl), and the cgroup v2 files.
# Sourced, not run.

P=${P:-/payload}
R=$P/results
BIN=$P/bin
NODE=$(hostname)
KUBECTL=(timeout 30 "$BIN/kubectl" --kubeconfig /root/admin.kubeconfig)
PASSED=0
FAILED=0
FAILURES=()

log() { echo "vm: $*" >&2; }

# ok NAME: one test passed. not_ok NAME WHY: failed, with the reason.
ok() {
    PASSED=$((PASSED + 1))
    echo "ok - $ROW/$DRIVER/$1"
}
not_ok() {
    FAILED=$((FAILED + 1))
    FAILURES+=("$ROW/$DRIVER/$1")
    echo "not ok - $ROW/$DRIVER/$1: $2"
}

# check NAME WANT GOT: passes when equal.
check() {
    if [[ $2 == "$3" ]]; then ok "$1"; else not_ok "$1" "want '$2', got '$3'"; fi
}

# wait_for SECONDS WHAT CMD...: runs CMD every second until it succeeds;
# false (and a log line) when it never did.
wait_for() {
    local secs=$1 what=$2 end
    shift 2
    end=$((SECONDS + secs))
    while ((SECONDS < end)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 1
    done
    log "timed out after ${secs}s waiting for $what"
    return 1
}

k() { "${KUBECTL[@]}" "$@"; }

# jp OBJ JSONPATH: one field of an object, e.g. jp pod/g '{.status.phase}'.
jp() { k get "$1" -o "jsonpath=$2" 2>/dev/null; }

pod_uid() { jp "pod/$1" '{.metadata.uid}'; }
container_id() {
    local id
    id=$(jp "pod/$1" '{.status.containerStatuses[0].containerID}')
    echo "${id#containerd://}"
}
pod_running() { [[ $(jp "pod/$1" '{.status.phase}') == Running ]]; }
node_ready() {
    [[ $(jp "node/$NODE" '{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}

# cg FILE...: the contents of a file below /sys/fs/cgroup, "missing" when
# there is none.
cg() {
    local f=/sys/fs/cgroup/$1
    if [[ -r $f ]]; then tr '\n' ' ' <"$f" | sed 's/ $//'; else echo missing; fi
}

# The directory of cgroup $1: in the unified tree on v2, in the cpu
# hierarchy on v1.
cgdir() {
    if [[ $CGROUP_FS == cgroup2fs ]]; then echo "/sys/fs/cgroup/$1"; else echo "/sys/fs/cgroup/cpu/$1"; fi
}

# The pod cgroup of a pod of QoS tier TIER ("" for Guaranteed) and UID,
# in the driver's spelling, relative to /sys/fs/cgroup.
pod_cgroup() {
    local tier=$1 uid=$2
    if [[ $DRIVER == systemd ]]; then
        local u=${uid//-/_}
        if [[ -z $tier ]]; then
            echo "kubepods.slice/kubepods-pod$u.slice"
        else
            echo "kubepods.slice/kubepods-$tier.slice/kubepods-$tier-pod$u.slice"
        fi
    else
        echo "kubepods${tier:+/$tier}/pod$uid"
    fi
}

qos_cgroup() {
    if [[ $DRIVER == systemd ]]; then
        echo "kubepods.slice/kubepods-$1.slice"
    else
        echo "kubepods/$1"
    fi
}

kubepods_cgroup() {
    if [[ $DRIVER == systemd ]]; then echo kubepods.slice; else echo kubepods; fi
}

# The container's own cgroup below its pod's.
container_cgroup() {
    if [[ $DRIVER == systemd ]]; then
        echo "$1/cri-containerd-$2.scope"
    else
        echo "$1/$2"
    fi
}

# cpu.weight for cpu.shares, as upstream converts (CpuSharesToCpuWeight).
weight() { echo $((1 + (($1 - 2) * 9999) / 262142)); }

# A pod on this node from busybox; $3 is the resources object of its
# one container, $4 extra spec fields (JSON, with a leading comma).
pod_json() {
    local name=$1 cmd=$2 resources=$3 extra=${4:-}
    cat <<EOF
{"apiVersion": "v1", "kind": "Pod",
 "metadata": {"name": "$name", "namespace": "default"},
 "spec": {"nodeName": "$NODE", "terminationGracePeriodSeconds": 2 $extra,
  "containers": [{"name": "c", "image": "docker.io/library/busybox:1.36",
    "imagePullPolicy": "IfNotPresent",
    "command": ["sh", "-c", "$cmd"], "resources": $resources}]}}
EOF
}

SLEEPER="trap 'exit 0' TERM; while true; do sleep 1; done"

# The API server double serves no OpenAPI document, which kubectl's
# client-side validation would download.
create_pod() { pod_json "$@" | k create --validate=false -f - >/dev/null; }

# The pod cgroups of the pods g, b and be, once they run.
G="" B="" BE=""
