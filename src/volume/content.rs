//! What the content volumes (configMap, secret, downwardAPI, projected)
//! share: writing a payload with fsGroup applied, on disk or on tmpfs.

use std::path::{Path, PathBuf};

use super::util::atomic_writer::{self, Payload};
use super::util::{mount, ownership, payload};
use super::{io_failed, PluginKind, SetUpContext, VolumeError};

/// Where the files go: secrets and tokens live on tmpfs, so they never
/// touch the node's disk (upstream wraps those in a memory emptyDir).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    Disk,
    Memory,
}

/// Prepares the volume directory and writes `files` into it atomically.
pub fn write_volume(
    ctx: &SetUpContext<'_>,
    kind: PluginKind,
    name: &str,
    medium: Medium,
    mut files: Payload,
) -> Result<PathBuf, VolumeError> {
    let dir = ctx.volume_dir(kind, name);
    match medium {
        Medium::Disk => std::fs::create_dir_all(&dir).map_err(|e| io_failed(dir.display(), e))?,
        Medium::Memory => mount::ensure_tmpfs(&dir, None)
            .map_err(|e| io_failed(format!("mount tmpfs on {}", dir.display()), e))?,
    }
    let fs_group = ctx.fs_group();
    payload::apply_fs_group_mask(&mut files, fs_group, true);
    let perms = |version: &Path| ownership::set_volume_ownership(version, fs_group, true);
    atomic_writer::write(&dir, &files, &perms)
        .map_err(|e| io_failed(format!("write volume {name:?}"), e))?;
    ownership::set_volume_ownership(&dir, fs_group, true)
        .map_err(|e| io_failed(format!("fsGroup on {}", dir.display()), e))?;
    Ok(dir)
}
