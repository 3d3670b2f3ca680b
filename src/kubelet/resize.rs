//! In-place pod resize, the kubelet's half (upstream v1.34: the
//! allocation manager's handling of a pod update whose resources changed,
//! RetryPendingResizes, and doPodResizeAction's pod cgroup order).
//!
//! The sync loop decides: a resize that fits is allocated, one that does
//! not waits as Deferred or Infeasible. The pod worker acts: the pod
//! cgroup widens first, the containers get their new resources (in place,
//! or by a restart where their resizePolicy says so), and the pod cgroup
//! ends at the new size. Nothing here waits on anything but CRI and cgroup
//! calls that have their own timeouts.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use serde::Serialize;

use super::syncer::Syncer;
use super::Kubelet;
use crate::allocation::feasibility::{can_resize_pod, resizable, ExclusivePolicies, NodeLimits};
use crate::container::PodStatus;
use crate::events::EventType;
use crate::kuberuntime::resize::{compute_pod_resize_action, restart_reason, ResizePlan};
use crate::podutil::PodExt;
use crate::podworkers::UpdateType;

/// The event a finished resize gets (upstream).
pub const RESIZE_COMPLETED: &str = "ResizeCompleted";

impl Kubelet {
    /// The admitted pods not finished, as allocated: what admission and
    /// a resize are weighed against.
    pub(super) fn allocated_active_pods(&self) -> Vec<Arc<Pod>> {
        self.active_pods()
            .iter()
            .map(|p| self.allocation.allocated_pod(p))
            .collect()
    }

    /// A pod whose spec may ask for resources other than allocated: the
    /// resize is allocated when the node can hold it, and waits otherwise.
    /// Returns whether that changed what the pod's status shows.
    pub(super) fn handle_pod_resize(&self, pod: &Arc<Pod>) -> bool {
        let uid = pod.uid();
        if !self.allocation.needs_resize(pod) {
            // Reverted, or never asked: nothing waits.
            return self.allocation.set_pending(uid, None);
        }
        if pod.is_being_deleted() || self.status_manager.phase(uid).is_terminal() {
            return false;
        }
        let allocated = self.allocation.allocated_pod(pod);
        let others = self.allocated_active_pods();
        let node = self.node_for_admission();
        let limits = NodeLimits {
            node: node.as_ref(),
            max_pods: self.settings.max_pods as i64,
            policies: ExclusivePolicies {
                cpu_static: self.cpu_manager.is_static(),
                memory_static: self.memory_manager.is_static(),
            },
            swap: *self.runtime.swap_config(),
        };
        match can_resize_pod(pod, &allocated, &others, &limits) {
            Ok(()) => {
                log::info!("pod {}: resize allocated", pod.full_name());
                self.allocation.allocate(pod);
                true
            }
            Err(p) => {
                let changed = self.allocation.set_pending(uid, Some(p.clone()));
                if changed {
                    log::info!(
                        "pod {}: resize {}: {}",
                        pod.full_name(),
                        p.reason.as_str(),
                        p.message
                    );
                }
                changed
            }
        }
    }

    /// Housekeeping: resizes that wait are tried again, as room may have
    /// appeared (upstream RetryPendingResizes).
    pub(super) fn retry_pending_resizes(&self) {
        for uid in self.allocation.pending_uids() {
            let Some(pod) = self.pod_manager.get(&uid) else {
                self.allocation.set_pending(&uid, None);
                continue;
            };
            if self.handle_pod_resize(&pod) {
                self.dispatch(pod, UpdateType::Sync);
            }
        }
    }
}

impl Syncer {
    /// Puts the pod's allocation into effect for its running containers.
    /// `pod` is as allocated. Failures are logged and retried by the next
    /// sync: what was not applied is not recorded as applied. Returns
    /// whether the pod's status changed (a resize began, moved or ended).
    pub(super) fn resize_running_containers(&self, pod: &Pod, status: &PodStatus) -> bool {
        let uid = pod.uid();
        let actuated = |name: &str| self.allocation.actuated(uid, name);
        let plan = compute_pod_resize_action(pod, status, &actuated);
        let was_in_progress = self.allocation.in_progress(uid);
        if !plan.is_empty() {
            self.allocation.set_in_progress(uid, true);
            self.apply_resize(pod, &plan);
        }
        // Restarts are in effect once the new instances run.
        let left = compute_pod_resize_action(pod, status, &actuated);
        if left.is_empty() && self.allocation.set_in_progress(uid, false) {
            self.runtime.recorder().pod_event(
                pod,
                EventType::Normal,
                RESIZE_COMPLETED,
                &resize_completed_message(pod),
            );
        }
        !plan.is_empty() || was_in_progress != self.allocation.in_progress(uid)
    }

    fn apply_resize(&self, pod: &Pod, plan: &ResizePlan) {
        let uid = pod.uid();
        let old = as_actuated(pod, &|name| self.allocation.actuated(uid, name));
        // Wider first, so no container is ever above its pod.
        if let Err(e) = self.resize_pod_cgroup(pod, Some(&old)) {
            log::warn!("pod {}: resize: widen the pod cgroup: {e}", pod.full_name());
            return;
        }
        for r in &plan.restart {
            log::info!("pod {}: {}", pod.full_name(), restart_reason(&r.name));
            let reason = restart_reason(&r.name);
            // The pod's own grace period, as any kill of one container.
            let grace = Some(pod.kill_grace_seconds());
            if let Err(e) = self
                .runtime
                .kill_container(pod, &r.id, &r.name, grace, Some(&reason))
            {
                log::warn!("pod {}: resize: {e}", pod.full_name());
            }
        }
        let mut updated = Vec::new();
        for r in &plan.update {
            let Some(spec) = pod
                .containers()
                .iter()
                .chain(pod.init_containers())
                .find(|c| c.name == r.name)
            else {
                continue;
            };
            match self.runtime.update_container_resources(pod, spec, &r.id) {
                Ok(()) => updated.push(r),
                Err(e) => log::warn!("pod {}: resize: {e}", pod.full_name()),
            }
        }
        // Then exactly the new size: narrower after the containers.
        if let Err(e) = self.resize_pod_cgroup(pod, None) {
            log::warn!("pod {}: resize: set the pod cgroup: {e}", pod.full_name());
            return;
        }
        for r in updated {
            self.allocation
                .set_actuated(uid, &r.name, r.resources.clone());
            log::info!(
                "pod {}: container {} resized in place",
                pod.full_name(),
                r.name
            );
        }
    }

    fn resize_pod_cgroup(
        &self,
        pod: &Pod,
        grow_from: Option<&Pod>,
    ) -> Result<(), crate::cm::CgroupError> {
        match &self.container_manager {
            Some(cm) => cm.resize_pod_cgroup(pod, grow_from),
            None => Ok(()),
        }
    }
}

/// `pod` with each resizable container's resources as last put into
/// effect (its allocation where that is not known).
fn as_actuated(pod: &Pod, actuated: &dyn Fn(&str) -> Option<ResourceRequirements>) -> Pod {
    let mut out = pod.clone();
    if let Some(spec) = out.spec.as_mut() {
        let all = spec
            .init_containers
            .iter_mut()
            .flatten()
            .chain(spec.containers.iter_mut());
        for c in all {
            if let Some(r) = actuated(&c.name) {
                c.resources = Some(r);
            }
        }
    }
    out
}

#[derive(Serialize)]
struct ContainerResources<'a> {
    name: &'a str,
    resources: ResourceRequirements,
}

#[derive(Serialize)]
struct CompletedMessage<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    containers: Vec<ContainerResources<'a>>,
    #[serde(rename = "initContainers", skip_serializing_if = "Vec::is_empty")]
    init_containers: Vec<ContainerResources<'a>>,
}

/// `Pod resize completed: {"containers":[{"name":..,"resources":..}]}`:
/// the allocation of every resizable container, as upstream words it.
pub fn resize_completed_message(pod: &Pod) -> String {
    let mut msg = CompletedMessage {
        containers: Vec::new(),
        init_containers: Vec::new(),
    };
    let inits: Vec<_> = pod
        .init_containers()
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    for c in resizable(pod) {
        let r = ContainerResources {
            name: &c.name,
            resources: c.resources.clone().unwrap_or_default(),
        };
        if inits.contains(&c.name.as_str()) {
            msg.init_containers.push(r);
        } else {
            msg.containers.push(r);
        }
    }
    let json = serde_json::to_string(&msg).unwrap_or_default();
    format!("Pod resize completed: {json}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_message_is_upstreams() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "v-resize", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {
                "requests": {"cpu": "150m", "memory": "48Mi"},
                "limits": {"cpu": "300m", "memory": "96Mi"}}}]}
        }))
        .unwrap();
        // As the v1.34 capture's ResizeCompleted event.
        assert_eq!(
            resize_completed_message(&pod),
            r#"Pod resize completed: {"containers":[{"name":"c","resources":{"limits":{"cpu":"300m","memory":"96Mi"},"requests":{"cpu":"150m","memory":"48Mi"}}}]}"#
        );
    }
}
