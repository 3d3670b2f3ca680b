//! Housekeeping (upstream HandlePodCleanups, kubelet_pods.go): what is
//! left of pods no source wants any more, every 2 s on the sync loop.

use std::collections::HashSet;

use super::Kubelet;
use crate::podutil::PodExt;
use crate::podworkers::{UpdatePodOptions, UpdateType};

impl Kubelet {
    /// Mirror pods whose static pod is gone are removed from the API once
    /// the static pod has stopped (upstream deleteOrphanedMirrorPods).
    fn delete_orphaned_mirror_pods(&self) {
        let Some(mc) = &self.mirror_client else {
            return;
        };
        for mirror in self.pod_manager.orphaned_mirrors() {
            let still_stopping = self.pod_workers.is_known(
                mirror
                    .annotation(crate::types::CONFIG_MIRROR_ANNOTATION)
                    .unwrap_or(""),
            );
            log::debug!(
                "orphaned mirror pod {} (static pod still stopping: {still_stopping})",
                mirror.namespaced_name()
            );
            if still_stopping {
                continue;
            }
            if let Err(e) = mc.delete_mirror_pod(&mirror) {
                log::warn!(
                    "delete orphaned mirror pod {}: {e}",
                    mirror.namespaced_name()
                );
            }
        }
    }

    /// Housekeeping (upstream HandlePodCleanups): stop workers of pods no
    /// longer wanted, forget finished ones, and kill runtime pods that no
    /// source wants (left over from before a restart).
    pub(super) fn handle_pod_cleanups(&self) {
        let desired = self.pod_manager.uids();
        let forgotten = self.pod_workers.sync_known_pods(&desired);
        for uid in &forgotten {
            self.status_manager.remove(uid);
            self.syncer.forget_eviction(uid);
            self.cache.delete(uid);
            self.runtime.forget_pod(uid);
        }
        self.delete_orphaned_mirror_pods();
        // One relist snapshot for both: a pod that still runs keeps its
        // directory, and is killed below if no source wants it.
        let (running, listed_at) = self.pleg.listed_pods();
        let active: HashSet<String> = desired
            .iter()
            .cloned()
            .chain(self.pod_workers.known_uids())
            .chain(running.iter().map(|rp| rp.uid.clone()))
            .collect();
        // Before the pod directories go: the ID block's file is in one.
        self.runtime.cleanup_user_namespaces(&active);
        self.volume_manager.cleanup_orphaned_pod_dirs(&active);
        self.allocation.remove_orphans(&active);
        self.retry_pending_resizes();
        self.device_manager
            .release_inactive(|| self.device_holders());
        self.dra_manager
            .unprepare_inactive(|| self.device_holders());
        self.resource_managers_housekeeping(&running);
        if let Some(cm) = &self.container_manager {
            // Only cgroups of pods neither known nor running go, and not
            // while their volumes are still set up.
            let pods_dir = self.settings.root_dir.join("pods");
            cm.housekeeping(
                &active,
                &|uid| pods_dir.join(uid).join("volumes").exists(),
                &super::unfinished_pods(&self.pod_manager, &self.status_manager, &self.allocation),
            );
        }
        for rp in running.iter() {
            if desired.contains(&rp.uid) || self.pod_workers.is_known(&rp.uid) {
                continue;
            }
            // Removed and forgotten since that relist began: the listing
            // may predate the removal, and the next one will tell
            // (upstream lists afresh here, ForceUpdateIfOlder).
            if listed_at.is_none_or(|t| self.pod_workers.forgotten_since(&rp.uid, t)) {
                continue;
            }
            log::info!(
                "cleaning up orphaned pod {}/{} ({})",
                rp.namespace,
                rp.name,
                rp.uid
            );
            self.pod_workers.update_pod(UpdatePodOptions {
                update_type: UpdateType::Kill,
                pod: None,
                running_pod: Some(rp.clone()),
                grace_override: None,
                removed: true,
            });
        }
        // What the pods that came and went left free in malloc's arenas
        // goes back to the kernel (as Go's scavenger does upstream).
        self.heap_trimmer.maybe_release(!forgotten.is_empty());
        // And the code that ran once (the start, a burst) leaves the RSS.
        self.code_trimmer.maybe_trim();
    }
}

impl Kubelet {
    /// The CPU and memory managers' part of housekeeping (static
    /// policies only): the CPU reconcile loop learns which containers
    /// run, and the CPUs and memory of pods no longer active go back.
    fn resource_managers_housekeeping(&self, running: &[crate::container::RuntimePod]) {
        let Some(active) = self.resource_holders() else {
            return;
        };
        let containers = running
            .iter()
            .flat_map(|p| {
                p.containers
                    .iter()
                    .filter(|c| c.state == crate::container::ContainerState::Running)
                    .map(|c| crate::cm::cpumanager::RunningContainer {
                        pod_uid: p.uid.clone(),
                        name: c.name.clone(),
                        id: c.id.clone(),
                    })
            })
            .collect();
        self.cpu_manager.set_running(&active, containers);
        self.remove_stale_state(&active);
    }

    /// Before admission, as upstream's Allocate: the CPUs, memory and
    /// devices of pods that finished since the last housekeeping go back
    /// first.
    pub(super) fn release_stale_resources(&self, pod: &k8s_openapi::api::core::v1::Pod) {
        if let Some(active) = self.resource_holders() {
            self.remove_stale_state(&active);
        }
        self.device_manager
            .prepare_admission(pod, || self.device_holders());
    }

    /// upstream removeStaleState, for both managers.
    fn remove_stale_state(&self, active: &HashSet<String>) {
        let ready = self.sources_ready();
        self.memory_manager.remove_stale_state(active, ready);
        self.cpu_manager.remove_stale_state(active, ready);
    }

    /// The pods that may hold exclusive CPUs or memory (upstream
    /// activePods: not finished); None when no static policy is on.
    fn resource_holders(&self) -> Option<HashSet<String>> {
        if !self.cpu_manager.is_static() && !self.memory_manager.is_static() {
            return None;
        }
        let unfinished =
            super::unfinished_pods(&self.pod_manager, &self.status_manager, &self.allocation);
        Some(unfinished.iter().map(|p| p.uid().to_string()).collect())
    }
}
