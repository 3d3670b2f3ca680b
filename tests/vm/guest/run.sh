#!/usr/bin/env bash
# The tests that run inside the VM (tests/vm/README.md): a real systemd as
# PID 1, the cgroup hierarchy the kernel was booted with, Debian's
# containerd as a systemd service, the API server double, and rkubelet
# installed as etc/rkubelet.service says. For each cgroup driver in
# RKVM_DRIVERS (default "systemd cgroupfs"): node Ready, pods of each QoS
# class, upstream's slice and scope names, the limits in the cgroup files
# (also after systemd re-applies its units), an OOM kill, the v2 figures
# in /stats/summary, a restart of rkubelet and of containerd, the pod
# cgroups and units gone after the pods, in-place resize and swap (cgroup
# v2), a DRA claim's CDI device in a container and an image volume refused by containerd 1.7 (trixie), and (systemd driver, bookworm-v2) an eviction under memory pressure. With RKVM_SHUTDOWN=1 the last
# driver ends with `systemctl poweroff` and the graceful node shutdown.
#
# Prints one TAP-like line per test, "ok - ROW/DRIVER/TEST" or
# "not ok - ROW/DRIVER/TEST: why" (ROW: bookworm-v2, ...), and exits 1
# when any failed. The restarts and the watchdog run under the systemd
# driver only: what they check does not depend on the driver, and the
# cgroupfs driver's restarts are in the host suites (tests/faults.rs).
set -uo pipefail

here=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
# shellcheck source=tests/vm/guest/lib.sh
. "$here/lib.sh"
# shellcheck source=tests/vm/guest/node.sh
. "$here/node.sh"
# shellcheck source=tests/vm/guest/cases.sh
. "$here/cases.sh"

RKVM_RELEASE=${RKVM_RELEASE:-$(. /etc/os-release && echo "$VERSION_CODENAME")}
DRIVERS=${RKVM_DRIVERS:-systemd cgroupfs}
CGROUP_FS=$(stat -fc %T /sys/fs/cgroup)
# The row's name, as vm-test.sh calls it: the release and cgroup version.
ROW=$RKVM_RELEASE-v1
[[ $CGROUP_FS == cgroup2fs ]] && ROW=$RKVM_RELEASE-v2
log "release $RKVM_RELEASE, $(uname -r), $(systemctl --version | head -n1), /sys/fs/cgroup is $CGROUP_FS"
mkdir -p "$R"

install_once
last=${DRIVERS##* }
for DRIVER in $DRIVERS; do
    log "=== driver $DRIVER"
    if ! setup_node; then
        not_ok setup "the node did not come up (see run.log)"
        collect_logs
        teardown_node
        continue
    fi
    case_pods_and_cgroups
    case_oom_killed
    case_stats_summary
    [[ $DRIVER == systemd ]] && case_restarts_keep_pods
    [[ $CGROUP_FS == cgroup2fs ]] && case_resize
    [[ $RKVM_RELEASE == trixie && $DRIVER == systemd ]] && case_dra
    [[ $RKVM_RELEASE == trixie && $DRIVER == systemd ]] && case_image_volume
    case_pod_cgroups_removed
    # Swap restarts rkubelet twice: on the v2 row that does not also shut
    # down (the longest row sets the wall time).
    [[ $DRIVER == systemd && $CGROUP_FS == cgroup2fs && ${RKVM_SHUTDOWN:-0} != 1 ]] && case_swap
    # On cgroup v2, where the row does not also shut down (it sets the
    # rows' wall time): one row is enough for what the eviction reads.
    if [[ $DRIVER == systemd && $CGROUP_FS == cgroup2fs && ${RKVM_SHUTDOWN:-0} != 1 ]]; then
        case_memory_pressure_eviction
    fi
    if [[ ${RKVM_SHUTDOWN:-0} == 1 && $DRIVER == "$last" ]]; then
        case_graceful_shutdown
        break
    fi
    collect_logs
    teardown_node
done

echo "$PASSED passed, $FAILED failed"
for f in "${FAILURES[@]}"; do echo "failed: $f"; done
((FAILED == 0))
