#!/usr/bin/env bash
# `make size`: where the static binary's bytes go, against the footprint
# budget (9 MB, tests/bench/budget.sh).
#
#   1. the top crates by code size: cargo bloat --crates on the static dist
#      build itself (the dist profile keeps symbols; static.sh strips the
#      copy it ships). cargo-bloat is installed if missing. gRPC's C core,
#      c-ares, abseil, re2, upb and musl show as [Unknown]: cargo bloat
#      attributes Rust symbols only.
#   2. the stripped binary by ELF section, and its size against the budget;
#   3. the RSS of an idle standalone rkubelet (static binary, no pods,
#      private containerd from tests/harness) split by mapping: the binary's
#      code, rodata and data, the heap, thread stacks, other anonymous memory.
#      Needs root; skipped with a note otherwise, or with SIZE_NO_RSS=1.
#
# SIZE_CRATES (25) sets how many crates to list. Exits non-zero when the
# binary is over budget, after printing everything.
set -euo pipefail

# shellcheck source=scripts/static-env.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/static-env.sh"

if ! command -v cargo-bloat >/dev/null; then
    say "installing cargo-bloat: cargo install --locked cargo-bloat"
    # without the static build's std switches (static-env.sh), which are
    # for the target, not for a host tool
    env -u RUSTC_BOOTSTRAP -u CARGO_UNSTABLE_BUILD_STD -u CARGO_UNSTABLE_BUILD_STD_FEATURES \
        cargo install --locked cargo-bloat
fi

# cargo bloat runs `cargo build`; this shim turns that into the same
# `cargo zigbuild` static.sh runs (same profile, target dir and flags, so the
# build is shared and nothing is rebuilt).
shim=$(mktemp -d /tmp/rk-size.XXXXXX)
real_cargo=$(command -v cargo)
cat >"$shim/cargo" <<SHIM
#!/usr/bin/env bash
if [[ \${1:-} == build ]]; then shift; exec "$real_cargo" zigbuild "\$@"; fi
exec "$real_cargo" "\$@"
SHIM
chmod +x "$shim/cargo"

say "cargo bloat --crates (the static dist build, before strip; .text only)"
PATH="$shim:$PATH" cargo bloat --profile dist --target "$target" --bin rkubelet \
    --crates -n "${SIZE_CRATES:-25}"
rm -rf "$shim"

echo
bash scripts/static.sh | tail -n 3
echo
say "sections of the stripped binary (bytes)"
size -A -d "$out" | awk 'NR > 2 && $2 >= 4096 && $1 !~ /^(\.t?bss|Total)$/ { printf "  %-20s %10d\n", $1, $2 }'

echo
status=0
bash tests/bench/budget.sh || status=$?

echo
if [[ ${SIZE_NO_RSS:-0} == 1 ]]; then
    say "RSS by mapping: skipped (SIZE_NO_RSS=1)"
elif [[ $(id -u) != 0 ]]; then
    say "RSS by mapping: skipped (needs root for the private containerd)"
else
    say "RSS by mapping of an idle standalone rkubelet (static binary, no pods)"
    bash tests/bench/idle_rss.sh "$out"
fi
exit "$status"
