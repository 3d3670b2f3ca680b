//! tmpfs mounts for memory-backed volumes (upstream `mount-utils`), with
//! mount(2)/umount2(2) directly: no `mount` binary needed on minimal hosts.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// Whether `dir` is a mount point: its device differs from its parent's
/// (upstream's IsLikelyNotMountPoint; bind mounts of the same filesystem
/// are not detected, and the kubelet never makes those here).
pub fn is_mount_point(dir: &Path) -> io::Result<bool> {
    let meta = std::fs::symlink_metadata(dir)?;
    let parent = dir
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent directory"))?;
    Ok(meta.dev() != std::fs::metadata(parent)?.dev())
}

/// Mounts a tmpfs on `dir` unless one is already there. `size_bytes` caps
/// it (emptyDir `sizeLimit`); `None` leaves the kernel's default.
pub fn ensure_tmpfs(dir: &Path, size_bytes: Option<u64>) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    if is_mount_point(dir)? {
        return Ok(());
    }
    let mut opts = String::from("mode=0777");
    if let Some(size) = size_bytes {
        opts.push_str(&format!(",size={size}"));
    }
    let tmpfs = |opts: &str| {
        mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(opts),
        )
    };
    // Secrets and memory-backed volumes never go to swap (`noswap`,
    // Linux 6.4+), as upstream mounts them; older kernels refuse the
    // option, and are told once.
    if NOSWAP_REFUSED.load(Ordering::Relaxed) {
        return tmpfs(&opts).map_err(io::Error::from);
    }
    match tmpfs(&format!("{opts},noswap")) {
        Err(nix::Error::EINVAL) => {
            let without = tmpfs(&opts);
            if without.is_ok() {
                NOSWAP_REFUSED.store(true, Ordering::Relaxed);
                log::warn!(
                    "the tmpfs noswap option is not supported: memory-backed volumes \
                     (secrets, emptyDirs, ...) might be swapped to disk"
                );
            }
            without.map_err(io::Error::from)
        }
        other => other.map_err(io::Error::from),
    }
}

/// Set once the kernel refused tmpfs's `noswap`.
static NOSWAP_REFUSED: AtomicBool = AtomicBool::new(false);

/// Unmounts `dir` when it is a mount point; a missing directory is fine.
pub fn unmount_if_mounted(dir: &Path) -> io::Result<()> {
    match is_mount_point(dir) {
        Ok(true) => umount2(dir, MntFlags::empty()).map_err(io::Error::from),
        Ok(false) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}
