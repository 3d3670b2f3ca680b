#!/usr/bin/env bash
# The static build's linker (scripts/static-env.sh sets it): zig links as
# cargo-zigbuild has it do, then lld links the same inputs once more with
# the functions that run in steady state placed together at the start of
# .text (lld's --symbol-ordering-file, the list in scripts/hot-symbols.txt).
#
# Why: the kernel maps a file's pages 64 KB at a time around each fault, so
# the RSS of the binary's code follows how many 64 KB windows the running
# code touches, not its size. In the link's own order the 1.1 MB of
# functions a minute of standalone kubelet work runs lay in 79 of the
# binary's windows; placed together they fill 19 (docs/static-build.md).
#
# The same link folds identical functions (lld's --icf=all): Rust's
# generics leave many copies of the same machine code (drop glue, Vec and
# map methods of same-layout types), and so do C++ templates; 137 KB. "all"
# rather than "safe" also folds functions whose address is taken, which
# breaks only code that tells functions apart by address: Rust makes no
# such promise; the vtables that are compared (Rust's, and the C core's
# endpoint and promise vtable structs) are compiled position-independent
# into .data.rel.ro, which ICF never folds; Chromium ships abseil with
# --icf=all. `make test-static` runs the end-to-end suites on this binary.
#
# zig cc refuses lld options it does not know, these among them, so the
# second link runs `zig ld.lld` with the command line zig printed for the
# first (ZIG_VERBOSE_LINK). If anything in that goes wrong, the first link's
# output stays: the binary is the same, only laid out in the link's order.
# rustc shows a linker's messages only when the link fails, so the outcome
# goes to $CARGO_TARGET_DIR/static-link.status, which scripts/static.sh
# prints (and warns on) after every build.
set -uo pipefail

zigcc=${CC_x86_64_unknown_linux_musl:-}
[[ -n $zigcc ]] || { echo "static-link.sh: CC_x86_64_unknown_linux_musl is not set (run through scripts/static.sh)" >&2; exit 1; }
order=${RKUBELET_SYMBOL_ORDER:-}

status_file=${CARGO_TARGET_DIR:-.}/static-link.status
# status WORDS: what the last link did, for static.sh.
status() { printf '%s\n' "$*" >"$status_file" 2>/dev/null || true; }
warn() {
    echo "static-link.sh: WARNING: $*; the binary keeps the link's own order" >&2
    status "link order: $*"
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
ZIG_VERBOSE_LINK=1 "$zigcc" "$@" 2>"$log"
rc=$?
# zig's command line is one line starting with ld.lld; all else is output.
grep -v '^ld\.lld ' "$log" >&2
((rc == 0)) || exit "$rc"
[[ -n $order ]] || { status "link order: no RKUBELET_SYMBOL_ORDER"; exit 0; }
[[ -r $order ]] || { warn "no symbol order file at $order"; exit 0; }

line=$(grep '^ld\.lld ' "$log" | tail -n 1)
[[ -n $line ]] || { warn "zig printed no ld.lld command line"; exit 0; }
# zig prints the arguments joined by spaces, unquoted: an argument with a
# space in it would be split, lld would fail and the first link would stay.
read -r -a args <<<"${line#ld.lld }"
out_at=-1 # the index of the output path, after -o
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
    [[ ${args[i]} == -o ]] && out_at=$((i + 1))
done
out=""
((out_at < 0)) || out=${args[out_at]}
[[ -n $out && -f $out ]] || { warn "no output file in zig's ld.lld command line"; exit 0; }

# The zig that linked first (scripts/static-env.sh sets it): another
# zig's lld could lay the binary out differently.
[[ -n ${RKUBELET_ZIG:-} ]] || { warn "RKUBELET_ZIG is not set"; exit 0; }
read -r -a zig <<<"$RKUBELET_ZIG"
relinked=$out.ordered
ordered=("${args[@]}")
ordered[out_at]=$relinked
if "${zig[@]}" ld.lld "${ordered[@]}" --icf=all --symbol-ordering-file="$order" --no-warn-symbol-ordering >&2; then
    if mv -f "$relinked" "$out"; then
        status "ordered by $order"
    else
        rm -f "$relinked"
        warn "could not move the relinked binary over $out"
    fi
else
    rm -f "$relinked"
    warn "zig ld.lld with --symbol-ordering-file failed"
fi
exit 0
