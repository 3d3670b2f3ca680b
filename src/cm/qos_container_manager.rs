//! The QoS tier cgroups (upstream `cm/qos_container_manager_linux.go`):
//! Guaranteed pods sit in kubepods itself; Burstable and BestEffort pods
//! in `burstable` and `besteffort` below it. BestEffort always gets the
//! minimum cpu.shares; Burstable gets the shares of its pods' summed cpu
//! requests, kept current as pods come and go.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;

use super::cgroup_manager::{CgroupConfig, CgroupManager};
use super::cgroup_name::CgroupName;
use super::helpers::{milli_cpu_to_shares, pod_requests, ResourceConfig, MIN_SHARES};
use super::CgroupError;
use crate::kuberuntime::qos::{qos_class, QosClass};

/// Rewrite the tiers at least this often, even unchanged, in case
/// something else touched them (upstream periodicQOSCgroupUpdateInterval).
const PERIODIC_UPDATE: Duration = Duration::from_secs(60);

/// The tier cgroup names (upstream QOSContainersInfo).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QosContainersInfo {
    /// kubepods itself.
    pub guaranteed: CgroupName,
    pub burstable: CgroupName,
    pub best_effort: CgroupName,
}

impl QosContainersInfo {
    pub fn new(kubepods: &CgroupName) -> Self {
        QosContainersInfo {
            guaranteed: kubepods.clone(),
            burstable: kubepods.child("burstable"),
            best_effort: kubepods.child("besteffort"),
        }
    }

    /// The tier a pod of class `qos` belongs in.
    pub fn for_class(&self, qos: QosClass) -> &CgroupName {
        match qos {
            QosClass::Guaranteed => &self.guaranteed,
            QosClass::Burstable => &self.burstable,
            QosClass::BestEffort => &self.best_effort,
        }
    }
}

/// The pods the tiers are sized for (upstream ActivePodsFunc).
pub type ActivePods<'a> = &'a dyn Fn() -> Vec<Arc<Pod>>;

pub struct QosContainerManager {
    cgroups: CgroupManager,
    pub info: QosContainersInfo,
    /// The burstable shares last written, and when.
    last: Mutex<Option<(u64, Instant)>>,
}

/// The burstable tier's cpu.shares: the shares of the Burstable pods'
/// summed cpu requests.
pub fn burstable_shares(pods: &[Arc<Pod>]) -> u64 {
    let milli: i128 = pods
        .iter()
        .filter(|p| qos_class(p) == QosClass::Burstable)
        .filter_map(|p| pod_requests(p).get("cpu").copied())
        .sum();
    milli_cpu_to_shares(milli.min(i128::from(i64::MAX)) as i64)
}

impl QosContainerManager {
    pub fn new(cgroups: CgroupManager, kubepods: &CgroupName) -> Self {
        QosContainerManager {
            cgroups,
            info: QosContainersInfo::new(kubepods),
            last: Mutex::new(None),
        }
    }

    /// Creates the burstable and besteffort tiers, or on a restart brings
    /// the existing ones back to their settings (upstream Start).
    pub fn start(&self) -> Result<(), CgroupError> {
        for (name, shares) in [
            (&self.info.burstable, None),
            (&self.info.best_effort, Some(MIN_SHARES)),
        ] {
            let cfg = CgroupConfig {
                name: name.clone(),
                resources: ResourceConfig {
                    cpu_shares: shares,
                    ..Default::default()
                },
            };
            if self.cgroups.exists(name) {
                self.cgroups.update(&cfg)?;
            } else {
                self.cgroups.create(&cfg)?;
            }
        }
        Ok(())
    }

    /// Sets the tiers' cpu.shares for `pods` (upstream UpdateCgroups);
    /// writes only when the burstable value changed or a minute passed,
    /// unless `force`.
    pub fn update_cgroups(&self, pods: &[Arc<Pod>], force: bool) -> Result<(), CgroupError> {
        let shares = burstable_shares(pods);
        let mut last = lock(&self.last);
        let fresh = last.is_some_and(|(s, at)| s == shares && at.elapsed() < PERIODIC_UPDATE);
        if fresh && !force {
            return Ok(());
        }
        for (name, shares) in [
            (&self.info.burstable, shares),
            (&self.info.best_effort, MIN_SHARES),
        ] {
            self.cgroups.update(&CgroupConfig {
                name: name.clone(),
                resources: ResourceConfig {
                    cpu_shares: Some(shares),
                    ..Default::default()
                },
            })?;
        }
        *last = Some((shares, Instant::now()));
        Ok(())
    }
}
