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
# RSS split: anonymous (heap, stacks) vs file-backed (the binary's code pages).
rss_split() { awk '/^Rss:/ {r=$2} /^Anonymous:/ {a=$2} END {printf "anon=%s file=%s", a, r-a}' "/proc/$kpid/smaps_rollup"; }
threads() { awk '/^Threads/ {print $2}' "/proc/$kpid/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$kpid/stat"; }
# unmount_under DIR: detach every mount below DIR, deepest first (volumes a
# killed rkubelet left), so that removing DIR neither fails nor leaks mounts.
unmount_under() {
    awk -v d="$1/" 'index($2, d) == 1 {print $2}' /proc/self/mounts | sort -r |
        while read -r m; do umount -l "$m" 2>/dev/null || true; done
}
