//! Node allocatable (upstream `cm/node_container_manager_linux.go`):
//! the kubepods cgroup is capped at capacity − systemReserved −
//! kubeReserved (getNodeAllocatableAbsolute), and the cgroups named by
//! systemReservedCgroup and kubeReservedCgroup at their reservations when
//! enforceNodeAllocatable asks. The hard eviction threshold is not taken
//! from kubepods: it is reserved in the node's reported allocatable
//! (GetNodeAllocatableReservation), so eviction acts before the kernel's
//! OOM killer does. Both use [`Reservation::amounts`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::error::ReservationError;
use super::helpers::{milli_cpu_to_shares, ResourceConfig};
use crate::nodestatus::machine::quantity;
use crate::nodestatus::setters::Reservation;
use crate::util::quantity::parse_quantity;

/// enforceNodeAllocatable keys.
pub const ENFORCE_PODS: &str = "pods";
pub const ENFORCE_SYSTEM_RESERVED: &str = "system-reserved";
pub const ENFORCE_KUBE_RESERVED: &str = "kube-reserved";
/// The resource name upstream gives the node's process IDs.
pub const PID: &str = "pid";

/// What the container manager knows of the machine (upstream
/// internalCapacity): cpu, memory and pid, in whole units except cpu.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capacity {
    pub cpu_milli: i128,
    pub memory: i128,
    /// min(pid_max, threads-max); None when unreadable.
    pub pids: Option<i128>,
}

impl Capacity {
    /// The node's capacity with the pid limit read from /proc.
    pub fn read(num_cores: u64, memory: u64) -> Capacity {
        Capacity {
            cpu_milli: i128::from(num_cores) * 1000,
            memory: i128::from(memory),
            pids: max_pids(),
        }
    }

    /// As a resource list for [`Reservation::amounts`].
    fn as_list(&self) -> BTreeMap<String, Quantity> {
        let mut m = BTreeMap::new();
        m.insert("cpu".into(), Quantity(quantity::decimal_si(self.cpu_milli)));
        m.insert(
            "memory".into(),
            Quantity(quantity::binary_si(self.memory * 1000)),
        );
        m
    }
}

/// min(/proc/sys/kernel/pid_max, /proc/sys/kernel/threads-max), as
/// upstream's pidlimit.Stats reports MaxPID.
fn max_pids() -> Option<i128> {
    let read = |p: &str| -> Option<i128> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
    match (
        read("/proc/sys/kernel/pid_max"),
        read("/proc/sys/kernel/threads-max"),
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Allocatable in milli-units per resource: capacity − reservation,
/// never negative (upstream getNodeAllocatableAbsoluteImpl when
/// `eviction_hard` is empty, the node status' allocatable otherwise).
pub fn allocatable(capacity: &Capacity, reservation: &Reservation) -> BTreeMap<String, i128> {
    let list = capacity.as_list();
    let reserved = reservation.amounts(&list);
    let mut out = BTreeMap::new();
    for (name, q) in &list {
        let cap = parse_quantity(&q.0).unwrap_or(0);
        let r = reserved.get(name).copied().unwrap_or(0);
        out.insert(name.clone(), (cap - r).max(0));
    }
    if let Some(pids) = capacity.pids {
        // `pid` is outside the resources amounts() manages (cpu, memory,
        // storage, huge pages); upstream subtracts its reservations alike.
        let r: i128 = [&reservation.system_reserved, &reservation.kube_reserved]
            .iter()
            .filter_map(|m| m.get(PID))
            .filter_map(|v| parse_quantity(v).ok())
            .sum();
        out.insert(PID.into(), (pids * 1000 - r).max(0));
    }
    out
}

/// A resource list (milli-units) as cgroup settings (upstream
/// getCgroupConfigInternal, all resources): memory, cpu shares, pids.
pub fn cgroup_config(list: &BTreeMap<String, i128>) -> ResourceConfig {
    let whole = |v: i128| v.div_euclid(1000) as i64;
    ResourceConfig {
        memory: list.get("memory").map(|m| whole(*m)),
        cpu_shares: list.get("cpu").map(|c| milli_cpu_to_shares(*c as i64)),
        pids_limit: list.get(PID).map(|p| whole(*p)),
        ..Default::default()
    }
}

/// A reservation map (`{cpu: 200m, memory: 1Gi}`) in milli-units.
pub fn parse_reserved(
    map: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, i128>, ReservationError> {
    map.iter()
        .filter(|(k, _)| matches!(k.as_str(), "cpu" | "memory" | PID))
        .map(|(k, v)| {
            parse_quantity(v)
                .map(|q| (k.clone(), q))
                .map_err(|error| ReservationError {
                    resource: k.clone(),
                    error,
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reservation(
        sys: &[(&str, &str)],
        kube: &[(&str, &str)],
        hard: &[(&str, &str)],
    ) -> Reservation {
        let m = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        Reservation {
            system_reserved: m(sys),
            kube_reserved: m(kube),
            eviction_hard: m(hard),
        }
    }

    const CAP: Capacity = Capacity {
        cpu_milli: 4000,
        memory: 8 << 30,
        pids: Some(100_000),
    };

    #[test]
    fn kubepods_excludes_reservations_but_not_eviction() {
        let r = reservation(
            &[("cpu", "500m"), ("memory", "1Gi"), ("pid", "1000")],
            &[("memory", "512Mi")],
            &[],
        );
        let a = allocatable(&CAP, &r);
        assert_eq!(a["cpu"], 3500);
        assert_eq!(a["memory"], ((8 << 30) - (1536 << 20)) * 1000);
        assert_eq!(a[PID], 99_000 * 1000);
        let rc = cgroup_config(&a);
        assert_eq!(rc.memory, Some((8 << 30) - (1536 << 20)));
        assert_eq!(rc.cpu_shares, Some(3584));
        assert_eq!(rc.pids_limit, Some(99_000));
        assert_eq!((rc.cpu_quota, rc.cpu_period), (None, None));
    }

    #[test]
    fn status_allocatable_also_takes_eviction() {
        let r = reservation(&[("memory", "1Gi")], &[], &[("memory.available", "100Mi")]);
        let a = allocatable(&CAP, &r);
        assert_eq!(a["memory"], ((8 << 30) - (1124 << 20)) * 1000);
    }

    #[test]
    fn never_negative() {
        let r = reservation(&[("memory", "20Gi"), ("cpu", "8")], &[], &[]);
        let a = allocatable(&CAP, &r);
        assert_eq!((a["memory"], a["cpu"]), (0, 0));
        assert_eq!(milli_cpu_to_shares(0), 2);
    }

    #[test]
    fn reserved_maps_parse() {
        let m: BTreeMap<String, String> = [("cpu", "200m"), ("memory", "1Gi"), ("gpu", "1")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let p = parse_reserved(&m).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(cgroup_config(&p).cpu_shares, Some(204));
        let bad: BTreeMap<String, String> = [("memory".to_string(), "lots".to_string())].into();
        assert!(parse_reserved(&bad)
            .unwrap_err()
            .to_string()
            .contains("memory"));
    }
}
