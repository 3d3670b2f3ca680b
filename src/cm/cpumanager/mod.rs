//! The CPU manager (upstream `pkg/kubelet/cm/cpumanager`). [`topology`]
//! reads which CPUs the machine has and how they share cores, sockets and
//! NUMA nodes; [`policy_static`] gives Guaranteed containers CPUs of their
//! own at admission ([`cpu_assignment`] picks them); [`state`] keeps the
//! assignments in upstream's `cpu_manager_state` file; the manager
//! ([`CpuManager`]) puts every container on its CPUs, at creation and then
//! on its `cpu-manager` thread whenever the shared pool changes.

pub mod cpu_assignment;
mod manager;
pub mod policy_static;
pub mod state;
pub mod topology;

use std::path::Path;

use crate::cm::cpuset::CpuSet;
use crate::kubeletconfig::KubeletConfiguration;
use topology::{CpuTopology, TopologyError};

pub use manager::{CpuManager, RunningContainer, UpdateCpuset};

/// Why `reservedSystemCPUs` stops the start.
#[derive(Debug, thiserror::Error)]
pub enum ReservedCpusError {
    #[error("reservedSystemCPUs (--reserved-cpus): reading the machine's CPUs: {0}")]
    Topology(#[from] TopologyError),
    #[error(
        "Invalid cpuset {list:?} specified by --reserved-cpus (reservedSystemCPUs): \
         CPUs {missing} are not on this machine, whose online CPUs are {online}"
    )]
    NotOnMachine {
        list: String,
        missing: CpuSet,
        online: CpuSet,
    },
    #[error("reservedSystemCPUs (--reserved-cpus): {0}")]
    Parse(#[from] crate::cm::cpuset::CpuSetError),
}

/// Upstream's handling of `reservedSystemCPUs` at start: every CPU it
/// names must be one of the machine's (as `sysfs` shows them), and the
/// set then stands for the CPUs reserved for the system: `systemReserved`
/// cpu becomes its size and `kubeReserved` cpu is dropped, so node
/// allocatable shrinks by exactly those CPUs. Validation has already
/// refused an unparsable list or one beside the reserved cgroups.
pub fn reserve_system_cpus(
    config: &mut KubeletConfiguration,
    sysfs: &Path,
) -> Result<Option<CpuSet>, ReservedCpusError> {
    let reserved = CpuSet::parse(&config.reserved_system_cpus)?;
    if reserved.is_empty() {
        return Ok(None);
    }
    let topology = CpuTopology::discover(sysfs)?;
    log::info!(
        "CPU topology: {} CPUs, {} cores ({} threads each), {} sockets, {} NUMA nodes",
        topology.num_cpus(),
        topology.num_cores(),
        topology.cpus_per_core(),
        topology.num_sockets(),
        topology.num_numa_nodes()
    );
    let online = topology.cpus();
    if !reserved.is_subset_of(&online) {
        return Err(ReservedCpusError::NotOnMachine {
            list: config.reserved_system_cpus.clone(),
            missing: reserved.difference(&online),
            online,
        });
    }
    log::info!(
        "reservedSystemCPUs {reserved} overrides the cpu of kubeReserved ({:?}) and systemReserved ({:?})",
        config.kube_reserved.get("cpu"),
        config.system_reserved.get("cpu"),
    );
    config.kube_reserved.remove("cpu");
    config
        .system_reserved
        .insert("cpu".into(), reserved.len().to_string());
    Ok(Some(reserved))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(reserved: &str) -> KubeletConfiguration {
        let mut c = KubeletConfiguration {
            reserved_system_cpus: reserved.into(),
            ..Default::default()
        };
        c.kube_reserved.insert("cpu".into(), "500m".into());
        c.kube_reserved.insert("memory".into(), "1Gi".into());
        c.system_reserved.insert("cpu".into(), "250m".into());
        c
    }

    fn machine(cpus: u32) -> tempfile::TempDir {
        let dir = tempfile::TempDir::with_prefix("rkubelet-sysfs-").unwrap();
        topology::fake::machine(dir.path(), 1, cpus, 1, 0);
        dir
    }

    #[test]
    fn reserved_cpus_replace_the_reserved_cpu_quantities() {
        let sysfs = machine(4);
        let mut c = config("0,2");
        let set = reserve_system_cpus(&mut c, sysfs.path()).unwrap();
        assert_eq!(set.map(|s| s.to_string()).as_deref(), Some("0,2"));
        assert_eq!(c.system_reserved.get("cpu").map(String::as_str), Some("2"));
        assert_eq!(c.kube_reserved.get("cpu"), None);
        assert_eq!(
            c.kube_reserved.get("memory").map(String::as_str),
            Some("1Gi")
        );

        let mut untouched = config("");
        assert!(reserve_system_cpus(&mut untouched, sysfs.path())
            .unwrap()
            .is_none());
        assert_eq!(untouched, config(""));
    }

    #[test]
    fn a_cpu_the_machine_lacks_stops_the_start_naming_it() {
        let sysfs = machine(2);
        let mut c = config("1-3");
        let e = reserve_system_cpus(&mut c, sysfs.path())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "Invalid cpuset \"1-3\" specified by --reserved-cpus (reservedSystemCPUs): \
             CPUs 2-3 are not on this machine, whose online CPUs are 0-1"
        );
        assert_eq!(c, config("1-3"), "nothing changed");
    }
}
