//! One round of the eviction manager (upstream eviction_manager.go
//! synchronize, reclaimNodeLevelResources, evictPod).

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;

use super::api::{Signal, Threshold};
use super::helpers::{self, Observations};
use super::rank::{self, StatsFunc};
use super::{message, EvictionDeps, Manager, IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS};
use crate::podutil::PodExt;

impl Manager {
    /// upstream synchronize: observes, updates the conditions, and evicts
    /// at most one pod. Returns the pod evicted.
    pub fn synchronize(&self, deps: &dyn EvictionDeps, now: Instant) -> Option<Arc<Pod>> {
        let cfg = &self.config;
        if cfg.thresholds.is_empty() && !cfg.local_storage_capacity_isolation {
            return None;
        }
        let dedicated_image_fs = self.dedicated_image_fs(deps);
        let active = deps.active_pods();
        // The signals are the node's; the pods' stats (every pod's cgroups,
        // the runtime's stats, their log directories) are read only when
        // a pod has a local storage limit or a pod must be ranked.
        let limits = cfg.local_storage_capacity_isolation
            && active.iter().any(|p| super::local_storage::has_limit(p));
        let summary = Self::summary(deps, limits)?;
        let pods_cgroup = if cfg.watches_allocatable_memory() {
            deps.pods_cgroup_memory()
        } else {
            None
        };
        let observations = helpers::make_signal_observations(&summary, pods_cgroup);
        let thresholds = self.update_state(&observations, now);
        if !limits && thresholds.is_empty() {
            return None;
        }
        let summary = if limits {
            summary
        } else {
            Self::summary(deps, true)?
        };
        let stats = StatsFunc::new(&summary);

        if limits {
            if let Some(pod) = self.local_storage_eviction(deps, &active, &stats) {
                return Some(pod);
            }
        }
        if thresholds.is_empty() {
            return None;
        }
        self.evict_for_thresholds(
            deps,
            thresholds,
            active,
            &observations,
            &stats,
            dedicated_image_fs,
        )
    }

    fn summary(
        deps: &dyn EvictionDeps,
        with_pods: bool,
    ) -> Option<crate::server::stats::types::Summary> {
        deps.summary(with_pods)
            .inspect_err(|e| log::error!("eviction manager: failed to get summary stats: {e:#}"))
            .ok()
    }

    /// The condition and threshold bookkeeping of a round; returns the
    /// thresholds to act on now.
    fn update_state(&self, observations: &Observations, now: Instant) -> Vec<Threshold> {
        let cfg = &self.config;
        let mut st = lock(&self.state);
        let mut thresholds = helpers::thresholds_met(&cfg.thresholds, observations, false);
        // Thresholds acted on before stay until their minimum reclaim is met.
        if !st.thresholds_met.is_empty() {
            let unresolved = helpers::thresholds_met(&st.thresholds_met, observations, true);
            thresholds = helpers::merge_thresholds(thresholds, unresolved);
        }
        let first_observed = helpers::thresholds_first_observed_at(
            &thresholds,
            &st.thresholds_first_observed_at,
            now,
        );
        let conditions = helpers::node_conditions(&thresholds);
        if !conditions.is_empty() {
            log::debug!("eviction manager: node conditions observed: {conditions:?}");
        }
        let last_observed = helpers::node_conditions_last_observed_at(
            &conditions,
            &st.node_conditions_last_observed_at,
            now,
        );
        let conditions = helpers::node_conditions_observed_since(
            &last_observed,
            cfg.pressure_transition_period,
            now,
        );
        let mut thresholds = helpers::thresholds_met_grace_period(&first_observed, now);
        if let Some(last) = &st.last_observations {
            thresholds = helpers::thresholds_updated_stats(thresholds, observations, last);
        }
        st.node_conditions = conditions;
        st.thresholds_first_observed_at = first_observed;
        st.node_conditions_last_observed_at = last_observed;
        st.thresholds_met = thresholds.clone();
        st.last_observations = Some(observations.clone());
        thresholds
    }

    fn dedicated_image_fs(&self, deps: &dyn EvictionDeps) -> bool {
        if let Some(known) = lock(&self.state).dedicated_image_fs {
            return known;
        }
        match deps.has_dedicated_image_fs() {
            Ok(v) => {
                lock(&self.state).dedicated_image_fs = Some(v);
                v
            }
            Err(e) => {
                log::debug!("eviction manager: image filesystem unknown yet: {e:#}");
                false
            }
        }
    }

    fn evict_for_thresholds(
        &self,
        deps: &dyn EvictionDeps,
        mut thresholds: Vec<Threshold>,
        mut active: Vec<Arc<Pod>>,
        observations: &Observations,
        stats: &StatsFunc<'_>,
        dedicated_image_fs: bool,
    ) -> Option<Arc<Pod>> {
        helpers::sort_by_eviction_priority(&mut thresholds);
        let to_reclaim = thresholds.first()?.clone();
        let resource = to_reclaim.signal.resource();
        log::warn!("eviction manager: attempting to reclaim {resource}");
        if self.reclaim_node_level_resources(deps, to_reclaim.signal, dedicated_image_fs) {
            log::info!(
                "eviction manager: able to reduce {resource} pressure without evicting pods"
            );
            return None;
        }
        if active.is_empty() {
            log::error!("eviction manager: eviction thresholds have been met, but no pods are active to evict");
            return None;
        }
        rank::rank(to_reclaim.signal, &mut active, stats, dedicated_image_fs);
        log::info!(
            "eviction manager: pods ranked for eviction: [{}]",
            active
                .iter()
                .map(|p| p.full_name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for pod in &active {
            let grace = self.grace_period_override(&to_reclaim, pod);
            let msg = message::eviction_message(resource, pod, stats, &thresholds, observations);
            if self.evict_pod(deps, pod, grace, &msg) {
                crate::metrics::evicted(to_reclaim.signal.as_str());
                return Some(Arc::clone(pod));
            }
        }
        log::info!("eviction manager: unable to evict any pods from the node");
        None
    }

    /// Hard thresholds stop a pod almost at once; soft ones grant
    /// evictionMaxPodGracePeriod, or the pod's own grace if shorter.
    fn grace_period_override(&self, t: &Threshold, pod: &Pod) -> i64 {
        if t.is_hard() {
            return IMMEDIATE_EVICTION_GRACE_PERIOD_SECONDS;
        }
        let max = self.config.max_pod_grace_period_seconds;
        pod.spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .map_or(max, |own| own.min(max))
    }

    /// upstream reclaimNodeLevelResources: for disk signals, removes dead
    /// containers and unused images, then looks again. True when no
    /// threshold is met any more.
    fn reclaim_node_level_resources(
        &self,
        deps: &dyn EvictionDeps,
        signal: Signal,
        dedicated_image_fs: bool,
    ) -> bool {
        let (containers, images) = node_reclaim_funcs(signal, dedicated_image_fs);
        if !containers && !images {
            return false;
        }
        if containers {
            if let Err(e) = deps.delete_all_unused_containers() {
                log::warn!("eviction manager: unexpected error when attempting to reduce {signal} pressure: {e:#}");
            }
        }
        if images {
            if let Err(e) = deps.delete_unused_images() {
                log::warn!("eviction manager: unexpected error when attempting to reduce {signal} pressure: {e:#}");
            }
        }
        let summary = match deps.summary(false) {
            Ok(s) => s,
            Err(e) => {
                log::error!(
                    "eviction manager: failed to get summary stats after resource reclaim: {e:#}"
                );
                return false;
            }
        };
        let pods_cgroup = if self.config.watches_allocatable_memory() {
            deps.pods_cgroup_memory()
        } else {
            None
        };
        let observations = helpers::make_signal_observations(&summary, pods_cgroup);
        helpers::thresholds_met(&self.config.thresholds, &observations, false).is_empty()
    }

    /// upstream evictPod: critical pods are never evicted; otherwise an
    /// `Evicted` event, then the pod is failed and stopped.
    pub(super) fn evict_pod(
        &self,
        deps: &dyn EvictionDeps,
        pod: &Arc<Pod>,
        grace: i64,
        msg: &str,
    ) -> bool {
        if rank::is_critical_pod(pod) {
            log::error!(
                "eviction manager: cannot evict a critical pod {}",
                pod.full_name()
            );
            return false;
        }
        deps.record_eviction(pod, msg);
        match deps.kill_pod(pod, grace, msg) {
            Ok(()) => {
                log::info!(
                    "eviction manager: pod {} is evicted successfully: {msg}",
                    pod.full_name()
                );
                true
            }
            Err(e) => {
                log::error!(
                    "eviction manager: pod {} failed to evict: {e:#}",
                    pod.full_name()
                );
                false
            }
        }
    }
}

/// upstream buildSignalToNodeReclaimFuncs, as (delete dead containers,
/// delete unused images): with a dedicated image filesystem nodefs has
/// nothing to reclaim and imagefs both; on one filesystem every disk
/// signal has both. Memory and pids have none.
pub fn node_reclaim_funcs(signal: Signal, dedicated_image_fs: bool) -> (bool, bool) {
    match signal {
        Signal::NodeFsAvailable | Signal::NodeFsInodesFree if dedicated_image_fs => (false, false),
        Signal::NodeFsAvailable
        | Signal::NodeFsInodesFree
        | Signal::ImageFsAvailable
        | Signal::ImageFsInodesFree => (true, true),
        _ => (false, false),
    }
}
