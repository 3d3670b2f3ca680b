#!/usr/bin/env bash
# `make fuzz`: every target in fuzz/fuzz_targets for FUZZ_SECS (60) each
# with cargo-fuzz (libFuzzer), or only those named:
#
#   bash scripts/fuzz.sh [TARGET...]        FUZZ_SECS=600 for the long runs
#
# cargo-fuzz is installed if missing. It wants nightly flags; the machine's
# one stable toolchain takes them with RUSTC_BOOTSTRAP=1. No sanitizer (-s
# none): the code under test is Rust, and it runs several times faster.
# New inputs go to target/fuzz-corpus/TARGET; the checked-in seeds in
# fuzz/corpus/TARGET are only read. A crash leaves its input in
# fuzz/artifacts/TARGET and fails the run; make it a unit test, then fix it.
set -euo pipefail

repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$repo/fuzz"
secs=${FUZZ_SECS:-60}
export RUSTC_BOOTSTRAP=1

command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo fuzz list)
cargo fuzz build -s none

failed=()
for t in "${targets[@]}"; do
    work=$repo/target/fuzz-corpus/$t
    mkdir -p "$work"
    log=$repo/target/fuzz-corpus/$t.log
    echo "==> $t for ${secs} s"
    if cargo fuzz run -s none "$t" "$work" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
        # "#N DONE cov: C ft: F corp: K/..." and the final execution count
        summary=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
        echo "    ${summary:-$(tail -1 "$log")}"
    else
        echo "    FAILED: see $log and fuzz/artifacts/$t" >&2
        grep -E 'panicked|ERROR|SUMMARY' "$log" | head -5 >&2 || true
        failed+=("$t")
    fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz targets with findings: ${failed[*]}" >&2; exit 1; }
