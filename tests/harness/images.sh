#!/usr/bin/env bash
# Builds the two offline test images as OCI image-layout tarballs:
#   OUTDIR/busybox.tar  docker.io/library/busybox:1.36  (Cmd ["sh"])
#   OUTDIR/pause.tar    registry.k8s.io/pause:3.9       (sleeps forever, exits 0 on TERM/INT)
#   OUTDIR/spare.tar    example.test/rkubelet/spare:1   (Cmd ["true"]; not imported by the
#                       harness: the image GC test imports it as an image no pod uses)
#
# Usage: tests/harness/images.sh OUTDIR
#
# There is no registry access here and no docker/buildah/skopeo, so the
# layout (oci-layout, index.json, blobs/sha256/*) is written by hand from
# Debian's busybox-static. Everything is reproducible (fixed mtimes, owners,
# sort order, gzip -n), so rebuilding yields identical digests. All images
# share one layer; only their configs differ (so each has its own image ID).
set -euo pipefail

usage() { echo "usage: $0 OUTDIR" >&2; exit 2; }
[[ $# -eq 1 ]] || usage
outdir=$1
self=$(readlink -f "${BASH_SOURCE[0]}")
busybox_bin=${BUSYBOX_BIN:-/bin/busybox}
[[ -x $busybox_bin ]] || busybox_bin=/usr/bin/busybox
[[ -x $busybox_bin ]] || { echo "images.sh: no busybox (apt-get install busybox-static)" >&2; exit 1; }

mkdir -p "$outdir"
outdir=$(readlink -f "$outdir")

# Tests run in parallel and may all ask for the cache at once: serialize, and
# let the late comers find the finished tarballs.
exec 9>"$outdir/.images.lock"
flock 9

fresh() { [[ -s $1 && $1 -nt $self ]]; }
if fresh "$outdir/busybox.tar" && fresh "$outdir/pause.tar" && fresh "$outdir/spare.tar"; then
    exit 0
fi

# A dynamic busybox would need the host's libc inside the image. (ldd is in
# libc-bin, always installed; `file` may not be.)
if ldd "$busybox_bin" >/dev/null 2>&1; then
    echo "images.sh: $busybox_bin is not a static busybox (apt-get install busybox-static)" >&2
    exit 1
fi

umask 022
work=$(mktemp -d "$outdir/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT

# OCI uses Go's GOARCH names, which match dpkg's for amd64/arm64.
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
epoch=1970-01-01T00:00:00Z
reproducible=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu)

# --- rootfs layer -----------------------------------------------------------
root=$work/rootfs
mkdir -p "$root"/{bin,etc,root,tmp,proc,sys,dev,var/run,usr/bin,usr/sbin,sbin,home}
chmod 1777 "$root/tmp"
chmod 0700 "$root/root"
install -m 0755 "$busybox_bin" "$root/bin/busybox"
# Every applet gets a symlink in /bin (like the upstream busybox image); the
# ones the tests rely on are checked explicitly so a trimmed busybox fails here
# rather than as a confusing "not found" inside a container.
required=(sh sleep echo cat ls true false env wget nc httpd touch date grep ps kill)
mapfile -t applets < <("$busybox_bin" --list)
for a in "${required[@]}"; do
    # A here-string, not a pipe: with pipefail, grep -q exiting at the first
    # match would SIGPIPE printf and fail the check at random.
    grep -qx -- "$a" <<<"$(printf '%s\n' "${applets[@]}")" || { echo "images.sh: busybox lacks applet $a" >&2; exit 1; }
done
for a in "${applets[@]}"; do
    [[ $a == busybox || $a == */* ]] && continue
    ln -s busybox "$root/bin/$a"
done
cat >"$root/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/home:/bin/false
EOF
cat >"$root/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
EOF
echo 'hosts: files dns' >"$root/etc/nsswitch.conf"

(cd "$root" && tar "${reproducible[@]}" -cf "$work/layer.tar" -- *)
diff_id=$(sha256sum <"$work/layer.tar" | cut -d' ' -f1)
gzip -n -6 <"$work/layer.tar" >"$work/layer.tar.gz"

# Moves FILE into BLOBDIR under its digest; prints "digest size".
put_blob() {
    local blobdir=$1 file=$2 sum size
    sum=$(sha256sum <"$file" | cut -d' ' -f1)
    size=$(stat -c %s "$file")
    mkdir -p "$blobdir/blobs/sha256"
    cp "$file" "$blobdir/blobs/sha256/$sum"
    echo "sha256:$sum $size"
}

# build_image NAME REF TAG PROCESS_JSON
#   PROCESS_JSON: the Entrypoint/Cmd members of the image config, as JSON.
build_image() {
    local name=$1 ref=$2 tag=$3 process=$4
    local layout=$work/$name layer_digest layer_size cfg cfg_size man man_size
    mkdir -p "$layout"
    read -r layer_digest layer_size < <(put_blob "$layout" "$work/layer.tar.gz")

    cat >"$work/$name.config.json" <<EOF
{"architecture":"$arch","os":"linux","created":"$epoch","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],$process,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$diff_id"]},"history":[{"created":"$epoch","created_by":"rkubelet tests/harness/images.sh"}]}
EOF
    read -r cfg cfg_size < <(put_blob "$layout" "$work/$name.config.json")

    cat >"$work/$name.manifest.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"$cfg","size":$cfg_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"$layer_digest","size":$layer_size}]}
EOF
    read -r man man_size < <(put_blob "$layout" "$work/$name.manifest.json")

    # Annotations as containerd's own exporter writes them: the full name in
    # io.containerd.image.name (what `ctr images import` names the image
    # after) and the tag in the OCI ref.name.
    cat >"$layout/index.json" <<EOF
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"$man","size":$man_size,"platform":{"architecture":"$arch","os":"linux"},"annotations":{"io.containerd.image.name":"$ref","org.opencontainers.image.ref.name":"$tag"}}]}
EOF
    echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"

    (cd "$layout" && tar "${reproducible[@]}" -cf "$outdir/.$name.tar.tmp" -- oci-layout index.json blobs)
    mv -f "$outdir/.$name.tar.tmp" "$outdir/$name.tar"
}

build_image busybox docker.io/library/busybox:1.36 1.36 '"Cmd":["sh"]'

# The real pause binary is not available offline. A shell loop stands in: as
# PID 1 it only gets signals it has handlers for, hence the explicit trap;
# `sleep & wait` keeps the trap responsive instead of waiting out the sleep.
# shellcheck disable=SC2016 # $! is for the container's shell
pause_cmd='trap '"'"'exit 0'"'"' TERM INT; while :; do sleep 3600 & wait $!; done'
build_image pause registry.k8s.io/pause:3.9 3.9 "\"Entrypoint\":[\"/bin/sh\",\"-c\",\"$pause_cmd\"],\"Cmd\":null"

build_image spare example.test/rkubelet/spare:1 1 '"Cmd":["true"]'
