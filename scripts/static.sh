#!/usr/bin/env bash
# `make static`: a fully static x86_64 musl build of rkubelet,
#   target/static/x86_64-unknown-linux-musl/dist/rkubelet
# built with the size-optimised `dist` profile (Cargo.toml) in its own target
# directory, so it never waits on, or invalidates, the everyday release build.
# zig (PyPI's ziglang) is the C/C++ compiler and linker through cargo-zigbuild,
# so gRPC's C core builds against musl without a musl toolchain from Debian.
# Each tool is installed only if missing: ziglang (pip), cargo-zigbuild
# (cargo install), the rustup target x86_64-unknown-linux-musl.
set -euo pipefail

repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$repo"

target=x86_64-unknown-linux-musl
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target/static}
out=$CARGO_TARGET_DIR/$target/dist/rkubelet

say() { printf '==> %s\n' "$*"; }
die() { printf 'static.sh: %s\n' "$*" >&2; exit 1; }

[[ $(uname -m) == x86_64 ]] || die "this recipe builds on x86_64 hosts only"
command -v cargo >/dev/null || die "no cargo on PATH"
command -v rustup >/dev/null || die "no rustup on PATH (needed for the $target target)"
# cmake and g++ for gRPC's C core (its build scripts), file for the check below.
RKUBELET_DEPS_NO_KUBECTL=1 bash scripts/deps.sh

# zig, from PyPI; cargo-zigbuild finds it as `python3 -m ziglang` when no
# `zig` is on PATH.
python=$(command -v python3 || true)
[[ -n $python ]] || die "no python3 (needed for PyPI's ziglang)"
if ! command -v zig >/dev/null && ! "$python" -m ziglang version >/dev/null 2>&1; then
    say "installing zig: pip install ziglang"
    # A Debian python3 refuses pip installs into itself (PEP 668).
    "$python" -m pip install --quiet ziglang ||
        "$python" -m pip install --quiet --break-system-packages ziglang
fi
if command -v zig >/dev/null; then
    say "zig $(zig version)"
else
    say "zig $("$python" -m ziglang version) (python3 -m ziglang)"
fi

if ! command -v cargo-zigbuild >/dev/null; then
    say "installing cargo-zigbuild: cargo install --locked cargo-zigbuild"
    cargo install --locked cargo-zigbuild
fi
say "$(cargo-zigbuild --version 2>/dev/null || cargo zigbuild --version)"

if ! rustup target list --installed | grep -qx "$target"; then
    say "rustup target add $target"
    rustup target add "$target"
fi

# musl's headers hide the *64 (LFS) aliases unless asked; gRPC's C core uses
# them. zig's newer clang also rejects an old template idiom in its C++.
export CFLAGS_x86_64_unknown_linux_musl="-D_LARGEFILE64_SOURCE"
export CXXFLAGS_x86_64_unknown_linux_musl="-D_LARGEFILE64_SOURCE -Wno-missing-template-arg-list-after-template-kw"

say "cargo zigbuild --profile dist --target $target --bin rkubelet"
cargo zigbuild --profile dist --target "$target" --bin rkubelet

[[ -x $out ]] || die "no binary at $out"
desc=$(file -b "$out")
size=$(stat -c %s "$out")
echo
echo "file: $desc"
printf 'size: %s bytes (%s)\n' "$size" "$(numfmt --to=iec-i --suffix=B "$size")"
echo "path: $out"
case $desc in
*"statically linked"* | *"static-pie linked"*) ;;
*) die "$out is not statically linked" ;;
esac
