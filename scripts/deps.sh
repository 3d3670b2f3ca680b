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
#   file             scripts/static.sh checks the static binary
#   curl             scripts/demo.sh polls /healthz
#   bc               tests/bench/run.sh computes its figures
#   make             for `make` itself on a bare machine
set -euo pipefail

pkgs=(containerd runc containernetworking-plugins busybox-static iproute2 iptables cmake g++ file curl make bc)

say() { echo "deps.sh: $*" >&2; }
die() { say "$*"; exit 1; }

if ! command -v dpkg-query >/dev/null || ! command -v apt-get >/dev/null; then
    die "not a Debian/Ubuntu system: install by hand the equivalents of: ${pkgs[*]}"
fi

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
