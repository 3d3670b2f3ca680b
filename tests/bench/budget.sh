#!/usr/bin/env bash
# The footprint budget of issue 12: the static musl binary (`make static`)
# must stay within 9 MB (decimal: 9,000,000 bytes, as the README counts MB).
# Prints one line; exits non-zero, loudly, when the binary is over budget or
# missing. `make bench` and `make size` run it (both build the binary first).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${STATIC_BIN:-$root/target/static/x86_64-unknown-linux-musl/dist/rkubelet}
budget=${SIZE_BUDGET_BYTES:-9000000}

mb() { echo "$1" | awk '{printf "%.2f MB", $1 / 1e6}'; }

if [[ ! -f $bin ]]; then
    echo "budget: FAIL: no static binary at $bin (make static builds it)" >&2
    exit 1
fi
size=$(stat -c %s "$bin")
if ((size > budget)); then
    echo "static_binary_bytes $size ($(mb "$size")) budget $budget ($(mb "$budget")): OVER by $((size - budget)) bytes"
    echo "budget: FAIL: the static binary is $((size - budget)) bytes over its $(mb "$budget") budget (make size shows where the bytes go)" >&2
    exit 1
fi
echo "static_binary_bytes $size ($(mb "$size")) budget $budget ($(mb "$budget")): OK, $((budget - size)) bytes to spare"
