//! What the eviction manager asks of the kubelet (upstream killPodNow and
//! podResourcesAreReclaimed): failing and stopping an evicted pod through
//! its pod worker, as an active deadline does, and telling when it stopped.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::syncer::KilledStatus;
use super::Kubelet;
use crate::container::ContainerState;
use crate::podutil::PodExt;
use crate::podworkers::{UpdatePodOptions, UpdateType};

impl Kubelet {
    /// Stops the pod with `grace` seconds and makes its status Failed,
    /// reason Evicted, `message`. Returns at once: the stop is the pod
    /// worker's, and its container stops are async, so no other pod waits.
    pub fn evict_pod(&self, pod: &Arc<Pod>, grace: i64, message: &str) {
        self.kill_pod_with_status(
            pod,
            grace,
            KilledStatus {
                reason: crate::eviction::REASON,
                message: message.to_string(),
                keep_succeeded: false,
            },
        );
    }

    /// Stops the pod with `grace` seconds; its status carries `status`
    /// from then on (upstream killPodNow with a status function).
    pub fn kill_pod_with_status(&self, pod: &Arc<Pod>, grace: i64, status: KilledStatus) {
        // Kill first: a sync that sees the Failed status before the kill
        // is recorded would terminate without the eviction's grace.
        self.pod_workers.update_pod(UpdatePodOptions {
            update_type: UpdateType::Kill,
            pod: Some(Arc::clone(pod)),
            running_pod: None,
            grace_override: Some(grace),
            removed: false,
        });
        self.syncer.mark_killed(pod.uid(), status);
        let (status, _) = self.cache.get(pod.uid());
        self.syncer.refresh_status(pod, &status);
    }

    /// Whether none of the pod's containers runs any more (the part of
    /// upstream podResourcesAreReclaimed that frees memory and pids).
    pub fn pod_stopped(&self, pod: &Pod) -> bool {
        let (status, _) = self.cache.get(pod.uid());
        !status
            .containers
            .iter()
            .any(|c| c.state == ContainerState::Running)
    }
}
