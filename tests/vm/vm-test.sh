#!/usr/bin/env bash
# `make vm-test`: rkubelet on the hosts users run, each booted in QEMU from
# Debian's packages (tests/vm/README.md). Builds rkubelet and the API
# server double, packs them with the guest tests (tests/vm/guest), the
# shipped unit files and the offline images, and boots one VM per row, the
# rows side by side (RKVM_PARALLEL=1: one at a time):
#
#   bookworm  cgroup v2   systemd and cgroupfs drivers
#   trixie    cgroup v2   systemd and cgroupfs drivers, then systemctl poweroff
#   bookworm  cgroup v1   systemd driver (systemd.unified_cgroup_hierarchy=0)
#
# RKVM_ROWS picks rows by name (default: all of "bookworm-v2 trixie-v2
# bookworm-v1"). Results land in target/vm-test/<row>/ (run.log, the
# console, rkubelet's and containerd's journals, the double's state), and
# boot.sh's own output in target/vm-test/<row>.boot.log.
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
    # The build `make test` made (the same features, so after it this is
    # no work): its rkubelet is the binary the host suites ran.
    # The binaries are taken from cargo's own report of that build, not
    # from target/release/, where another build may have left its own.
    local bins
    # scripts/test.sh names them while its cargo test holds the build lock.
    if [[ -n ${RKVM_BINS:-} ]]; then
        bins=$RKVM_BINS
    else
    bins=$(cargo test --release --workspace --features rkubelet/fault-injection --no-run \
        --message-format=json-render-diagnostics | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and not m["profile"]["test"] \
            and "bin" in m["target"]["kind"] and m["target"]["name"] in ("rkubelet", "apiserver-double"):
        print(m["executable"])')
    fi
    [[ $(wc -l <<<"$bins") == 2 ]] || { say "cargo reported no rkubelet and apiserver-double binaries: $bins"; exit 1; }
    [[ -x target/tools/kubectl ]] || bash scripts/deps.sh >&2
    rm -rf "$payload"
    mkdir -p "$payload"/{bin,etc,images}
    # shellcheck disable=SC2086 # two paths without spaces
    cp $bins target/tools/kubectl "$payload/bin/"
    cp -r etc/rkubelet.service etc/rkubelet.service.d "$payload/etc/"
    local cache=${RKUBELET_IMAGE_CACHE:-/tmp/rk-e2e/images}
    bash tests/harness/images.sh "$cache" >&2
    cp "$cache/busybox.tar" "$cache/pause.tar" "$payload/images/"
    cp tests/vm/guest/*.sh "$payload/"
    chmod +x "$payload/run.sh"
    # The DRA driver peer and the protos it is written to (case_dra).
    mkdir -p "$payload/tests/plugins" "$payload/protos"
    cp tests/plugins/draplugin.py tests/plugins/peerlib.py tests/plugins/system_python.py \
        "$payload/tests/plugins/"
    cp -r protos/dra protos/pluginregistration "$payload/protos/"
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

# run_row ROW: boots the row's VM, then checks what only the host can see;
# its exit status in $out/ROW.status.
run_row() {
    local row=$1 args release results status=0 t0=$SECONDS
    args=$(row_args "$row")
    # shellcheck disable=SC2086
    set -- $args
    release=$1
    shift
    results=$out/$row
    rm -rf "$results"
    mkdir -p "$results"
    say "=== $row: booting $release with $*"
    bash tests/vm/boot.sh "$release" "$payload" "$results" "$@" >"$out/$row.boot.log" 2>&1 || status=$?
    say "$row: VM done in $((SECONDS - t0)) s (status $status)"
    if [[ -f $results/shutdown-driver ]]; then
        local driver
        driver=$(cat "$results/shutdown-driver")
        python3 tests/vm/check-shutdown.py "$row" "$driver" "$results/double-$driver" \
            >>"$results/run.log" || status=1
    fi
    echo "$status" >"$out/$row.status"
}

for row in $rows; do
    row_args "$row" >/dev/null || { say "unknown row $row (rows: bookworm-v2 trixie-v2 bookworm-v1)"; exit 2; }
done
# The rows run side by side (RKVM_PARALLEL=1: one after another): most of
# a row is waiting on timers and pods, not on the emulated CPUs.
t0=$SECONDS
pids=()
for row in $rows; do
    run_row "$row" &
    pids+=($!)
    if [[ ${RKVM_PARALLEL:-} == 1 ]]; then wait "${pids[-1]}" || true; fi
done
wait "${pids[@]}" || true
say "all rows done in $((SECONDS - t0)) s"

passed=0 failed=0 failures=()
for row in $rows; do
    results=$out/$row
    status=$(cat "$out/$row.status" 2>/dev/null || echo 1)
    ((status == 0)) || sed 's/^/  /' "$out/$row.boot.log" | tail -n 20 >&2
    if [[ -f $results/run.log ]]; then
        grep -E '^(not )?ok - ' "$results/run.log" || true
        passed=$((passed + $(grep -c '^ok - ' "$results/run.log" || true)))
        failed=$((failed + $(grep -c '^not ok - ' "$results/run.log" || true)))
        while IFS= read -r l; do failures+=("$l"); done < <(grep '^not ok - ' "$results/run.log" || true)
    fi
    if ((status != 0)) && ! grep -q '^not ok - ' "$results/run.log" 2>/dev/null; then
        failed=$((failed + 1))
        failures+=("not ok - $row/vm: the VM did not finish its tests (status $status; $results/console.log)")
    fi
done
for f in "${failures[@]}"; do echo "$f"; done
echo "vm-test: $passed passed, $failed failed"
((failed == 0))
