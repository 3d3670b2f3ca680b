#!/usr/bin/env bash
# `make vm-test`: rkubelet on the hosts users run, each booted in QEMU from
# Debian's packages (tests/vm/README.md). Builds rkubelet and the API
# server double, packs them with the guest tests (tests/vm/guest), the
# shipped unit files and the offline images, and boots one VM per row:
#
#   bookworm  cgroup v2   systemd and cgroupfs drivers
#   trixie    cgroup v2   systemd and cgroupfs drivers, then systemctl poweroff
#   bookworm  cgroup v1   systemd driver (systemd.unified_cgroup_hierarchy=0)
#
# RKVM_ROWS picks rows by name (default: all of "bookworm-v2 trixie-v2
# bookworm-v1"). Results land in target/vm-test/<row>/ (run.log, the
# console, rkubelet's and containerd's journals, the double's state).
# Ends with "N passed, N failed"; exits 1 when a test failed or a VM did
# not finish, naming the release, the driver and the test.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
out=$repo/target/vm-test
rows=${RKVM_ROWS:-bookworm-v2 trixie-v2 bookworm-v1}

say() { echo "vm-test: $*" >&2; }

build_payload() {
    local payload=$1
    say "building rkubelet and the API server double (release)"
    cargo build --release -p rkubelet --bin rkubelet >&2
    cargo build --release -p rkubelet-apiserver-double >&2
    [[ -x target/tools/kubectl ]] || bash scripts/deps.sh >&2
    rm -rf "$payload"
    mkdir -p "$payload"/{bin,etc,images}
    cp target/release/rkubelet target/release/apiserver-double target/tools/kubectl "$payload/bin/"
    cp -r etc/rkubelet.service etc/rkubelet.service.d "$payload/etc/"
    local cache=${RKUBELET_IMAGE_CACHE:-/tmp/rk-e2e/images}
    bash tests/harness/images.sh "$cache" >&2
    cp "$cache/busybox.tar" "$cache/pause.tar" "$payload/images/"
    cp tests/vm/guest/*.sh "$payload/"
    chmod +x "$payload/run.sh"
}

# boot ROW: the release and kernel arguments of a row.
row_args() {
    case $1 in
    bookworm-v2) echo "bookworm systemd.unified_cgroup_hierarchy=1" ;;
    trixie-v2) echo "trixie systemd.unified_cgroup_hierarchy=1 rkvm.shutdown=1" ;;
    bookworm-v1) echo "bookworm systemd.unified_cgroup_hierarchy=0 rkvm.drivers=systemd" ;;
    *) return 1 ;;
    esac
}

payload=$out/payload
build_payload "$payload"
passed=0 failed=0 failures=()
for row in $rows; do
    args=$(row_args "$row") || { say "unknown row $row (rows: bookworm-v2 trixie-v2 bookworm-v1)"; exit 2; }
    # shellcheck disable=SC2086
    set -- $args
    release=$1
    shift
    results=$out/$row
    rm -rf "$results"
    mkdir -p "$results"
    say "=== $row: booting $release with $*"
    t0=$SECONDS
    status=0
    bash tests/vm/boot.sh "$release" "$payload" "$results" "$@" || status=$?
    say "$row: VM done in $((SECONDS - t0)) s (status $status)"
    if [[ -f $results/shutdown-driver ]]; then
        python3 tests/vm/check-shutdown.py "$release" "$(cat "$results/shutdown-driver")" \
            "$results/double-$(cat "$results/shutdown-driver")" >>"$results/run.log" || status=1
    fi
    if [[ -f $results/run.log ]]; then
        grep -E '^(not )?ok - ' "$results/run.log" || true
        passed=$((passed + $(grep -c '^ok - ' "$results/run.log" || true)))
        n=$(grep -c '^not ok - ' "$results/run.log" || true)
        failed=$((failed + n))
        while IFS= read -r l; do failures+=("$l"); done < <(grep '^not ok - ' "$results/run.log" || true)
    fi
    if ((status != 0)) && ! grep -q '^not ok - ' "$results/run.log" 2>/dev/null; then
        failed=$((failed + 1))
        failures+=("not ok - $release/$row/vm: the VM did not finish its tests (status $status; $results/console.log)")
    fi
done
for f in "${failures[@]}"; do echo "$f"; done
echo "vm-test: $passed passed, $failed failed"
((failed == 0))
