//! In-place resize of running containers (upstream kuberuntime's
//! computePodResizeAction and the container half of doPodResizeAction).
//!
//! The plan is pure: the pod as allocated, its runtime status and what
//! each container was last given in, the changes out. The pod cgroup's
//! half, and the order of the two, is the syncer's (kubelet/resize.rs).

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};

use super::{container, KubeRuntimeManager, SyncError};
use crate::allocation::feasibility::resizable;
use crate::container::{ContainerState, PodStatus};
use crate::cri::CriError;
use crate::podutil::PodExt;
use crate::util::quantity::parse_quantity;

/// The resources a resize can change.
const RESIZABLE: [&str; 2] = ["cpu", "memory"];

/// What a resize asks of one running container.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerResize {
    pub name: String,
    pub id: String,
    /// What it is to be given: its allocation.
    pub resources: ResourceRequirements,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResizePlan {
    /// Changed only in resources whose policy is NotRequired: updated in
    /// place.
    pub update: Vec<ContainerResize>,
    /// A resource whose policy is RestartContainer changed: stopped, and
    /// started again by the next sync with the new resources.
    pub restart: Vec<ContainerResize>,
}

impl ResizePlan {
    pub fn is_empty(&self) -> bool {
        self.update.is_empty() && self.restart.is_empty()
    }
}

/// The Killing event's message for a restart a resize needs (upstream).
pub fn restart_reason(name: &str) -> String {
    format!("Container {name} resize requires restart")
}

/// Compares each running resizable container's allocation with what it
/// was given; `actuated` answers by container name (None: not known, taken
/// as given, as for a container a previous kubelet started).
pub fn compute_pod_resize_action(
    pod: &Pod,
    status: &PodStatus,
    actuated: &dyn Fn(&str) -> Option<ResourceRequirements>,
) -> ResizePlan {
    let mut plan = ResizePlan::default();
    for c in resizable(pod) {
        let Some(running) = status
            .containers
            .iter()
            .find(|s| s.name == c.name && s.state == ContainerState::Running)
        else {
            continue;
        };
        let Some(was) = actuated(&c.name) else {
            continue;
        };
        let want = c.resources.clone().unwrap_or_default();
        let changed: Vec<&str> = RESIZABLE
            .into_iter()
            .filter(|r| differs(&was, &want, r))
            .collect();
        if changed.is_empty() {
            continue;
        }
        let resize = ContainerResize {
            name: c.name.clone(),
            id: running.id.clone(),
            resources: want,
        };
        if changed.iter().any(|r| needs_restart(c, r)) {
            plan.restart.push(resize);
        } else {
            plan.update.push(resize);
        }
    }
    plan
}

/// Whether the request or the limit of `name` differs, by value (`1` and
/// `1000m` are the same).
pub fn differs(a: &ResourceRequirements, b: &ResourceRequirements, name: &str) -> bool {
    let value = |r: &ResourceRequirements, limits: bool| {
        let m = if limits { &r.limits } else { &r.requests };
        m.as_ref()
            .and_then(|m| m.get(name))
            .and_then(|q| parse_quantity(&q.0).ok())
    };
    value(a, false) != value(b, false) || value(a, true) != value(b, true)
}

/// The container's resize policy for `resource`: NotRequired unless it
/// says RestartContainer.
pub(crate) fn needs_restart(c: &Container, resource: &str) -> bool {
    c.resize_policy
        .iter()
        .flatten()
        .any(|p| p.resource_name == resource && p.restart_policy == "RestartContainer")
}

impl KubeRuntimeManager {
    /// Gives a running container its new resources through the CRI
    /// (upstream updateContainerResources). The CPU and memory managers'
    /// sets stay as they are.
    pub fn update_container_resources(
        &self,
        pod: &Pod,
        spec: &Container,
        id: &str,
    ) -> Result<(), SyncError> {
        let mut r = container::linux_resources(pod, spec, &self.cfg);
        if let Some(cpus) = self.cpus.container_cpuset(pod.uid(), &spec.name) {
            r.cpuset_cpus = cpus.to_string();
        }
        r.cpuset_mems = self
            .memory
            .container_cpuset_mems(pod.uid(), &spec.name)
            .unwrap_or_default();
        self.runtime
            .update_container_resources(id, r)
            .map_err(|e: CriError| {
                SyncError::new(
                    Some(&spec.name),
                    "ResizeError",
                    format!("update resources of container {:?}: {e}", spec.name),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::ContainerStatus;
    use k8s_openapi::api::core::v1::{ContainerResizePolicy, PodSpec};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;
    use std::time::SystemTime;

    fn rr(cpu: &str, mem: &str) -> ResourceRequirements {
        let m = BTreeMap::from([
            ("cpu".to_string(), Quantity(cpu.into())),
            ("memory".to_string(), Quantity(mem.into())),
        ]);
        ResourceRequirements {
            requests: Some(m.clone()),
            limits: Some(m),
            ..Default::default()
        }
    }

    fn pod(res: ResourceRequirements, memory_policy: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some("u".into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(res),
                resize_policy: Some(vec![ContainerResizePolicy {
                    resource_name: "memory".into(),
                    restart_policy: memory_policy.into(),
                }]),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    fn running() -> PodStatus {
        PodStatus {
            containers: vec![ContainerStatus {
                id: "id1".into(),
                name: "c".into(),
                state: ContainerState::Running,
                created_at: SystemTime::UNIX_EPOCH,
                started_at: None,
                finished_at: None,
                exit_code: 0,
                image: String::new(),
                image_ref: String::new(),
                hash: String::new(),
                restart_count: 0,
                reason: String::new(),
                message: String::new(),
                user: None,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn cpu_changes_in_place_memory_by_its_policy() {
        let was = rr("100m", "64Mi");
        let actuated = |_: &str| Some(was.clone());
        let plan = compute_pod_resize_action(
            &pod(rr("200m", "64Mi"), "RestartContainer"),
            &running(),
            &actuated,
        );
        assert_eq!(plan.update.len(), 1);
        assert!(plan.restart.is_empty());
        assert_eq!(plan.update[0].id, "id1");

        let plan = compute_pod_resize_action(
            &pod(rr("200m", "96Mi"), "RestartContainer"),
            &running(),
            &actuated,
        );
        assert_eq!(
            plan.restart.len(),
            1,
            "memory changed under RestartContainer"
        );
        let plan = compute_pod_resize_action(
            &pod(rr("200m", "96Mi"), "NotRequired"),
            &running(),
            &actuated,
        );
        assert_eq!(plan.update.len(), 1);
    }

    #[test]
    fn nothing_when_equal_by_value_or_unknown_or_not_running() {
        let actuated = |_: &str| Some(rr("1", "64Mi"));
        assert!(compute_pod_resize_action(
            &pod(rr("1000m", "67108864"), "NotRequired"),
            &running(),
            &actuated
        )
        .is_empty());
        let unknown = |_: &str| None;
        assert!(compute_pod_resize_action(
            &pod(rr("2", "64Mi"), "NotRequired"),
            &running(),
            &unknown
        )
        .is_empty());
        let mut exited = running();
        exited.containers[0].state = ContainerState::Exited;
        assert!(compute_pod_resize_action(
            &pod(rr("2", "64Mi"), "NotRequired"),
            &exited,
            &actuated
        )
        .is_empty());
    }
}
