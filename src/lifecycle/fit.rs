//! The scheduler's resource fit as the kubelet runs it at admission
//! (upstream `noderesources.Fits` behind `lifecycle/predicate.go`): the pod
//! count, then cpu, memory and ephemeral-storage, then every other resource
//! the pod requests (hugepages, extended resources). Every shortfall is
//! reported, not only the first, because a critical pod's admission looks
//! at all of them (`crate::preemption`).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use super::admission::pod_request;
use crate::podutil::PodExt;
use crate::util::quantity::parse_quantity;

/// upstream InsufficientResourceError, in the resource's own units (cpu in
/// millicores, everything else in whole units), as its message prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsufficientResource {
    pub name: String,
    pub requested: i128,
    pub used: i128,
    pub capacity: i128,
}

impl InsufficientResource {
    /// upstream GetInsufficientAmount: what is missing for the pod to fit.
    pub fn shortfall(&self) -> i128 {
        self.requested - (self.capacity - self.used)
    }

    /// upstream's reason, `OutOf<resource>`.
    pub fn reason(&self) -> String {
        format!("OutOf{}", self.name)
    }

    pub fn message(&self) -> String {
        format!(
            "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}",
            self.name, self.requested, self.used, self.capacity
        )
    }
}

/// A pod's request of `name` in the resource's own units (upstream
/// GetResourceRequest: pods count 1, cpu in millicores).
pub fn request_units(pod: &Pod, name: &str) -> i128 {
    match name {
        "pods" => 1,
        _ => to_units(name, pod_request(pod, name)),
    }
}

/// Thousandths to the resource's own units, rounding up as Quantity.Value.
fn to_units(name: &str, milli: i128) -> i128 {
    if name == "cpu" {
        milli
    } else {
        milli.div_euclid(1000) + i128::from(milli.rem_euclid(1000) > 0)
    }
}

/// Every resource the pod lacks on `node`, given the pods already admitted
/// (upstream fitsRequest). `max_pods` counts when the node has no `pods`
/// allocatable.
pub fn insufficient_resources(
    pod: &Pod,
    active: &[Arc<Pod>],
    node: &Node,
    max_pods: i64,
) -> Vec<InsufficientResource> {
    let mut out = Vec::new();
    let pod_capacity = allocatable_units(node, "pods").unwrap_or(i128::from(max_pods));
    let pods_used = active.len() as i128;
    if pods_used + 1 > pod_capacity {
        out.push(InsufficientResource {
            name: "pods".into(),
            requested: 1,
            used: pods_used,
            capacity: pod_capacity,
        });
    }
    for name in requested_resources(pod, node) {
        let requested = request_units(pod, &name);
        if requested == 0 {
            continue;
        }
        // A resource the node does not report has no room at all.
        let capacity = allocatable_units(node, &name).unwrap_or(0);
        let used: i128 = active.iter().map(|p| request_units(p, &name)).sum();
        if requested > capacity - used {
            out.push(InsufficientResource {
                name,
                requested,
                used,
                capacity,
            });
        }
    }
    out
}

/// cpu, memory and ephemeral-storage first, then the pod's other resources
/// in name order. An extended resource the node does not report at all is
/// left out (upstream removeMissingExtendedResources: its device plugin
/// may not have registered yet, and the scheduler already placed the pod).
fn requested_resources(pod: &Pod, node: &Node) -> Vec<String> {
    let native = ["cpu", "memory", "ephemeral-storage"];
    let others: BTreeSet<String> = pod
        .containers()
        .iter()
        .chain(pod.init_containers())
        .filter_map(|c| c.resources.as_ref())
        .flat_map(|r| r.requests.iter().flatten().chain(r.limits.iter().flatten()))
        .map(|(name, _)| name.clone())
        .filter(|name| !native.contains(&name.as_str()))
        .filter(|name| !is_extended_resource(name) || allocatable_units(node, name).is_some())
        .collect();
    native.iter().map(|n| n.to_string()).chain(others).collect()
}

/// upstream IsExtendedResourceName: a name with a domain outside
/// `kubernetes.io/` (hugepages-* and attachable-volumes-* are native).
pub fn is_extended_resource(name: &str) -> bool {
    match name.split_once('/') {
        Some((domain, _)) => {
            domain != "kubernetes.io"
                && !domain.ends_with(".kubernetes.io")
                && !name.starts_with("requests.")
        }
        None => false,
    }
}

fn allocatable_units(node: &Node, name: &str) -> Option<i128> {
    node.status
        .as_ref()?
        .allocatable
        .as_ref()?
        .get(name)
        .and_then(|q| parse_quantity(&q.0).ok())
        .map(|milli| to_units(name, milli))
}

/// A one-container pod requesting (and limited to) `requests`, for the
/// admission tests here and in `crate::preemption`.
#[cfg(test)]
pub(crate) fn test_pod(requests: &[(&str, &str)]) -> Pod {
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    Pod {
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some(tests::list(requests)),
                    limits: Some(tests::list(requests)),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeStatus;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    pub(super) fn list(v: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        v.iter()
            .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
            .collect()
    }

    fn node(alloc: &[(&str, &str)]) -> Node {
        Node {
            status: Some(NodeStatus {
                allocatable: Some(list(alloc)),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    use super::test_pod as pod;

    const NODE: &[(&str, &str)] = &[("cpu", "2"), ("memory", "1Gi"), ("pods", "110")];

    /// The fidelity capture's pod `sched-bits`: hugepages on a node with none.
    #[test]
    fn hugepages_on_a_node_without_them_do_not_fit() {
        let p = pod(&[("cpu", "100m"), ("memory", "1e3"), ("hugepages-2Mi", "2Mi")]);
        let got = insufficient_resources(&p, &[], &node(NODE), 110);
        assert_eq!(
            got,
            vec![InsufficientResource {
                name: "hugepages-2Mi".into(),
                requested: 2 << 20,
                used: 0,
                capacity: 0,
            }]
        );
        assert_eq!(got[0].reason(), "OutOfhugepages-2Mi");
        assert_eq!(
            got[0].message(),
            "Node didn't have enough resource: hugepages-2Mi, requested: 2097152, used: 0, capacity: 0"
        );
        assert_eq!(got[0].shortfall(), 2 << 20);
    }

    #[test]
    fn extended_resources_count_only_where_the_node_has_them() {
        let p = pod(&[("example.com/gpu", "1")]);
        assert!(insufficient_resources(&p, &[], &node(NODE), 110).is_empty());
        let mut with_gpu = NODE.to_vec();
        with_gpu.push(("example.com/gpu", "1"));
        let busy = vec![Arc::new(pod(&[("example.com/gpu", "1")]))];
        let got = insufficient_resources(&p, &busy, &node(&with_gpu), 110);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].reason(), "OutOfexample.com/gpu");
        assert_eq!((got[0].used, got[0].capacity), (1, 1));
    }

    #[test]
    fn every_shortfall_is_reported_in_order() {
        let p = pod(&[("cpu", "3"), ("memory", "2Gi"), ("hugepages-1Gi", "1Gi")]);
        let names: Vec<String> = insufficient_resources(&p, &[], &node(NODE), 110)
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(names, ["cpu", "memory", "hugepages-1Gi"]);
    }

    #[test]
    fn extended_resource_names() {
        assert!(is_extended_resource("example.com/gpu"));
        assert!(is_extended_resource("nvidia.com/gpu"));
        assert!(!is_extended_resource("hugepages-2Mi"));
        assert!(!is_extended_resource("kubernetes.io/batteries"));
        assert!(!is_extended_resource("cpu"));
    }
}
