#!/usr/bin/env bash
# make test: the unit tests, then the end-to-end suites against real
# containerd with vm-test beside them. Run one after the other they took
# longer than CI's 40 minutes on 2 cores; the host suites mostly wait on
# containerd (about half a core), so the VMs, at the lowest CPU and I/O
# priority, use what the suites leave.
#   VM_TEST=0 leaves vm-test out; arguments go to cargo test.
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."

cargo_test=(cargo test --release --workspace --features rkubelet/fault-injection)

# Build once, and name the binaries vm-test boots: a second cargo could not
# ask while the first holds the build directory's lock.
bins=$("${cargo_test[@]}" --no-run --message-format=json-render-diagnostics | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and not m["profile"]["test"] \
            and "bin" in m["target"]["kind"] and m["target"]["name"] in ("rkubelet", "apiserver-double"):
        print(m["executable"])')

# Every suite runs, whatever failed before it.
cargo_test+=(--no-fail-fast)

# The unit tests first, alone: a few of them time the prober's scheduling,
# which the VMs' load would disturb.
cargo_status=0
"${cargo_test[@]}" --lib --bins "$@" || cargo_status=$?

vm_pid=
if [[ ${VM_TEST:-1} != 0 ]]; then
    bash scripts/vm-deps.sh
    mkdir -p target
    echo "make test: vm-test runs beside the end-to-end suites (log: target/vm-test.log)"
    # Its own process group, so an interrupted run takes the VMs with it;
    # the lowest CPU and I/O priorities short of idle (SCHED_IDLE starved
    # the guests' systemd past its D-Bus timeouts).
    RKVM_BINS=$bins setsid nice -n 19 ionice -c 2 -n 7 \
        bash tests/vm/vm-test.sh >target/vm-test.log 2>&1 &
    vm_pid=$!
    trap 'kill -- -$vm_pid 2>/dev/null || true' INT TERM
else
    echo "make test: VM_TEST=0 leaves out vm-test"
fi

"${cargo_test[@]}" --tests "$@" || cargo_status=$?
"${cargo_test[@]}" --doc "$@" || cargo_status=$?

vm_status=0
if [[ -n $vm_pid ]]; then
    echo "make test: cargo suites done (status $cargo_status); waiting for vm-test"
    wait "$vm_pid" || vm_status=$?
    echo "===== vm-test (target/vm-test.log)"
    cat target/vm-test.log
fi
echo "make test: cargo test status $cargo_status, vm-test status $vm_status"
((cargo_status == 0 && vm_status == 0))
