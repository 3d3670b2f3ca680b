//! A filesystem's size and free space (statvfs), as cAdvisor's GetDirFsInfo
//! gives them to upstream's stats provider: the node's filesystem (the
//! kubelet's root directory), the image filesystem and containers' writable
//! layers.

use std::path::Path;

use nix::sys::statvfs::Statvfs;

use super::StatsError;

/// The size of the filesystem holding a path, in bytes and inodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FsInfo {
    /// Bytes in the filesystem.
    pub capacity: u64,
    /// Bytes available to unprivileged users.
    pub available: u64,
    /// Bytes in use (all blocks less the free ones, reserved ones included).
    pub used: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

/// statvfs of the filesystem holding `path`.
pub fn statvfs(path: &Path) -> Result<FsInfo, StatsError> {
    nix::sys::statvfs::statvfs(path)
        .map(|s| fs_info(&s))
        .map_err(|errno| StatsError::Statvfs {
            path: path.to_path_buf(),
            errno,
        })
}

// The field types are u64 on 64-bit Linux but u32 on some 32-bit targets:
// the casts widen, and are no-ops where clippy sees them.
#[allow(clippy::unnecessary_cast)]
fn fs_info(s: &Statvfs) -> FsInfo {
    let frsize = s.fragment_size() as u64;
    let blocks = s.blocks() as u64;
    FsInfo {
        capacity: blocks.saturating_mul(frsize),
        available: (s.blocks_available() as u64).saturating_mul(frsize),
        used: blocks
            .saturating_sub(s.blocks_free() as u64)
            .saturating_mul(frsize),
        inodes: s.files() as u64,
        inodes_free: s.files_free() as u64,
    }
}

/// Bytes allocated under `dir` (as `du`), walking at most `max_entries`
/// entries and never leaving `dir`'s filesystem nor following symlinks.
/// None when `dir` cannot be read. A walk cut short by the bound returns
/// what it counted: a lower bound, so a limit is enforced late, never
/// early.
pub fn dir_usage_bounded(dir: &Path, max_entries: usize) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::symlink_metadata(dir).ok()?.dev();
    let mut bytes = 0u64;
    let mut seen = 0usize;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            seen += 1;
            if seen > max_entries {
                log::debug!(
                    "{}: usage walk stopped after {max_entries} entries",
                    dir.display()
                );
                return Some(bytes);
            }
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            if m.dev() != dev {
                continue;
            }
            bytes = bytes.saturating_add(m.blocks().saturating_mul(512));
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Some(bytes)
}
