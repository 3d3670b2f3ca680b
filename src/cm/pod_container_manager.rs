//! Pod cgroups (upstream `cm/pod_container_manager_linux.go`): one
//! `pod<uid>` per pod under its QoS tier, created before the sandbox with
//! ResourceConfigForPod and podPidsLimit, handed to the runtime as the
//! sandbox's cgroup parent, and removed once the pod is gone.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rkubelet_util::lock;

use k8s_openapi::api::core::v1::Pod;

use super::cgroup_manager::{CgroupConfig, CgroupManager};
use super::cgroup_name::CgroupName;
use super::helpers::{resource_config_for_pod, ResourceConfig};
use super::qos_container_manager::QosContainersInfo;
use super::{CgroupError, Driver};
use crate::kuberuntime::qos::qos_class;
use crate::podutil::PodExt;

const POD_CGROUP_PREFIX: &str = "pod";

/// Names pod cgroups. Pure data, so the runtime manager can ask it for a
/// sandbox's cgroup parent without touching the filesystem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodCgroupNamer {
    pub driver: Driver,
    pub qos: QosContainersInfo,
}

impl PodCgroupNamer {
    /// Pod cgroups below `<cgroup_root>/kubepods`.
    pub fn new(driver: Driver, kubepods: &CgroupName) -> Self {
        PodCgroupNamer {
            driver,
            qos: QosContainersInfo::new(kubepods),
        }
    }

    /// `<tier>/pod<uid>` (upstream GetPodContainerName).
    pub fn name(&self, pod: &Pod) -> CgroupName {
        self.qos
            .for_class(qos_class(pod))
            .child(&format!("{POD_CGROUP_PREFIX}{}", pod.uid()))
    }

    /// The pod cgroup in the driver's syntax: `/kubepods/burstable/pod<uid>`
    /// for cgroupfs, `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`
    /// for systemd (upstream passes the expanded path; containerd keeps
    /// its last segment as the systemd parent slice).
    pub fn cgroup_parent(&self, pod: &Pod) -> String {
        let n = self.name(pod);
        match self.driver {
            Driver::Cgroupfs => n.to_cgroupfs(),
            Driver::Systemd => n.to_systemd(),
        }
    }
}

/// What a pod cgroup is set to besides ResourceConfigForPod.
#[derive(Clone, Copy, Debug)]
pub struct PodLimits {
    /// cpuCFSQuota.
    pub cfs_quota: bool,
    /// cpuCFSQuotaPeriod in microseconds.
    pub cfs_period_us: u64,
    /// podPidsLimit; -1 (or 0) leaves pids unlimited.
    pub pod_pids_limit: i64,
}

pub struct PodContainerManager {
    cgroups: CgroupManager,
    pub namer: PodCgroupNamer,
    limits: PodLimits,
    /// Pod cgroups made so far, counted once each is in place.
    made: AtomicU64,
    /// The known pods of the last orphan scan that found every pod cgroup
    /// among them, with `made` as it stood when that scan began. A pod
    /// cgroup is made only here, for a pod the kubelet knows, so with the
    /// same pods known and none made since there is nothing new to find:
    /// the scan reads a dozen v1 hierarchies every 2 s otherwise.
    clean_for: Mutex<Option<(HashSet<String>, u64)>>,
}

impl PodContainerManager {
    pub fn new(cgroups: CgroupManager, qos: &QosContainersInfo, limits: PodLimits) -> Self {
        let namer = PodCgroupNamer::new(cgroups.driver, &qos.guaranteed);
        PodContainerManager {
            cgroups,
            namer,
            limits,
            made: AtomicU64::new(0),
            clean_for: Mutex::new(None),
        }
    }

    pub fn exists(&self, pod: &Pod) -> bool {
        self.cgroups.exists(&self.namer.name(pod))
    }

    /// The settings a new pod cgroup gets.
    pub fn config(&self, pod: &Pod) -> CgroupConfig {
        let mut resources =
            resource_config_for_pod(pod, self.limits.cfs_quota, self.limits.cfs_period_us);
        if self.limits.pod_pids_limit > 0 {
            resources.pids_limit = Some(self.limits.pod_pids_limit);
        }
        CgroupConfig {
            name: self.namer.name(pod),
            resources,
        }
    }

    /// Sets an existing pod cgroup to what `pod` now asks (an in-place
    /// resize). With `grow_from`, the pod as it ran before, only what
    /// grows is set: the pod cgroup widens before its containers do, and
    /// narrows after them (upstream doPodResizeAction's order).
    pub fn resize(&self, pod: &Pod, grow_from: Option<&Pod>) -> Result<(), CgroupError> {
        let mut cfg = self.config(pod);
        if let Some(old) = grow_from {
            cfg.resources = widest(&self.config(old).resources, &cfg.resources);
        }
        // The pids limit is not the resize's to change.
        cfg.resources.pids_limit = None;
        self.cgroups.update(&cfg)
    }

    /// Creates the pod cgroup unless it exists (upstream EnsureExists): an
    /// existing one, from before a restart, is adopted as it is.
    pub fn ensure_exists(&self, pod: &Pod) -> Result<(), CgroupError> {
        if self.exists(pod) {
            return Ok(());
        }
        let cfg = self.config(pod);
        let made = self.cgroups.create(&cfg).inspect_err(|_| {
            // Half made (directories without limits) would pass for an
            // existing cgroup next time and be adopted unlimited.
            if let Err(e) = self.cgroups.destroy(&cfg.name) {
                log::warn!("remove half-made pod cgroup: {e}");
            }
        });
        // After the directories exist: a scan that began before this
        // count sees them, and one that did not is not trusted.
        self.made.fetch_add(1, Ordering::SeqCst);
        made
    }

    /// Every pod cgroup under the tiers, by pod UID (upstream
    /// GetAllPodsFromCgroups).
    pub fn pods_from_cgroups(&self) -> HashMap<String, CgroupName> {
        let q = &self.namer.qos;
        let mut out = HashMap::new();
        for tier in [&q.guaranteed, &q.burstable, &q.best_effort] {
            for child in self.cgroups.children(tier) {
                if let Some(uid) = child.base().strip_prefix(POD_CGROUP_PREFIX) {
                    if !uid.is_empty() {
                        out.insert(uid.to_string(), child.clone());
                    }
                }
            }
        }
        out
    }

    /// Removes a pod's cgroup, wherever its tier (the pod may be known
    /// only by UID, and its class may have been computed from an older
    /// spec).
    pub fn destroy_uid(&self, uid: &str) -> Result<(), CgroupError> {
        let q = &self.namer.qos;
        let leaf = format!("{POD_CGROUP_PREFIX}{uid}");
        let mut first_err = None;
        for tier in [&q.guaranteed, &q.burstable, &q.best_effort] {
            if let Err(e) = self.cgroups.destroy(&tier.child(&leaf)) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Removes the cgroups of pods not in `possibly_running` (known to the
    /// kubelet or with containers in the runtime), skipping those whose
    /// volumes are still set up (upstream cleanupOrphanedPodCgroups: a
    /// memory-backed volume's charge would move to the parent). Returns
    /// the UIDs removed; failures are logged and retried next time.
    pub fn cleanup_orphaned(
        &self,
        possibly_running: &HashSet<String>,
        volumes_exist: &dyn Fn(&str) -> bool,
    ) -> Vec<String> {
        let mut removed = Vec::new();
        // The lock is not held over the scan: a pod worker making a pod
        // cgroup meanwhile does not wait for it.
        let made = self.made.load(Ordering::SeqCst);
        let unchanged = lock(&self.clean_for)
            .as_ref()
            .is_some_and(|(pods, at)| *at == made && pods == possibly_running);
        if unchanged {
            return removed;
        }
        let mut clean = true;
        for (uid, name) in self.pods_from_cgroups() {
            if possibly_running.contains(&uid) {
                continue;
            }
            clean = false;
            if volumes_exist(&uid) {
                log::debug!("orphaned pod cgroup {name}: volumes not yet removed, keeping it");
                continue;
            }
            log::info!("removing orphaned pod cgroup {name}");
            match self.cgroups.destroy(&name) {
                Ok(()) => removed.push(uid),
                Err(e) => log::warn!("remove orphaned pod cgroup: {e}"),
            }
        }
        if clean {
            *lock(&self.clean_for) = Some((possibly_running.clone(), made));
        }
        removed
    }
}

/// The larger of two settings, field by field: -1 and an unset value are
/// unlimited.
fn widest(a: &ResourceConfig, b: &ResourceConfig) -> ResourceConfig {
    let limit = |x: Option<i64>, y: Option<i64>| match (x, y) {
        (Some(x), Some(y)) if x >= 0 && y >= 0 => Some(x.max(y)),
        (None, None) => None,
        _ => Some(-1),
    };
    ResourceConfig {
        memory: limit(a.memory, b.memory),
        cpu_shares: a.cpu_shares.max(b.cpu_shares),
        cpu_quota: limit(a.cpu_quota, b.cpu_quota),
        cpu_period: b.cpu_period.or(a.cpu_period),
        pids_limit: None,
    }
}
