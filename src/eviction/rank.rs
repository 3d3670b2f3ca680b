//! Which pod goes first (upstream `helpers.go` rankMemoryPressure,
//! rankPIDPressure, rankDiskPressureFunc): pods whose usage exceeds their
//! requests, then lower priority, then the larger usage above requests.
//! Pods without stats go first, as upstream.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::api::{Resource, Signal};
use crate::podutil::PodExt;
use crate::server::stats::types::{FsStats, PodStats, Summary};

/// upstream SystemCriticalPriority: pods at or above it are never evicted.
pub const SYSTEM_CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// upstream kubelettypes.IsCriticalPod: static and mirror pods, and pods
/// at system-critical priority.
pub fn is_critical_pod(pod: &Pod) -> bool {
    crate::types::is_static_pod(pod)
        || crate::types::is_mirror_pod(pod)
        || priority(pod) >= SYSTEM_CRITICAL_PRIORITY
}

/// upstream corev1helpers.PodPriority: spec.priority, 0 when unset.
pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Pod stats by UID (upstream statsFunc / cachedStatsFunc).
pub struct StatsFunc<'a> {
    by_uid: HashMap<&'a str, &'a PodStats>,
}

impl<'a> StatsFunc<'a> {
    pub fn new(summary: &'a Summary) -> Self {
        StatsFunc {
            by_uid: summary
                .pods
                .iter()
                .map(|p| (p.pod_ref.uid.as_str(), p))
                .collect(),
        }
    }

    pub fn get(&self, pod: &Pod) -> Option<&'a PodStats> {
        self.by_uid.get(pod.uid()).copied()
    }
}

/// Which filesystem stats a disk ranking counts (upstream fsStatsType).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsStatsType {
    /// Containers' writable layers.
    Root,
    Logs,
    /// emptyDir on disk, configMap, gitRepo and hostPath volumes.
    LocalVolumeSource,
}

/// The fs stats a disk signal ranks by (upstream buildSignalToRankFunc):
/// with a dedicated image filesystem nodefs counts logs and local volumes
/// and imagefs the writable layers; on one filesystem both count all.
pub fn fs_stats_for(signal: Signal, dedicated_image_fs: bool) -> Vec<FsStatsType> {
    use FsStatsType::*;
    match (dedicated_image_fs, signal) {
        (true, Signal::ImageFsAvailable | Signal::ImageFsInodesFree) => vec![Root],
        (true, _) => vec![Logs, LocalVolumeSource],
        (false, _) => vec![Root, Logs, LocalVolumeSource],
    }
}

/// Orders `pods` for eviction under `signal`, first to evict first.
pub fn rank(
    signal: Signal,
    pods: &mut [Arc<Pod>],
    stats: &StatsFunc<'_>,
    dedicated_image_fs: bool,
) {
    match signal.resource() {
        Resource::Memory => rank_memory_pressure(pods, stats),
        Resource::Pids => rank_pid_pressure(pods, stats),
        r => {
            let types = fs_stats_for(signal, dedicated_image_fs);
            rank_disk_pressure(pods, stats, &types, r)
        }
    }
}

/// upstream cmpBool: true before false.
fn cmp_bool(a: bool, b: bool) -> Ordering {
    b.cmp(&a)
}

/// Pods without stats first; `None` when both have stats.
fn missing_stats_first(a: Option<&PodStats>, b: Option<&PodStats>) -> Option<Ordering> {
    match (a, b) {
        (Some(_), Some(_)) => None,
        (a, b) => Some(cmp_bool(a.is_none(), b.is_none())),
    }
}

/// Lower priority first.
fn by_priority(a: &Pod, b: &Pod) -> Ordering {
    priority(a).cmp(&priority(b))
}

/// The pod's request of a resource in whole units (upstream
/// GetResourceRequestQuantity; requests default to limits).
pub fn request(pod: &Pod, resource: &str) -> i128 {
    crate::cm::helpers::pod_requests(pod)
        .get(resource)
        .map_or(0, |milli| milli / 1000)
}

/// The pod's memory working set, 0 when unknown.
pub fn memory_usage(s: &PodStats) -> i128 {
    i128::from(
        s.memory
            .as_ref()
            .and_then(|m| m.working_set_bytes)
            .unwrap_or(0),
    )
}

/// upstream rankMemoryPressure: exceeding requests, priority, usage
/// above requests (largest first).
pub fn rank_memory_pressure(pods: &mut [Arc<Pod>], stats: &StatsFunc<'_>) {
    pods.sort_by(|a, b| {
        let (sa, sb) = (stats.get(a), stats.get(b));
        if let Some(o) = missing_stats_first(sa, sb) {
            return o;
        }
        let (Some(sa), Some(sb)) = (sa, sb) else {
            return Ordering::Equal;
        };
        let (ua, ub) = (memory_usage(sa), memory_usage(sb));
        let (ra, rb) = (request(a, "memory"), request(b, "memory"));
        cmp_bool(ua > ra, ub > rb)
            .then_with(|| by_priority(a, b))
            .then_with(|| (ub - rb).cmp(&(ua - ra)))
    });
}

fn process_count(s: &PodStats) -> u64 {
    s.process_stats
        .as_ref()
        .and_then(|p| p.process_count)
        .unwrap_or(0)
}

/// upstream rankPIDPressure: priority, then the most processes.
pub fn rank_pid_pressure(pods: &mut [Arc<Pod>], stats: &StatsFunc<'_>) {
    pods.sort_by(|a, b| {
        let (sa, sb) = (stats.get(a), stats.get(b));
        // Upstream compares priority before looking for stats.
        by_priority(a, b).then_with(|| match (sa, sb) {
            (Some(sa), Some(sb)) => process_count(sb).cmp(&process_count(sa)),
            (sa, sb) => cmp_bool(sa.is_none(), sb.is_none()),
        })
    });
}

/// Volumes of the pod that use the node's disk (upstream localVolumeNames:
/// hostPath, and IsLocalEphemeralVolume: gitRepo, emptyDir on disk,
/// configMap).
pub fn local_volume_names(pod: &Pod) -> Vec<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter(|v| {
            v.host_path.is_some()
                || v.git_repo.is_some()
                || v.config_map.is_some()
                || v.empty_dir
                    .as_ref()
                    .is_some_and(|e| e.medium.as_deref().unwrap_or("").is_empty())
        })
        .map(|v| v.name.as_str())
        .collect()
}

fn used(fs: Option<&FsStats>, resource: Resource) -> i128 {
    let v = match resource {
        Resource::Inodes => fs.and_then(|f| f.inodes_used),
        _ => fs.and_then(|f| f.used_bytes),
    };
    i128::from(v.unwrap_or(0))
}

/// upstream podDiskUsage: the measured fs stats of the pod's containers
/// and local volumes, in bytes or inodes.
pub fn pod_disk_usage(pod: &Pod, s: &PodStats, types: &[FsStatsType], resource: Resource) -> i128 {
    let mut total = 0;
    for c in &s.containers {
        if types.contains(&FsStatsType::Root) {
            total += used(c.rootfs.as_ref(), resource);
        }
        if types.contains(&FsStatsType::Logs) {
            total += used(c.logs.as_ref(), resource);
        }
    }
    if types.contains(&FsStatsType::LocalVolumeSource) {
        for name in local_volume_names(pod) {
            if let Some(v) = s.volume_stats.iter().find(|v| v.name == name) {
                total += used(Some(&v.fs), resource);
            }
        }
    }
    total
}

/// upstream rankDiskPressureFunc: exceeding requests, priority, usage
/// above the ephemeral-storage request.
pub fn rank_disk_pressure(
    pods: &mut [Arc<Pod>],
    stats: &StatsFunc<'_>,
    types: &[FsStatsType],
    resource: Resource,
) {
    // Inodes have no request: upstream compares against 0.
    let req = |p: &Pod| match resource {
        Resource::EphemeralStorage => request(p, "ephemeral-storage"),
        _ => 0,
    };
    pods.sort_by(|a, b| {
        let (sa, sb) = (stats.get(a), stats.get(b));
        if let Some(o) = missing_stats_first(sa, sb) {
            return o;
        }
        let (Some(sa), Some(sb)) = (sa, sb) else {
            return Ordering::Equal;
        };
        let ua = pod_disk_usage(a, sa, types, resource);
        let ub = pod_disk_usage(b, sb, types, resource);
        // The "above requests" step subtracts the ephemeral-storage
        // request whatever the resource, as upstream does.
        let (ea, eb) = (
            request(a, "ephemeral-storage"),
            request(b, "ephemeral-storage"),
        );
        cmp_bool(ua > req(a), ub > req(b))
            .then_with(|| by_priority(a, b))
            .then_with(|| (ub - eb).cmp(&(ua - ea)))
    });
}
