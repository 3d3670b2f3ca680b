//! fsGroup ownership (upstream `pkg/volume/volume_linux.go`
//! SetVolumeOwnership): every file's group becomes the pod's fsGroup, files
//! gain group read (and write, for writable volumes), directories gain the
//! setgid bit so new files inherit the group.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const RW_MASK: u32 = 0o660;
const RO_MASK: u32 = 0o440;
const EXEC_MASK: u32 = 0o110;

/// The mode bits fsGroup adds to a file (content volumes compute their
/// final modes up front so an unchanged payload is recognised).
pub fn file_mask(read_only: bool) -> u32 {
    if read_only {
        RO_MASK
    } else {
        RW_MASK
    }
}

/// Applies fsGroup ownership to `dir` and everything below it. Symlinks
/// are skipped, never followed.
pub fn set_volume_ownership(dir: &Path, fs_group: Option<i64>, read_only: bool) -> io::Result<()> {
    let Some(gid) = fs_group else {
        return Ok(());
    };
    let gid = u32::try_from(gid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "fsGroup out of range"))?;
    walk(dir, gid, file_mask(read_only))
}

fn walk(path: &Path, gid: u32, mask: u32) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    std::os::unix::fs::lchown(path, None, Some(gid))?;
    let mode = meta.permissions().mode() & 0o7777;
    let wanted = if meta.is_dir() {
        mode | mask | EXEC_MASK | 0o2000
    } else {
        mode | mask
    };
    if wanted != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(wanted))?;
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            walk(&entry?.path(), gid, mask)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn group_and_modes_follow_upstream() {
        let d = std::env::temp_dir().join(format!("rkubelet-own-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/f"), "x").unwrap();
        std::fs::set_permissions(d.join("sub/f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(d.join("sub"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let root = nix::unistd::geteuid().is_root();
        let gid = if root {
            1234
        } else {
            nix::unistd::getegid().as_raw()
        };
        set_volume_ownership(&d, Some(i64::from(gid)), false).unwrap();
        let f = std::fs::metadata(d.join("sub/f")).unwrap();
        assert_eq!(f.mode() & 0o7777, 0o660);
        let sub = std::fs::metadata(d.join("sub")).unwrap();
        assert_eq!(sub.mode() & 0o7777, 0o2770);
        assert_eq!(f.gid(), gid);
        set_volume_ownership(&d, None, false).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
    }
}
