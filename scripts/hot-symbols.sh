#!/usr/bin/env bash
# Regenerates scripts/hot-symbols.txt: the functions the static binary runs
# in steady state, which scripts/static-link.sh places together at the
# start of .text. Root only (the benches run a private containerd).
#
#   bash scripts/hot-symbols.sh [UNSTRIPPED_STATIC_BINARY]
#
# Runs the standalone bench (30 pods), the cluster bench (30 plain and 60
# volume pods) and the probes bench (30 pods x 3 probes) with the binary
# under valgrind's callgrind, zeroes its counters once the pods run,
# and after HOT_SECS (80) lists every function that executed. Those are
# written hottest first. The default binary is the symbol-bearing copy
# `make static` keeps beside the shipped one ($out.sym).
#
# Regenerate after large changes to what runs periodically; a stale list
# only costs RSS (names no longer in the binary are skipped by lld), never
# correctness. Then `make static` relinks (this script touches src/main.rs,
# since cargo does not track the list).
set -euo pipefail

repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
bin=${1:-$repo/target/static/x86_64-unknown-linux-musl/dist/rkubelet.sym}
secs=${HOT_SECS:-80}
list=$repo/scripts/hot-symbols.txt
[[ -x $bin ]] || { echo "hot-symbols.sh: no binary at $bin (make static)" >&2; exit 1; }
[[ -n $(nm "$bin" 2>/dev/null | head -c1) ]] ||
    { echo "hot-symbols.sh: $bin has no symbols" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "hot-symbols.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }

work=$(mktemp -d /tmp/rk-hot.XXXXXX)
bench_pid=""
# A bench left running on failure would keep its containerd and valgrind:
# TERM runs its own cleanup trap.
trap '[[ -n $bench_pid ]] && kill "$bench_pid" 2>/dev/null && wait "$bench_pid" 2>/dev/null; rm -rf "$work"' EXIT
fail() { echo "hot-symbols.sh: $*" >&2; exit 1; }
cat >"$work/wrap.sh" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --demangle=no --callgrind-out-file=$work/cg.\$HOT_TAG.%p "$bin" "\$@"
EOF
chmod +x "$work/wrap.sh"

# profile TAG BENCH MARK [ENV...]: run BENCH on the wrapped binary and dump
# the counters of the HOT_SECS after the line starting with MARK.
profile() {
    local tag=$1 bench=$2 mark=$3 pid=""
    shift 3
    echo "==> $tag: $bench"
    # (the marks name 30 pods: a caller's BENCH_PODS must not change that)
    env "$@" BENCH_PODS=30 HOT_TAG="$tag" BENCH_BIN="$work/wrap.sh" BENCH_IDLE_SECS=$((secs + 20)) \
        BENCH_PROBE_SECS=$((secs + 20)) bash "$repo/tests/bench/$bench" >"$work/$tag.log" 2>&1 &
    bench_pid=$!
    for _ in $(seq 1 240); do
        grep -q "^$mark" "$work/$tag.log" && break
        kill -0 "$bench_pid" 2>/dev/null || break
        sleep 2
    done
    grep -q "^$mark" "$work/$tag.log" || { cat "$work/$tag.log" >&2; fail "$tag never reached $mark"; }
    pid=$(pgrep -f "callgrind.*--callgrind-out-file=$work/cg.$tag" | head -n 1) || true
    [[ -n $pid ]] || fail "$tag: no callgrind process found"
    callgrind_control -z "$pid" >/dev/null || fail "$tag: callgrind_control -z $pid failed"
    sleep "$secs"
    callgrind_control -d "$pid" >/dev/null || fail "$tag: callgrind_control -d $pid failed"
    compgen -G "$work/cg.$tag.$pid.[0-9]*" >/dev/null || fail "$tag: callgrind wrote no dump"
    wait "$bench_pid" || true
    bench_pid=""
}

profile standalone run.sh idle_30_pods_rss_kb
profile cluster cluster.sh cluster_idle_30_plus_60_volume_pods_threads
profile probes probes.sh probes_start_ BENCH_PROBE_PODS=30

nm --defined-only "$bin" | awk '$2 ~ /^[tTwW]$/ {print $3}' | sort -u >"$work/text-symbols"
# Written in three groups, hottest first within each: what runs standalone
# (every mode runs it), then what probes add, then what cluster mode adds;
# so a standalone kubelet's code fills the fewest windows.
python3 - "$work" "$list" <<'PY'
import collections, glob, os, re, sys

work, out = sys.argv[1], sys.argv[2]
text = set(open(f"{work}/text-symbols").read().split())
order = ["standalone", "probes", "cluster"]
cost = collections.Counter()
ran_in = collections.defaultdict(set)
for dump in glob.glob(f"{work}/cg.*.*.[0-9]*"):
    tag = dump.split("/")[-1].split(".")[1]
    names, fn, call_cost_next = {}, None, False
    for line in open(dump, errors="replace"):
        m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?", line)
        if m:
            kind, ident, name = m.groups()
            if name:
                names[ident] = name.strip()
            ran_in[names.get(ident)].add(tag)
            if kind == "fn":
                fn = names.get(ident)
            continue
        if line.startswith("calls="):
            call_cost_next = True  # the next cost line is the call's, not fn's own
            continue
        if fn and line[:1] in "0123456789+-*":
            parts = line.split()
            if not call_cost_next and len(parts) > 1 and parts[1].isdigit():
                cost[fn] += int(parts[1])
            call_cost_next = False

def key(name):
    group = min(order.index(t) for t in ran_in[name] if t in order)
    return (group, -cost[name], name)

hot = sorted((n for n in ran_in if n in text), key=key)
missing = [t for t in order if not any(t in ran_in[n] for n in hot)]
if missing or not hot:
    sys.exit(f"hot-symbols.sh: no functions from {missing or order}; the list is left as it was")
with open(out + ".new", "w") as f:
    f.write("\n".join(hot) + "\n")
os.replace(out + ".new", out)
for i, tag in enumerate(order):
    print(f"{tag}: {sum(1 for n in hot if key(n)[0] == i)} functions")
print(f"{len(hot)} functions ran in steady state -> {out}")
PY
touch "$repo/src/main.rs"
