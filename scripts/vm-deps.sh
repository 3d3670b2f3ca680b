#!/usr/bin/env bash
# The Debian packages `make vm-test` needs beyond `make deps`: QEMU (TCG
# or KVM), mmdebstrap for the guest images, e2fsprogs for mkfs.ext4 -d and
# debugfs. Installs only what is missing (root).
set -euo pipefail
pkgs=(qemu-system-x86 mmdebstrap e2fsprogs)
missing=()
for p in "${pkgs[@]}"; do
    [[ $(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null) == ii* ]] || missing+=("$p")
done
((${#missing[@]})) || exit 0
echo "vm-deps.sh: installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get -y -q -o Dpkg::Use-Pty=0 install --no-install-recommends "${missing[@]}" </dev/null ||
    { apt-get -y -q update </dev/null && apt-get -y -q -o Dpkg::Use-Pty=0 install --no-install-recommends "${missing[@]}" </dev/null; }
