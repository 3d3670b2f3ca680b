//! What upstream's `pkg/kubelet/checkpointmanager` gives the device, CPU
//! and memory managers: a checkpoint written whole or not at all, and the
//! checksum's hash. Each manager writes go-spew's dump of its own Go type
//! (their `spew`/`dump` code), which this hashes.

use std::path::{Path, PathBuf};

/// Why a manager's checkpoint could not be restored or written; `manager`
/// names it in upstream's advice ("CPU manager", "memory manager").
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error(
        "could not restore state from checkpoint: {reason}, please drain this node and \
         delete the {manager} checkpoint file {path:?} before restarting Kubelet"
    )]
    Restore {
        manager: &'static str,
        reason: String,
        path: PathBuf,
    },
    #[error("writing the {manager} checkpoint {path:?}: {source}")]
    Write {
        manager: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Writes `bytes` to a temporary file beside `path`, syncs it and renames
/// it over `path`, so a crash leaves the old checkpoint or the new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// FNV-1a, 32 bits (Go's hash/fnv New32a), over a go-spew dump: upstream
/// checksum.New.
pub fn fnv32a(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}
