//! Local ephemeral storage limits (upstream eviction_manager.go
//! localStorageEviction): a pod whose emptyDir outgrows its `sizeLimit`,
//! whose containers together outgrow the pod's ephemeral-storage limit,
//! or one of whose containers outgrows its own limit, is evicted at once
//! (grace 0), whatever the node's thresholds.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};

use super::message;
use super::rank::{self, FsStatsType, StatsFunc};
use super::{api::Resource, EvictionDeps, Manager};
use crate::podutil::PodExt;
use crate::server::stats::types::{ContainerStats, PodStats};
use crate::util::quantity::parse_quantity;

/// Whole units of a quantity string, None when it does not parse.
fn units(q: &str) -> Option<i128> {
    parse_quantity(q).ok().map(|m| m / 1000)
}

impl Manager {
    /// Evicts every pod over a local storage limit; returns the first.
    pub(super) fn local_storage_eviction(
        &self,
        deps: &dyn EvictionDeps,
        pods: &[Arc<Pod>],
        stats: &StatsFunc<'_>,
    ) -> Option<Arc<Pod>> {
        let mut first = None;
        for pod in pods {
            let Some(s) = stats.get(pod) else {
                continue;
            };
            if let Some((msg, signal)) = violation(deps, pod, s) {
                if self.evict_pod(deps, pod, 0, &msg) {
                    crate::metrics::evicted(signal);
                    first.get_or_insert_with(|| Arc::clone(pod));
                }
            }
        }
        first
    }
}

/// Whether the pod has a limit the local storage checks enforce: an
/// emptyDir sizeLimit or a container's ephemeral-storage limit.
pub(super) fn has_limit(pod: &Pod) -> bool {
    let empty_dir_limit = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|v| {
            v.iter()
                .any(|v| v.empty_dir.as_ref().is_some_and(|e| e.size_limit.is_some()))
        });
    empty_dir_limit || pod.containers().iter().any(has_ephemeral_limit)
}

/// Whether the container sets an ephemeral-storage limit.
fn has_ephemeral_limit(c: &Container) -> bool {
    c.resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .is_some_and(|l| l.contains_key("ephemeral-storage"))
}

/// upstream emptyDirLimitEviction: an emptyDir with a positive sizeLimit
/// that holds more.
fn empty_dir_violation(deps: &dyn EvictionDeps, pod: &Pod) -> Option<String> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    volumes.iter().find_map(|v| {
        let limit = v.empty_dir.as_ref()?.size_limit.as_ref()?;
        let max = units(&limit.0).filter(|m| *m > 0)?;
        let used = deps.empty_dir_usage(pod, &v.name)?;
        (i128::from(used) > max).then(|| message::empty_dir_message(&v.name, &limit.0))
    })
}

fn container_disk(c: &ContainerStats) -> i128 {
    let used = |f: Option<&crate::server::stats::types::FsStats>| {
        i128::from(f.and_then(|f| f.used_bytes).unwrap_or(0))
    };
    used(c.rootfs.as_ref()) + used(c.logs.as_ref())
}

/// upstream podEphemeralStorageLimitEviction: the containers' writable
/// layers and logs plus the pod's emptyDirs on disk, over the sum of the
/// containers' ephemeral-storage limits (only when every container sets one,
/// as the pod then has a limit).
fn pod_ephemeral_violation(deps: &dyn EvictionDeps, pod: &Pod, s: &PodStats) -> Option<String> {
    let limits = crate::cm::helpers::pod_limits(pod);
    let limit = *limits.get("ephemeral-storage")? / 1000;
    let every = pod.containers().iter().all(has_ephemeral_limit);
    if !every || limit <= 0 {
        return None;
    }
    let mut used = rank::pod_disk_usage(
        pod,
        s,
        &[FsStatsType::Root, FsStatsType::Logs],
        Resource::EphemeralStorage,
    );
    for v in pod.spec.as_ref()?.volumes.iter().flatten() {
        let on_disk = v
            .empty_dir
            .as_ref()
            .is_some_and(|e| e.medium.as_deref().unwrap_or("").is_empty());
        if on_disk {
            used += i128::from(deps.empty_dir_usage(pod, &v.name).unwrap_or(0));
        }
    }
    (used > limit).then(|| {
        format!(
            "Pod ephemeral local storage usage exceeds the total limit of containers {}. ",
            super::helpers::format_quantity(limit, true)
        )
    })
}

/// upstream containerEphemeralStorageLimitEviction.
fn container_ephemeral_violation(pod: &Pod, s: &PodStats) -> Option<String> {
    pod.containers().iter().find_map(|c| {
        let limit = c
            .resources
            .as_ref()?
            .limits
            .as_ref()?
            .get("ephemeral-storage")?;
        let max = units(&limit.0)?;
        let cs = s.containers.iter().find(|x| x.name == c.name)?;
        (container_disk(cs) > max)
            .then(|| message::container_ephemeral_storage_message(&c.name, &limit.0))
    })
}

/// The first limit the pod is over: the message, and the signal the
/// eviction is counted under (upstream signalEmptyDirFsLimit, ...).
pub(super) fn violation(
    deps: &dyn EvictionDeps,
    pod: &Pod,
    s: &PodStats,
) -> Option<(String, &'static str)> {
    empty_dir_violation(deps, pod)
        .map(|m| (m, "emptydirfs.limit"))
        .or_else(|| pod_ephemeral_violation(deps, pod, s).map(|m| (m, "ephemeralpodfs.limit")))
        .or_else(|| {
            container_ephemeral_violation(pod, s).map(|m| (m, "ephemeralcontainerfs.limit"))
        })
}
