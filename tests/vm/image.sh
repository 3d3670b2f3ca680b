#!/usr/bin/env bash
# usage: tests/vm/image.sh RELEASE        (RELEASE: bookworm | trixie)
#
# Builds, or finds in its cache, a bootable Debian RELEASE image for the
# VM tests (tests/vm/README.md) and prints the directory that holds
# vmlinuz, initrd.img and rootfs.ext4. Everything else goes to stderr.
#
# The root filesystem comes from Debian's packages only (mmdebstrap,
# http://deb.debian.org/debian): systemd as PID 1, udev, dbus, the
# distribution's kernel and initramfs-tools' initrd, containerd, runc and
# the CNI plugins, and tests/vm/runner/ (the unit that runs
# /payload/run.sh from the second disk). containerd.service is installed
# but disabled: the payload writes its config and starts it.
#
# Cache: ${RKUBELET_VM_CACHE:-/var/cache/rkubelet-vm}/RELEASE-HASH, HASH
# from this script, the runner files and RELEASE. Built in a temporary
# directory beside it and renamed into place, under a flock, so that
# concurrent callers build it once; older images of RELEASE are removed.
# The Debian archive moves on (point releases) without changing HASH:
# remove the cache directory to pick up new packages.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self=$here/$(basename "${BASH_SOURCE[0]}")
runner_dir=$here/runner
MIRROR=http://deb.debian.org/debian
# Free space in rootfs.ext4 beyond its content (containerd's images and
# containers, logs), in MiB.
FREE_MIB=1536

say() { echo "image.sh${release:+ ($release)}: $*" >&2; }
die() {
    say "error: $*"
    exit 1
}

# The packages on top of --variant=minbase (Essential: yes and apt).
packages() {
    local p=(
        systemd systemd-sysv dbus udev kmod
        linux-image-amd64 initramfs-tools zstd
        e2fsprogs util-linux mount procps iproute2 iptables hostname
        containerd runc containernetworking-plugins curl
        # the guest tests read /stats/summary with it
        jq
    )
    case $1 in
    # crun; and the DRA driver peer (tests/plugins/draplugin.py): Python's
    # gRPC and protoc, for the CDI case containerd 1.7 can run.
    trixie) p+=(crun python3-grpcio python3-protobuf protobuf-compiler) ;;
    esac
    local IFS=,
    echo "${p[*]}"
}

# Units that only cost boot time in a throwaway VM under TCG, masked when
# the release has them. The getty on the serial console would only add a
# login prompt to the console log (nobody logs in).
WASTE_UNITS=(
    apt-daily.timer apt-daily-upgrade.timer apt-daily.service apt-daily-upgrade.service
    man-db.timer man-db.service dpkg-db-backup.timer dpkg-db-backup.service
    e2scrub_all.timer e2scrub_all.service e2scrub_reap.service
    fstrim.timer fstrim.service systemd-timesyncd.service
    logrotate.timer logrotate.service
    systemd-networkd.service systemd-networkd-wait-online.service networking.service
    serial-getty@ttyS0.service getty@tty1.service
)

# mmdebstrap's customize hook: `image.sh --customize ROOT RELEASE OUT`.
customize() {
    local root=$1 out=$3
    release=$2
    say "customizing $root"
    echo rkvm >"$root/etc/hostname"
    cat >"$root/etc/hosts" <<'EOF'
127.0.0.1	localhost
127.0.1.1	rkvm
::1		localhost ip6-localhost ip6-loopback
ff02::1		ip6-allnodes
ff02::2		ip6-allrouters
EOF
    # The VM has no network device: a resolver that answers "refused" at
    # once rather than mmdebstrap's copy of the build host's.
    printf '# rkubelet VM: no network\nnameserver 127.0.0.1\n' >"$root/etc/resolv.conf"
    # Root on the first virtio disk (a snapshot: never checked, never kept).
    printf '/dev/vda\t/\text4\trw,errors=remount-ro\t0\t0\n' >"$root/etc/fstab"

    install -m 0755 "$runner_dir/rkubelet-vm-runner" "$root/usr/local/sbin/rkubelet-vm-runner"
    install -m 0644 "$runner_dir/rkubelet-vm-runner.service" "$root/etc/systemd/system/rkubelet-vm-runner.service"
    chroot "$root" systemctl enable rkubelet-vm-runner.service
    chroot "$root" systemctl disable containerd.service
    local u masked=()
    for u in "${WASTE_UNITS[@]}"; do
        if [[ -e $root/usr/lib/systemd/system/$u || -e $root/lib/systemd/system/$u || $u == *getty@* ]]; then
            masked+=("$u")
        fi
    done
    chroot "$root" systemctl mask "${masked[@]}"
    # Kernel messages below "warning" stay off the console log.
    mkdir -p "$root/etc/sysctl.d"
    echo 'kernel.printk = 4 4 1 7' >"$root/etc/sysctl.d/10-rkvm-console.conf"

    # The kernel and Debian's initrd for it (initramfs-tools, MODULES=most),
    # which must be able to mount root on virtio: check it has the drivers.
    local kernels
    mapfile -t kernels < <(cd "$root/boot" && ls vmlinuz-* 2>/dev/null)
    ((${#kernels[@]} == 1)) || die "want exactly one kernel in /boot, found: ${kernels[*]:-none}"
    local kver=${kernels[0]#vmlinuz-}
    [[ -s $root/boot/initrd.img-$kver ]] || die "no /boot/initrd.img-$kver: initramfs-tools did not build it"
    local m listing
    listing=$(chroot "$root" lsinitramfs "/boot/initrd.img-$kver") || die "lsinitramfs failed"
    for m in virtio_pci virtio_blk ext4; do
        grep -q "/$m\.ko" "$root/lib/modules/$kver/modules.builtin" && continue
        grep -q "/$m\.ko" <<<"$listing" || die "the initrd of $kver has no $m module"
    done
    cp "$root/boot/vmlinuz-$kver" "$out/vmlinuz"
    cp "$root/boot/initrd.img-$kver" "$out/initrd.img"
    # shellcheck disable=SC2016 # dpkg-query's own ${...} format
    chroot "$root" dpkg-query -W -f '${Package}\t${Version}\n' >"$out/packages.txt"
    echo "$kver" >"$out/kernel-version"
}

if [[ ${1:-} == --customize ]]; then
    customize "$2" "$3" "$4"
    exit 0
fi

release=${1:-}
case $release in
bookworm | trixie) ;;
*)
    echo "usage: $0 bookworm|trixie" >&2
    exit 2
    ;;
esac
((EUID == 0)) || die "must run as root (mmdebstrap --mode=root, chroot)"
for tool in mmdebstrap mkfs.ext4 flock sha256sum chroot; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install mmdebstrap e2fsprogs util-linux)"
done

hash=$(
    {
        cat "$self" "$runner_dir/rkubelet-vm-runner" "$runner_dir/rkubelet-vm-runner.service"
        echo "release=$release"
    } | sha256sum | cut -c1-16
)
cache=${RKUBELET_VM_CACHE:-/var/cache/rkubelet-vm}
dir=$cache/$release-$hash

have_image() { [[ -s $dir/vmlinuz && -s $dir/initrd.img && -s $dir/rootfs.ext4 ]]; }

if have_image; then
    echo "$dir"
    exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.$release.lock"
if ! flock -n 9; then
    say "waiting for another build of $release (lock $cache/.$release.lock)"
    flock -w 3600 9 || die "timed out waiting for the lock $cache/.$release.lock"
fi
if have_image; then
    echo "$dir"
    exit 0
fi

# Leftovers of builds that died (we hold the lock: nobody else builds).
rm -rf "$cache/.build-$release-"*
tmp=$(mktemp -d "$cache/.build-$release-XXXXXX")
chmod 0755 "$tmp" # apt's _apt user downloads into it
cleanup() {
    local rc=$?
    [[ -n ${tmp:-} ]] && rm -rf "$tmp"
    ((rc == 0)) || say "build failed (status $rc)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "building in $tmp (mmdebstrap from $MIRROR)"
t0=$SECONDS
mkdir -p "$tmp/out"
mmdebstrap --mode=root --variant=minbase --format=directory \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --include="$(packages "$release")" \
    --customize-hook="'$self' --customize \"\$1\" $release '$tmp/out'" \
    "$release" "$tmp/root" "$MIRROR" >&2 ||
    die "mmdebstrap failed"
t1=$SECONDS

# After mmdebstrap, whose cleanup empties /etc/machine-id. A fixed one:
# the payload needs it, and every boot is the same machine anyway.
printf '%s' "rkubelet-vm-$release" | md5sum | cut -c1-32 >"$tmp/root/etc/machine-id"

used_mib=$(du -s --block-size=1M "$tmp/root" | cut -f1)
size_mib=$((used_mib + used_mib / 10 + FREE_MIB))
say "root filesystem: ${used_mib} MiB of content, image ${size_mib} MiB (sparse)"
truncate -s "${size_mib}M" "$tmp/out/rootfs.ext4"
mkfs.ext4 -q -F -L rkvm-root -E root_owner=0:0 -d "$tmp/root" "$tmp/out/rootfs.ext4" ||
    die "mkfs.ext4 -d failed"
rm -rf "$tmp/root"
t2=$SECONDS
cat >"$tmp/out/build-info" <<EOF
release=$release
hash=$hash
kernel=$(cat "$tmp/out/kernel-version")
built=$(date -u +%Y-%m-%dT%H:%M:%SZ)
mmdebstrap_seconds=$((t1 - t0))
mkfs_seconds=$((t2 - t1))
EOF

mv -T "$tmp/out" "$dir"
rm -rf "$tmp"
tmp=
# Keep only the newest image of this release.
for old in "$cache/$release-"*; do
    [[ $old == "$dir" || ! -d $old ]] && continue
    say "removing the stale image $old"
    rm -rf "$old"
done
say "built $dir in $((SECONDS - t0)) s (mmdebstrap $((t1 - t0)) s, mkfs.ext4 $((t2 - t1)) s)"
echo "$dir"
