#!/usr/bin/env bash
# `make static`: a fully static x86_64 musl build of rkubelet,
#   target/static/x86_64-unknown-linux-musl/dist/rkubelet
# built with the size-optimised `dist` profile (Cargo.toml) in its own target
# directory, so it never waits on, or invalidates, the everyday release build.
# zig (PyPI's ziglang) is the C/C++ compiler and linker through cargo-zigbuild,
# so gRPC's C core builds against musl without a musl toolchain from Debian.
# Tools and flags: scripts/static-env.sh.
set -euo pipefail

# shellcheck source=scripts/static-env.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/static-env.sh"

# STATIC_FEATURES: extra cargo features, e.g. `fault-injection` to run
# tests/panics.rs against this build (RKUBELET_TEST_BIN); such a binary is
# for tests only and replaces the shipped one at the same path.
# compact-logs: `trace!` compiled out of every crate (Cargo.toml says why).
features=(--features "compact-logs${STATIC_FEATURES:+,$STATIC_FEATURES}")
say "cargo zigbuild --profile dist --target $target --bin rkubelet ${features[*]}"
cargo zigbuild --profile dist --target "$target" --bin rkubelet "${features[@]}"

[[ -x $out ]] || die "no binary at $out"
# The dist profile keeps symbols so that `make size` (cargo bloat) analyses
# this very build; the shipped binary is stripped here. strip writes a new
# file: cargo's copy under deps/ keeps its symbols.
# rkubelet.sym keeps them too, for scripts/hot-symbols.sh (when cargo had
# nothing to do, $out is last run's stripped file and .sym stays).
if [[ -n $(nm "$out" 2>/dev/null | head -c 1) ]]; then ln -f "$out" "$out.sym"; fi
strip --strip-all -o "$out.stripped" "$out"
mv -f "$out.stripped" "$out"

# How the last link laid out the code (scripts/static-link.sh); rustc
# would not show that script's warnings.
layout=$(cat "$CARGO_TARGET_DIR/static-link.status" 2>/dev/null || echo "unknown (no $CARGO_TARGET_DIR/static-link.status)")
case $layout in
"ordered by "*) ;;
*) say "WARNING: the code is in the link's own order ($layout): expect a few MB more RSS" ;;
esac

desc=$(file -b "$out")
size=$(stat -c %s "$out")
echo
echo "file: $desc"
printf 'size: %s bytes (%s)\n' "$size" "$(numfmt --to=iec-i --suffix=B "$size")"
echo "path: $out"
echo "code layout: $layout"
case $desc in
*"statically linked"* | *"static-pie linked"*) ;;
*) die "$out is not statically linked" ;;
esac
