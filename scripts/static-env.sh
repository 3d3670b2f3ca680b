# shellcheck shell=bash
# Sourced by scripts/static.sh and scripts/size.sh: the tools and the
# environment of the static musl build, so that both drive one and the same
# build (the same flags keep gRPC's C core from being rebuilt between them).
# Defines $repo, $target, $out, say and die; exports CARGO_TARGET_DIR and the
# C/C++ flags. Each tool is installed only if missing: ziglang 0.15.2 (pip, in a venv),
# cargo-zigbuild (cargo install), the rustup target x86_64-unknown-linux-musl.

repo=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$repo"

target=x86_64-unknown-linux-musl
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target/static}
out=$CARGO_TARGET_DIR/$target/dist/rkubelet

say() { printf '==> %s\n' "$*"; }
die() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

[[ $(uname -m) == x86_64 ]] || die "this recipe builds on x86_64 hosts only"
command -v cargo >/dev/null || die "no cargo on PATH"
command -v rustup >/dev/null || die "no rustup on PATH (needed for the $target target)"
# cmake and g++ for gRPC's C core (its build scripts), file for the check in
# static.sh, strip (binutils) for the shipped binary.
RKUBELET_DEPS_NO_KUBECTL=1 bash scripts/deps.sh
command -v strip >/dev/null || die "no strip on PATH (Debian's binutils)"

# zig, from PyPI, pinned to 0.15.2 in a venv of its own. From 0.16 on,
# zig's libc takes malloc from its own std.heap.SmpAllocator rather than
# musl's mallocng: power-of-two size classes and free memory never given
# back, which held 10.4 MB of anonymous memory with 110 probed pods where
# mallocng holds 4.4 (docs/static-build.md). cargo-zigbuild takes
# `python -m ziglang` from CARGO_ZIGBUILD_PYTHON_PATH before any `zig` on
# PATH; scripts/static-link.sh runs the same zig (RKUBELET_ZIG).
zig_version=0.15.2
zig_venv=${RKUBELET_ZIG_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/rkubelet/ziglang-$zig_version}
python=$(command -v python3 || true)
[[ -n $python ]] || die "no python3 (needed for PyPI's ziglang)"
if [[ $("$zig_venv/bin/python3" -m ziglang version 2>/dev/null) != "$zig_version" ]]; then
    say "installing zig $zig_version: pip install ziglang==$zig_version into $zig_venv"
    "$python" -m venv "$zig_venv" || die "python3 -m venv $zig_venv failed (Debian: apt-get install python3-venv)"
    "$zig_venv/bin/python3" -m pip install --quiet "ziglang==$zig_version" || die "pip install ziglang==$zig_version failed"
fi
export CARGO_ZIGBUILD_PYTHON_PATH=$zig_venv/bin/python3
export RKUBELET_ZIG="$zig_venv/bin/python3 -m ziglang"
say "zig $($RKUBELET_ZIG version) ($zig_venv)"

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
# The rest is size (`make size` shows where the bytes go), all upstream gRPC
# build switches rather than patches:
# - GRPC_ARES=0: no c-ares DNS resolver (we dial containerd over a unix
#   socket; gRPC falls back to its native resolver for a DNS name);
# - GRPC_NO_RLS: no route-lookup-service LB policy (a service-config feature
#   a unix-socket runtime never uses);
# - no unwind tables and no C++ exceptions in the C core: nothing unwinds
#   through it (a Rust panic never crosses the FFI boundary, and gRPC core is
#   written without exceptions; abseil follows -fno-exceptions and aborts
#   where it would throw);
# - no RTTI in the C++: gRPC core uses neither typeid nor dynamic_cast, and
#   abseil builds without RTTI (75 KB: the type_info of every polymorphic
#   class; a use would fail the compile, not the run).
# Changing any of these rebuilds the C core (~15 min).
c_size="-DGRPC_ARES=0 -DGRPC_NO_RLS -fno-asynchronous-unwind-tables -fno-unwind-tables"
export CFLAGS_x86_64_unknown_linux_musl="-D_LARGEFILE64_SOURCE $c_size"
export CXXFLAGS_x86_64_unknown_linux_musl="-D_LARGEFILE64_SOURCE -Wno-missing-template-arg-list-after-template-kw $c_size -fno-exceptions -fno-rtti"

# The link: zig as cargo-zigbuild sets it up, then lld once more with the
# functions that run in steady state placed together (scripts/static-link.sh,
# the list from scripts/hot-symbols.sh). cargo-zigbuild keeps a linker that
# is already set. Changing the list does not relink by itself: touch
# src/main.rs (hot-symbols.sh does).
export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_LINKER=$repo/scripts/static-link.sh
export RKUBELET_SYMBOL_ORDER=${RKUBELET_SYMBOL_ORDER-$repo/scripts/hot-symbols.txt}

# Rust's std is rebuilt with the binary (cargo's -Z build-std), for size; all
# of it is measured in CHANGELOG.md (the static binary table):
# - std without its `backtrace` feature: no DWARF symbolizer (gimli,
#   addr2line, rustc_demangle) in a binary that is stripped and so could
#   never name a frame. A panic still logs its message and file:line.
# - optimize_for_size: core's and alloc's small sort and formatting code
#   (the fast stable sort alone was ~0.17 MB over 48 element types).
# - std compiled with the dist profile (opt-level z, one fat-LTO unit).
# - -C force-unwind-tables=no: no unwind table for a function LLVM proves
#   cannot unwind. It takes effect only now that std is compiled here too.
# - -Z panic-in-drop=abort: drop glue is assumed not to unwind, so the
#   landing pads that would go on dropping the other fields and locals of a
#   value whose Drop panicked go. A panic inside a Drop impl now aborts the
#   process (after the panic hook has logged it) instead of reaching the
#   pod worker's catch_unwind; a panic anywhere else is caught as before
#   (tests/panics.rs). Rust already aborts on a panic in drop during an
#   unwind.
# - -Z location-detail=none: no file, line and column for panics and
#   #[track_caller] (about 95 KB: a Location and its path string per panic
#   site). A panic in the static binary logs its message and thread, with
#   "<redacted>" for the place; the release build keeps the location.
# build-std and -Z are unstable: RUSTC_BOOTSTRAP=1 lets the machine's one
# stable toolchain use them, as `make fuzz` does. They need the rust-src
# component; without it the build goes on with the prebuilt std and says so
# (the binary is then ~0.9 MB larger and over budget).
# (The list is read whole before grep looks at it: `grep -q` in a pipe
# would stop reading at the match and, under pipefail, fail the check.)
has_rust_src() { grep -qx rust-src <<<"$(rustup component list --installed)"; }
if ! has_rust_src; then
    say "rustup component add rust-src (for -Z build-std)"
    rustup component add rust-src || true
fi
# RUSTC_BOOTSTRAP=1 also lets a dependency's build script enable what it
# finds on nightly (anyhow's error_generic_member_access): the static
# binary runs that code, the release build does not; `make test-static`
# covers it. A RUSTFLAGS of the caller's would replace the target flags.
[[ -z ${RUSTFLAGS:-} ]] || say "WARNING: RUSTFLAGS is set; it replaces the static build's own Rust flags"
if has_rust_src; then
    export RUSTC_BOOTSTRAP=1
    export CARGO_UNSTABLE_BUILD_STD=std,panic_unwind
    export CARGO_UNSTABLE_BUILD_STD_FEATURES=panic-unwind,optimize_for_size
    export CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS="-C force-unwind-tables=no -Z panic-in-drop=abort -Z location-detail=none"
else
    say "WARNING: no rust-src component: building with the prebuilt std (larger, over the size budget)"
fi
