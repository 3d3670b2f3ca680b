//! The container manager (upstream `pkg/kubelet/cm`): the kubepods cgroup
//! hierarchy, its QoS tiers and a cgroup per pod, node allocatable
//! enforcement, and the start-up checks (failSwapOn, cgroupDriver).
//!
//! No thread of its own: pod cgroups are made by the pod worker before
//! the sandbox, removed by the pod worker after the pod, and the tiers
//! and orphans are kept current by housekeeping on the sync loop.

mod cgroup_manager;
mod cgroup_name;
pub mod cpumanager;
pub mod cpuset;
pub mod devicemanager;
pub mod dra;
mod error;
pub mod helpers;
pub mod memorymanager;
mod node_container_manager;
mod pod_container_manager;
mod qos_container_manager;
mod systemd;
#[cfg(test)]
mod tests;
pub mod topologymanager;

// A cgroup's cpu and memory, for the summary's pod-level figures.
mod cgroup_stats;

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

pub use cgroup_manager::{CgroupConfig, CgroupManager, Hierarchies};
pub use cgroup_name::CgroupName;
pub use cgroup_stats::CgroupStats;
#[cfg(test)]
pub use cgroup_stats::MemoryUsage;
pub use error::CmError;
pub use node_container_manager::Capacity;
pub use pod_container_manager::{PodCgroupNamer, PodLimits};
pub use qos_container_manager::ActivePods;

use crate::kubeletconfig::KubeletConfiguration;
use crate::nodestatus::setters::Reservation;
use node_container_manager::{
    allocatable, cgroup_config, parse_reserved, ENFORCE_KUBE_RESERVED, ENFORCE_PODS,
    ENFORCE_SYSTEM_RESERVED,
};
use pod_container_manager::PodContainerManager;
use qos_container_manager::QosContainerManager;

/// Upstream's event reason when a pod cgroup cannot be made.
pub const FAILED_TO_CREATE_POD_CONTAINER: &str = "FailedCreatePodContainer";
/// The top of the pods' hierarchy below cgroupRoot.
const NODE_ALLOCATABLE_CGROUP: &str = "kubepods";

/// How cgroup names are spelled for the runtime (cgroupDriver).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Cgroupfs,
    Systemd,
}

impl Driver {
    pub fn parse(s: &str) -> Result<Driver, CmError> {
        match s {
            "cgroupfs" => Ok(Driver::Cgroupfs),
            "systemd" => Ok(Driver::Systemd),
            other => Err(CmError::UnknownDriver(other.to_string())),
        }
    }
}

impl Driver {
    fn name(self) -> &'static str {
        match self {
            Driver::Cgroupfs => "cgroupfs",
            Driver::Systemd => "systemd",
        }
    }

    /// The driver a CRI RuntimeConfig answer names, if it names one.
    pub fn from_runtime_config(resp: &crate::cri::api::RuntimeConfigResponse) -> Option<Driver> {
        let linux = resp.linux.as_ref()?;
        Some(match linux.cgroup_driver.enum_value_or_default() {
            crate::cri::api::CgroupDriver::SYSTEMD => Driver::Systemd,
            crate::cri::api::CgroupDriver::CGROUPFS => Driver::Cgroupfs,
        })
    }
}

/// The kubelet's cgroupDriver must be the runtime's: with two drivers the
/// pod cgroups would be made in one hierarchy and the containers put in
/// another (with runc's systemd driver, no pod would start at all).
/// Upstream, with KubeletCgroupDriverFromCRI, silently takes the runtime's;
/// here a disagreement stops the kubelet at start, naming both, so the
/// operator's configuration says what the node runs.
pub fn check_runtime_driver(configured: Driver, runtime: Driver) -> Result<(), CmError> {
    if configured == runtime {
        return Ok(());
    }
    Err(CmError::DriverMismatch {
        configured: configured.name(),
        runtime: runtime.name(),
    })
}

/// A cgroup operation that failed: what, where, and the errno.
#[derive(Debug)]
pub struct CgroupError {
    pub op: String,
    pub path: PathBuf,
    pub source: io::Error,
}

impl CgroupError {
    pub fn new(op: &str, path: &Path, source: io::Error) -> Self {
        CgroupError {
            op: op.to_string(),
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// EBUSY: processes or child cgroups still inside; worth retrying.
    pub fn is_busy(&self) -> bool {
        self.errno() == Some(libc::EBUSY)
    }
}

impl fmt::Display for CgroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.op, self.path.display(), self.source)?;
        if let Some(n) = self.errno() {
            write!(f, " [{:?}]", nix::errno::Errno::from_raw(n))?;
        }
        Ok(())
    }
}

impl std::error::Error for CgroupError {}

/// The settings the container manager is built from (upstream NodeConfig).
#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub driver: Driver,
    /// cgroupRoot in cgroupfs syntax; "" and "/" are the root.
    pub cgroup_root: String,
    pub limits: PodLimits,
    pub enforce_node_allocatable: Vec<String>,
    pub system_reserved: BTreeMap<String, String>,
    pub kube_reserved: BTreeMap<String, String>,
    pub system_reserved_cgroup: String,
    pub kube_reserved_cgroup: String,
}

impl NodeConfig {
    pub fn from_kubelet_config(c: &KubeletConfiguration) -> Result<NodeConfig, CmError> {
        Ok(NodeConfig {
            driver: Driver::parse(&c.cgroup_driver)?,
            cgroup_root: c.cgroup_root.clone(),
            limits: PodLimits {
                cfs_quota: c.cpu_cfs_quota,
                cfs_period_us: c.cpu_cfs_quota_period.0.as_micros() as u64,
                pod_pids_limit: c.pod_pids_limit,
            },
            enforce_node_allocatable: c.enforce_node_allocatable.clone(),
            system_reserved: c.system_reserved.clone(),
            kube_reserved: c.kube_reserved.clone(),
            system_reserved_cgroup: c.system_reserved_cgroup.clone(),
            kube_reserved_cgroup: c.kube_reserved_cgroup.clone(),
        })
    }

    fn enforces(&self, key: &str) -> bool {
        self.enforce_node_allocatable.iter().any(|k| k == key)
    }
}

/// The kubepods hierarchy and the pod cgroups in it.
pub struct ContainerManager {
    cfg: NodeConfig,
    cgroups: CgroupManager,
    kubepods: CgroupName,
    capacity: Capacity,
    qos: QosContainerManager,
    pods: PodContainerManager,
}

impl ContainerManager {
    /// Constructs; touches nothing (see [`start`](Self::start)).
    pub fn new(cfg: NodeConfig, hierarchies: Hierarchies, capacity: Capacity) -> Self {
        let cgroups = CgroupManager::new(cfg.driver, hierarchies);
        let kubepods = CgroupName::parse_cgroupfs(&cfg.cgroup_root).child(NODE_ALLOCATABLE_CGROUP);
        let qos = QosContainerManager::new(cgroups.clone(), &kubepods);
        let pods = PodContainerManager::new(cgroups.clone(), &qos.info, cfg.limits);
        ContainerManager {
            cfg,
            cgroups,
            kubepods,
            capacity,
            qos,
            pods,
        }
    }

    pub fn namer(&self) -> PodCgroupNamer {
        self.pods.namer.clone()
    }

    /// kubepods' settings: allocatable (capacity less the reservations)
    /// when enforceNodeAllocatable has `pods`, else the capacity.
    pub fn kubepods_config(&self) -> CgroupConfig {
        let reservation = if self.cfg.enforces(ENFORCE_PODS) {
            Reservation {
                system_reserved: self.cfg.system_reserved.clone(),
                kube_reserved: self.cfg.kube_reserved.clone(),
                eviction_hard: BTreeMap::new(),
            }
        } else {
            Reservation::default()
        };
        CgroupConfig {
            name: self.kubepods.clone(),
            resources: cgroup_config(&allocatable(&self.capacity, &reservation)),
        }
    }

    /// Sets up the hierarchy (upstream setupNode + qosContainerManager
    /// Start): checks cgroupRoot exists, creates or updates kubepods with
    /// node allocatable, caps the reserved cgroups if asked, creates the
    /// tiers. Existing pod cgroups are left as they are.
    pub fn start(&self) -> Result<(), CmError> {
        let root = CgroupName::parse_cgroupfs(&self.cfg.cgroup_root);
        // The root is given in cgroupfs syntax whatever the driver, so
        // look it up with cgroupfs naming.
        let as_cgroupfs = CgroupManager::new(Driver::Cgroupfs, self.cgroups.hierarchies.clone());
        if !as_cgroupfs.exists(&root) {
            return Err(CmError::NoCgroupRoot {
                root: self.cfg.cgroup_root.clone(),
                path: as_cgroupfs.paths(&root)[0].clone(),
            });
        }
        let kubepods = self.kubepods_config();
        let create = if self.cgroups.exists(&kubepods.name) {
            self.cgroups.update(&kubepods)
        } else {
            self.cgroups.create(&kubepods)
        };
        create.map_err(|error| CmError::NodeAllocatable {
            name: kubepods.name.to_string(),
            error,
        })?;
        log::info!(
            "node allocatable enforced on {}: {:?}",
            self.cgroups.name(&kubepods.name),
            kubepods.resources
        );
        self.enforce_reserved()?;
        self.qos.start().map_err(CmError::Qos)?;
        Ok(())
    }

    /// system-reserved and kube-reserved enforcement: the named cgroups
    /// must exist; they are capped at their reservation.
    fn enforce_reserved(&self) -> Result<(), CmError> {
        for (key, cgroup, field, reserved) in [
            (
                ENFORCE_SYSTEM_RESERVED,
                &self.cfg.system_reserved_cgroup,
                "systemReservedCgroup",
                &self.cfg.system_reserved,
            ),
            (
                ENFORCE_KUBE_RESERVED,
                &self.cfg.kube_reserved_cgroup,
                "kubeReservedCgroup",
                &self.cfg.kube_reserved,
            ),
        ] {
            if !self.cfg.enforces(key) {
                continue;
            }
            let name = self.cgroups.parse(cgroup);
            if !self.cgroups.exists(&name) {
                return Err(CmError::NoReservedCgroup {
                    field,
                    cgroup: cgroup.clone(),
                    key,
                });
            }
            let list =
                parse_reserved(reserved).map_err(|error| CmError::Reservation { key, error })?;
            let cfg = CgroupConfig {
                name,
                resources: cgroup_config(&list),
            };
            self.cgroups
                .update(&cfg)
                .map_err(|error| CmError::Enforce {
                    key,
                    cgroup: cgroup.clone(),
                    error,
                })?;
        }
        Ok(())
    }

    /// kubepods' memory (the summary's `pods` system container, which
    /// allocatableMemory.available is computed from); None without `pods`
    /// in enforceNodeAllocatable (kubepods then has no limit).
    pub fn kubepods_memory(&self) -> Option<cgroup_stats::MemoryUsage> {
        if !self.cfg.enforces(ENFORCE_PODS) {
            return None;
        }
        let rel = self.cgroups.name(&self.kubepods);
        cgroup_stats::read(&self.cgroups.hierarchies, &rel).memory
    }

    /// Makes the pod's cgroup if it does not exist yet, after bringing the
    /// tiers up to date (upstream syncPod: UpdateQOSCgroups, EnsureExists).
    /// `active_pods` are the pods the tiers are sized for, asked only when
    /// the cgroup is missing.
    pub fn ensure_pod_cgroup(
        &self,
        pod: &Pod,
        active_pods: ActivePods<'_>,
    ) -> Result<(), CgroupError> {
        if self.pods.exists(pod) {
            return Ok(());
        }
        let mut active = active_pods();
        if !active.iter().any(|p| p.metadata.uid == pod.metadata.uid) {
            active.push(Arc::new(pod.clone()));
        }
        if let Err(e) = self.qos.update_cgroups(&active, true) {
            log::warn!("update QoS cgroups: {e}");
        }
        self.pods.ensure_exists(pod)
    }

    /// Resizes a running pod's cgroup: with `grow_from` (the pod as it
    /// ran) only what grows, else exactly what `pod` now asks.
    pub fn resize_pod_cgroup(&self, pod: &Pod, grow_from: Option<&Pod>) -> Result<(), CgroupError> {
        if !self.pods.exists(pod) {
            return Ok(());
        }
        self.pods.resize(pod, grow_from)
    }

    /// Removes a gone pod's cgroup. EBUSY (something still inside) is
    /// left for housekeeping to retry.
    pub fn destroy_pod_cgroup(&self, uid: &str) {
        match self.pods.destroy_uid(uid) {
            Ok(()) => log::debug!("pod {uid}: cgroup removed"),
            Err(e) if e.is_busy() => log::info!("pod {uid}: cgroup busy, retried later: {e}"),
            Err(e) => log::warn!("pod {uid}: remove cgroup: {e}"),
        }
    }

    /// Housekeeping: orphaned pod cgroups go, the tiers follow the
    /// `active` pods.
    pub fn housekeeping(
        &self,
        possibly_running: &HashSet<String>,
        volumes_exist: &dyn Fn(&str) -> bool,
        active: &[Arc<Pod>],
    ) {
        self.pods.cleanup_orphaned(possibly_running, volumes_exist);
        if let Err(e) = self.qos.update_cgroups(active, false) {
            log::warn!("update QoS cgroups: {e}");
        }
    }
}

/// failSwapOn: swap in use with failSwapOn set stops the kubelet, as
/// upstream (`/proc/swaps` with more than its header line).
pub fn check_swap(fail_swap_on: bool, proc_swaps: &Path) -> Result<(), CmError> {
    if !fail_swap_on {
        return Ok(());
    }
    let text = match std::fs::read_to_string(proc_swaps) {
        Ok(t) => t,
        // No /proc/swaps: a kernel without swap support.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => {
            return Err(CmError::Read {
                path: proc_swaps.to_owned(),
                error,
            })
        }
    };
    let lines: Vec<String> = text.trim().lines().map(str::to_owned).collect();
    if lines.len() > 1 {
        return Err(CmError::SwapOn {
            path: proc_swaps.to_owned(),
            lines,
        });
    }
    Ok(())
}

/// Fields of the container manager's part of the configuration that are
/// parsed but not acted on, when set away from their defaults.
pub fn unhonoured_fields(c: &KubeletConfiguration) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut check = |set: bool, field: &'static str| {
        if set {
            out.push(field);
        }
    };
    check(!c.kubelet_cgroups.is_empty(), "kubeletCgroups");
    check(!c.system_cgroups.is_empty(), "systemCgroups");
    check(!c.qos_reserved.is_empty(), "qosReserved");
    check(
        c.enforce_node_allocatable
            .iter()
            .any(|k| k.ends_with("-compressible")),
        "enforceNodeAllocatable (*-reserved-compressible)",
    );
    out
}

/// Start-up (upstream NewContainerManager + Start): failSwapOn, the
/// driver, then with cgroupsPerQOS the kubepods hierarchy. None when
/// cgroupsPerQOS is off: pods then run where the runtime puts them.
pub fn start_from_config(
    c: &KubeletConfiguration,
    capacity: Capacity,
) -> Result<Option<Arc<ContainerManager>>, CmError> {
    check_swap(c.fail_swap_on, Path::new("/proc/swaps"))?;
    let cfg = NodeConfig::from_kubelet_config(c)?;
    for field in unhonoured_fields(c) {
        log::warn!("{field} is set but not honoured by rkubelet; ignoring it");
    }
    if !c.cgroups_per_qos {
        log::info!(
            "cgroupsPerQOS is false: no kubepods hierarchy, pods run where the runtime puts them"
        );
        return Ok(None);
    }
    let hierarchies = Hierarchies::detect()?;
    log::info!(
        "cgroup {:?} with the {:?} driver, cgroupRoot {:?}",
        hierarchies.version,
        cfg.driver,
        if c.cgroup_root.is_empty() {
            "/"
        } else {
            &c.cgroup_root
        }
    );
    let cm = ContainerManager::new(cfg, hierarchies, capacity);
    cm.start()?;
    Ok(Some(Arc::new(cm)))
}
