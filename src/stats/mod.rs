//! Node-level stats from the host (upstream `pkg/kubelet/stats`, the part
//! that cAdvisor's root container feeds there): memory from `/proc/meminfo`
//! and `/proc/vmstat`, filesystems from statvfs.
//!
//! Node status (capacity, allocatable), `/stats/summary` and the eviction
//! manager (through the summary) all read these numbers, so each
//! has one definition. In particular memory.available is upstream
//! eviction's signal everywhere: capacity − workingSet, where workingSet is
//! usage − inactive_file.
//!
//! [`Provider`] reads `/proc` below a directory of its own so tests can
//! point it at sample trees; the parsers and the arithmetic are pure
//! functions in [`node`], statvfs is in [`fs`].

pub mod fs;
pub mod node;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

pub use fs::{statvfs, FsInfo};
pub use node::{NodeMemory, SwapInfo};

/// Why a stat could not be read; every variant keeps the path it concerns.
#[derive(Debug)]
pub enum StatsError {
    /// A file under `/proc` could not be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A field the kernel always writes is missing (`MemTotal`).
    MissingField { path: PathBuf, field: &'static str },
    /// statvfs failed.
    Statvfs {
        path: PathBuf,
        errno: nix::errno::Errno,
    },
}

impl fmt::Display for StatsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatsError::Read { path, source } => write!(f, "reading {}: {source}", path.display()),
            StatsError::MissingField { path, field } => {
                write!(f, "no {field} in {}", path.display())
            }
            StatsError::Statvfs { path, errno } => write!(f, "statvfs {}: {errno}", path.display()),
        }
    }
}

impl std::error::Error for StatsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StatsError::Read { source, .. } => Some(source),
            StatsError::Statvfs { errno, .. } => Some(errno),
            StatsError::MissingField { .. } => None,
        }
    }
}

/// Reads the node's stats from a `/proc` tree (`/proc` unless a test says
/// otherwise). Holds nothing else, so it is cheap to clone.
#[derive(Clone, Debug)]
pub struct Provider {
    proc_dir: PathBuf,
}

impl Default for Provider {
    fn default() -> Self {
        Provider::new("/proc")
    }
}

impl Provider {
    pub fn new(proc_dir: impl Into<PathBuf>) -> Self {
        Provider {
            proc_dir: proc_dir.into(),
        }
    }

    fn read(&self, rel: &str) -> Result<String, StatsError> {
        let path = self.proc_dir.join(rel);
        std::fs::read_to_string(&path).map_err(|source| StatsError::Read { path, source })
    }

    /// `/proc/meminfo`, bytes by field.
    pub fn meminfo(&self) -> Result<BTreeMap<String, u64>, StatsError> {
        Ok(node::parse_meminfo(&self.read("meminfo")?))
    }

    /// MemTotal: the node's memory capacity in bytes.
    pub fn memory_capacity(&self) -> Result<u64, StatsError> {
        let meminfo = self.meminfo()?;
        meminfo
            .get("MemTotal")
            .copied()
            .ok_or_else(|| self.missing("meminfo", "MemTotal"))
    }

    /// The node's memory: usage, working set, memory.available and swap
    /// from `/proc/meminfo`, page faults from `/proc/vmstat` when it can be
    /// read (they are left out otherwise).
    pub fn memory(&self) -> Result<NodeMemory, StatsError> {
        let vmstat = match self.read("vmstat") {
            Ok(text) => node::parse_vmstat(&text),
            Err(e) => {
                log::debug!("node page faults unknown: {e}");
                BTreeMap::new()
            }
        };
        self.memory_with(&vmstat)
    }

    /// The node's memory from `/proc/meminfo` alone: [`Provider::memory`]
    /// without the page faults, for readers that need no `/proc/vmstat`.
    pub fn memory_without_page_faults(&self) -> Result<NodeMemory, StatsError> {
        self.memory_with(&BTreeMap::new())
    }

    fn memory_with(&self, vmstat: &BTreeMap<String, u64>) -> Result<NodeMemory, StatsError> {
        let meminfo = self.meminfo()?;
        node::node_memory(&meminfo, vmstat).ok_or_else(|| self.missing("meminfo", "MemTotal"))
    }

    /// The task limit (the smaller of kernel.pid_max and kernel.threads-max)
    /// and the number of tasks from /proc/loadavg, as upstream's pidlimit
    /// stats read them: the pid.available signal is limit − tasks.
    pub fn pids(&self) -> Option<(u64, u64)> {
        let limit = ["sys/kernel/pid_max", "sys/kernel/threads-max"]
            .iter()
            .filter_map(|f| self.read(f).ok()?.trim().parse::<u64>().ok())
            .min()?;
        let loadavg = self.read("loadavg").ok()?;
        Some((limit, node::parse_loadavg_tasks(&loadavg)?))
    }

    fn missing(&self, rel: &str, field: &'static str) -> StatsError {
        StatsError::MissingField {
            path: self.proc_dir.join(rel),
            field,
        }
    }
}
