# shellcheck shell=bash
# shellcheck disable=SC2154 # $kpid and $port belong to the sourcing script
# Shared by the bench scripts (sourced): bounded polling and /proc figures
# of the rkubelet process whose PID is in $kpid, listening on $port.

# wait_for SECONDS COMMAND...: poll every ${BENCH_POLL:-0.1} s until COMMAND
# succeeds; fail after SECONDS.
wait_for() {
    local limit=$1; shift
    local end=$((SECONDS + limit))
    until "$@"; do
        [ "$SECONDS" -lt "$end" ] || return 1
        sleep "${BENCH_POLL:-0.1}"
    done
}
healthy() { curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$kpid/status"; }
# Anonymous memory alone (heap, stacks): what grows with pods, whatever
# housekeeping's idle-code trim did to the binary's pages in between.
anon_kb() { awk '/^Anonymous:/ {print $2}' "/proc/$kpid/smaps_rollup"; }
# RSS split: anonymous (heap, stacks) vs file-backed (the binary's code pages).
rss_split() { awk '/^Rss:/ {r=$2} /^Anonymous:/ {a=$2} END {printf "anon=%s file=%s", a, r-a}' "/proc/$kpid/smaps_rollup"; }
threads() { awk '/^Threads/ {print $2}' "/proc/$kpid/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$kpid/stat"; }
# The same in nanoseconds on CPU, summed over the threads' schedstat: exact,
# where utime and stime are sampled at each clock tick (an idle minute of
# rkubelet is about 9 ticks, give or take 3). The thread count is fixed, so
# no thread's time leaves the sum.
cpu_ns() { cat "/proc/$kpid/task/"*/schedstat | awk '{s += $1} END {print s + 0}'; }
# The whole machine's busy CPU (all but idle and iowait), in clock ticks:
# what the runtime, the bench and rkubelet spent together.
machine_ticks() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat; }
# unmount_under DIR: detach every mount below DIR, deepest first (volumes a
# killed rkubelet left), so that removing DIR neither fails nor leaks mounts.
unmount_under() {
    awk -v d="$1/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r |
        while read -r m; do umount -l "$m" 2>/dev/null || true; done
}
# cgroup_mounts: the mount point of every cgroup hierarchy (v1 controllers
# and cgroup2); the fstype follows the "-" that ends mountinfo's optional fields.
cgroup_mounts() {
    awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) ~ /^cgroup2?$/) print $5; break } }' /proc/self/mountinfo
}
# cgroup_root_create NAME: the bench's own cgroupRoot (rkubelet requires it
# to exist, as upstream), so a bench never touches another run's pods.
cgroup_root_create() {
    local m
    for m in $(cgroup_mounts); do mkdir -p "$m$1"; done
}
# cgroup_root_remove NAME: rmdir NAME and every cgroup below it in every
# hierarchy, deepest first, once rkubelet and the containers are gone.
cgroup_root_remove() {
    local m i left
    for i in 1 2 3 4 5; do
        left=0
        for m in $(cgroup_mounts); do
            if [ -d "$m$1" ]; then
                find "$m$1" -depth -type d -exec rmdir {} \; 2>/dev/null || true
                if [ -d "$m$1" ]; then left=1; fi
            fi
        done
        if [ "$left" = 0 ]; then return 0; fi
        sleep 0.2
    done
}
