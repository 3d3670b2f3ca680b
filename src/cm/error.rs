//! The container manager's errors: start-up checks and the kubepods
//! hierarchy, each naming the setting or cgroup to fix.

use std::path::PathBuf;

use super::CgroupError;
use crate::util::quantity::QuantityError;

#[derive(Debug, thiserror::Error)]
pub enum CmError {
    #[error("unknown cgroupDriver {0:?}: supported values are \"cgroupfs\" and \"systemd\"")]
    UnknownDriver(String),
    #[error(
        "cgroupDriver {configured:?} in the kubelet configuration disagrees with the container \
         runtime's cgroup driver {runtime:?} (CRI RuntimeConfig): set both to the same driver \
         (containerd: SystemdCgroup in the runc options)"
    )]
    DriverMismatch {
        configured: &'static str,
        runtime: &'static str,
    },
    #[error("statfs {}: {error}", .path.display())]
    Statfs { path: PathBuf, error: nix::Error },
    #[error("read {}: {error}", .path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("no cgroup v1 hierarchy is mounted and /sys/fs/cgroup is not cgroup2")]
    NoHierarchy,
    #[error(
        "running with swap on is not supported, please disable swap or set failSwapOn \
         (--fail-swap-on) to false; {} contained: {lines:?}",
        .path.display()
    )]
    SwapOn { path: PathBuf, lines: Vec<String> },
    #[error(
        "invalid configuration: cgroupRoot {root:?} does not exist in every cgroup hierarchy ({})",
        .path.display()
    )]
    NoCgroupRoot { root: String, path: PathBuf },
    #[error("node allocatable cgroup {name}: {error}")]
    NodeAllocatable { name: String, error: CgroupError },
    #[error("QoS cgroups: {0}")]
    Qos(CgroupError),
    #[error("{field} {cgroup:?} does not exist (required by enforceNodeAllocatable {key:?})")]
    NoReservedCgroup {
        field: &'static str,
        cgroup: String,
        key: &'static str,
    },
    #[error("{key}: {error}")]
    Reservation {
        key: &'static str,
        error: ReservationError,
    },
    #[error("enforce {key} on {cgroup}: {error}")]
    Enforce {
        key: &'static str,
        cgroup: String,
        error: CgroupError,
    },
}

/// A reservation (systemReserved, kubeReserved) whose quantity does not parse.
#[derive(Debug, thiserror::Error)]
#[error("{resource}: {error}")]
pub struct ReservationError {
    pub resource: String,
    pub error: QuantityError,
}
