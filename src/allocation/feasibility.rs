//! Whether the node can take a resize now, later or never (upstream
//! allocation manager's canResizePod, v1.34).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Node, Pod};

use super::{PendingReason, PendingResize};
use crate::kuberuntime::qos::{qos_class, QosClass};
use crate::kuberuntime::resize::needs_restart;
use crate::kuberuntime::swap::{SwapBehavior, SwapConfig};
use crate::lifecycle::{admission, fit};
use crate::podutil::PodExt;
use crate::util::quantity::{parse_quantity, parse_quantity_value};

/// The node's policies that pin a Guaranteed pod's CPUs or memory: such a
/// pod cannot change those in place (InPlacePodVerticalScalingExclusiveCPUs
/// and ...ExclusiveMemory are alpha and off in v1.34).
#[derive(Debug, Clone, Copy, Default)]
pub struct ExclusivePolicies {
    pub cpu_static: bool,
    pub memory_static: bool,
}

/// What a resize is checked against.
pub struct NodeLimits<'a> {
    pub node: Option<&'a Node>,
    pub max_pods: i64,
    pub policies: ExclusivePolicies,
    pub swap: SwapConfig,
}

/// `Ok` when `desired` (the pod with its new resources) can be allocated
/// beside `others` (the other admitted pods, as allocated); `allocated`
/// is the same pod as currently allocated.
pub fn can_resize_pod(
    desired: &Pod,
    allocated: &Pod,
    others: &[Arc<Pod>],
    node: &NodeLimits<'_>,
) -> Result<(), PendingResize> {
    let infeasible = |message: String| PendingResize {
        reason: PendingReason::Infeasible,
        message,
    };
    if swap_blocks_resize(desired, allocated, &node.swap) {
        return Err(infeasible(
            "In-place resize of containers with swap is not supported.".into(),
        ));
    }
    if qos_class(desired) == QosClass::Guaranteed {
        if node.policies.cpu_static && request_changed(desired, allocated, "cpu") {
            return Err(infeasible(
                "Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\""
                    .into(),
            ));
        }
        if node.policies.memory_static && request_changed(desired, allocated, "memory") {
            return Err(infeasible(
                "Resize is infeasible for Guaranteed Pods alongside Memory Manager policy \
                 \"Static\""
                    .into(),
            ));
        }
    }
    let Some(n) = node.node else {
        // Standalone: no allocatable to weigh against.
        return Ok(());
    };
    // CPU in millicores, memory in bytes (upstream MilliValue and Value).
    let available = |name: &str| {
        let q = n
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get(name));
        let parsed = match name {
            "cpu" => q.and_then(|q| parse_quantity(&q.0).ok()),
            _ => q.and_then(|q| parse_quantity_value(&q.0).ok()),
        };
        parsed.unwrap_or(0)
    };
    let (cpu, mem) = (available("cpu"), available("memory"));
    let cpu_req = fit::request_units(desired, "cpu");
    let mem_req = fit::request_units(desired, "memory");
    if cpu_req > cpu || mem_req > mem {
        let what = if mem_req > mem {
            format!("memory, requested: {mem_req}, capacity: {mem}")
        } else {
            format!("cpu, requested: {cpu_req}, capacity: {cpu}")
        };
        return Err(infeasible(format!(
            "Node didn't have enough capacity: {what}"
        )));
    }
    let others: Vec<Arc<Pod>> = others
        .iter()
        .filter(|p| p.uid() != desired.uid())
        .cloned()
        .collect();
    admission::admit(desired, &others, Some(n), node.max_pods).map_err(|r| PendingResize {
        reason: PendingReason::Deferred,
        message: r.message,
    })
}

/// A container whose memory request changes in place, and that may swap
/// before or after, cannot be resized (upstream
/// disallowResizeForSwappableContainers): its swap limit is not resized.
fn swap_blocks_resize(desired: &Pod, allocated: &Pod, swap: &SwapConfig) -> bool {
    resizable(desired).any(|d| {
        let Some(a) = resizable(allocated).find(|a| a.name == d.name) else {
            return false;
        };
        request(d, "memory") != request(a, "memory")
            && !needs_restart(a, "memory")
            && (swap.container_behavior(desired, d) != SwapBehavior::NoSwap
                || swap.container_behavior(allocated, a) != SwapBehavior::NoSwap)
    })
}

/// Whether a resizable container's `name` request differs from its
/// allocation (upstream guaranteedPodResourceResizeRequired).
fn request_changed(desired: &Pod, allocated: &Pod, name: &str) -> bool {
    resizable(desired).any(|c| {
        let was = resizable(allocated).find(|a| a.name == c.name);
        was.map(|a| request(a, name)) != Some(request(c, name))
    })
}

/// The container's own `name` request, in milli-units.
fn request(c: &Container, name: &str) -> Option<i128> {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get(name))
        .and_then(|q| parse_quantity(&q.0).ok())
}

/// App containers and sidecars: the containers a resize may change
/// (upstream IsResizableContainer).
pub fn resizable(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.init_containers()
        .iter()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .chain(pod.containers().iter())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeStatus, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn list(kv: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        Some(
            kv.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        )
    }

    fn pod(uid: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p.metadata.name = Some(uid.into());
        p.spec = Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: list(req),
                    limits: list(lim),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        });
        p
    }

    fn node(cpu: &str, mem: &str) -> Node {
        Node {
            status: Some(NodeStatus {
                allocatable: list(&[("cpu", cpu), ("memory", mem), ("pods", "110")]),
                capacity: list(&[("cpu", cpu), ("memory", mem), ("pods", "110")]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn check(
        desired: &Pod,
        allocated: &Pod,
        others: &[Arc<Pod>],
        n: &Node,
    ) -> Result<(), PendingResize> {
        let n = NodeLimits {
            node: Some(n),
            max_pods: 110,
            policies: ExclusivePolicies::default(),
            swap: SwapConfig::default(),
        };
        can_resize_pod(desired, allocated, others, &n)
    }

    #[test]
    fn more_than_allocatable_is_infeasible_with_upstreams_message() {
        let n = node("2", "4Gi");
        let was = pod("a", &[("cpu", "100m")], &[("cpu", "200m")]);
        let want = pod("a", &[("cpu", "500")], &[("cpu", "500")]);
        let e = check(&want, &was, &[], &n).unwrap_err();
        assert_eq!(e.reason, PendingReason::Infeasible);
        assert_eq!(
            e.message,
            "Node didn't have enough capacity: cpu, requested: 500000, capacity: 2000"
        );
        // Memory is named first when both are short, as upstream does.
        let want = pod("a", &[("cpu", "500"), ("memory", "8Gi")], &[]);
        let e = check(&want, &was, &[], &n).unwrap_err();
        assert!(
            e.message
                .starts_with("Node didn't have enough capacity: memory, requested: 8589934592"),
            "{}",
            e.message
        );
    }

    #[test]
    fn what_fits_only_without_another_pod_is_deferred() {
        let n = node("2", "4Gi");
        let other = Arc::new(pod("b", &[("cpu", "1500m")], &[]));
        let was = pod("a", &[("cpu", "100m")], &[]);
        let want = pod("a", &[("cpu", "1")], &[]);
        let e = check(&want, &was, &[Arc::clone(&other)], &n).unwrap_err();
        assert_eq!(e.reason, PendingReason::Deferred);
        assert!(e.message.contains("cpu"), "{}", e.message);
        // The pod's own old allocation never counts against it.
        let me = Arc::new(was.clone());
        assert!(check(&want, &was, &[me], &n).is_ok());
        assert!(check(&pod("a", &[("cpu", "400m")], &[]), &was, &[other], &n).is_ok());
    }

    #[test]
    fn static_cpu_manager_refuses_a_guaranteed_cpu_change_only() {
        let n = node("8", "4Gi");
        let was = pod(
            "a",
            &[("cpu", "1"), ("memory", "1Gi")],
            &[("cpu", "1"), ("memory", "1Gi")],
        );
        let more_cpu = pod(
            "a",
            &[("cpu", "2"), ("memory", "1Gi")],
            &[("cpu", "2"), ("memory", "1Gi")],
        );
        let more_mem = pod(
            "a",
            &[("cpu", "1"), ("memory", "2Gi")],
            &[("cpu", "1"), ("memory", "2Gi")],
        );
        let policies = ExclusivePolicies {
            cpu_static: true,
            memory_static: false,
        };
        let at = NodeLimits {
            node: Some(&n),
            max_pods: 110,
            policies,
            swap: SwapConfig::default(),
        };
        let e = can_resize_pod(&more_cpu, &was, &[], &at).unwrap_err();
        assert_eq!(
            e.message,
            "Resize is infeasible for Guaranteed Pods alongside CPU Manager policy \"static\""
        );
        assert!(can_resize_pod(&more_mem, &was, &[], &at).is_ok());
    }

    #[test]
    fn a_swapping_containers_memory_is_not_resized_in_place() {
        use crate::kuberuntime::swap::SwapController;
        let n = node("8", "40Gi");
        let was = pod("a", &[("memory", "1Gi")], &[("memory", "2Gi")]);
        let want = pod("a", &[("memory", "2Gi")], &[("memory", "3Gi")]);
        let swap = SwapConfig {
            behavior: SwapBehavior::LimitedSwap,
            controller: SwapController::V2,
            memory_capacity: 40 << 30,
            swap_capacity: 4 << 30,
        };
        let at = NodeLimits {
            node: Some(&n),
            max_pods: 110,
            policies: ExclusivePolicies::default(),
            swap,
        };
        let e = can_resize_pod(&want, &was, &[], &at).unwrap_err();
        assert_eq!(e.reason, PendingReason::Infeasible);
        assert_eq!(
            e.message,
            "In-place resize of containers with swap is not supported."
        );
        // Without swap, or when only CPU changes, it is allowed.
        assert!(check(&want, &was, &[], &n).is_ok());
        let cpu_only = pod(
            "a",
            &[("memory", "1Gi"), ("cpu", "1")],
            &[("memory", "2Gi")],
        );
        assert!(can_resize_pod(&cpu_only, &was, &[], &at).is_ok());
    }
}
