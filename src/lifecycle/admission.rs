//! Pod admission (upstream `lifecycle/predicate.go` with the scheduler's
//! GeneralPredicates): a pod the node cannot run is rejected with phase
//! Failed and upstream's reason (OutOfcpu, OutOfmemory, OutOfpods,
//! NodeAffinity, NodePorts, ...), before any of its containers is created.
//! The eviction manager's rule (`crate::eviction::admit`: reason Evicted
//! under node pressure) runs first, as upstream registers it first.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Node, NodeSelectorRequirement, NodeSelectorTerm, Pod};

use super::fit;
use crate::eviction::rank::is_critical_pod;
use crate::podutil::PodExt;
use crate::util::quantity::parse_quantity;

/// Why a pod was rejected: (reason, message), as upstream reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// upstream lifecycle.UnexpectedAdmissionError: the reason when a resource
/// manager cannot place a pod's resources, or no preemption could.
pub const UNEXPECTED_ADMISSION_ERROR: &str = "UnexpectedAdmissionError";

/// upstream GetPodAdmitResult for an untyped allocation error: "Allocate
/// failed due to <cause>, which is unexpected".
pub fn unexpected_admission_error(cause: impl std::fmt::Display) -> Rejection {
    reject(
        UNEXPECTED_ADMISSION_ERROR,
        format!("Allocate failed due to {cause}, which is unexpected"),
    )
}

fn reject(reason: impl Into<String>, message: impl Into<String>) -> Rejection {
    Rejection {
        reason: reason.into(),
        message: message.into(),
    }
}

/// Checks `pod` against the node and the pods already admitted to it, in
/// upstream's order: the resource fit, node affinity, node name, host
/// ports; the first failure is the reason. Without a Node object
/// (standalone) only the pod count is checked.
pub fn admit(
    pod: &Pod,
    active: &[Arc<Pod>],
    node: Option<&Node>,
    max_pods: i64,
) -> Result<(), Rejection> {
    // What preemption cannot help goes first (upstream).
    check_os_label(pod, node)?;
    check_os_field(pod)?;
    check_supplemental_groups_policy(pod, node)?;
    let Some(node) = node else {
        return check_pod_count(active, max_pods);
    };
    let missing = fit::insufficient_resources(pod, active, node, max_pods);
    let predicates: Vec<Rejection> = [
        check_node_affinity(pod, node),
        check_node_name(pod, node),
        check_host_ports(pod, active),
        check_no_execute_taints(pod, node),
    ]
    .into_iter()
    .filter_map(Result::err)
    .collect();
    if missing.is_empty() && predicates.is_empty() {
        return Ok(());
    }
    // upstream CriticalPodAdmissionHandler: a critical pod is refused for
    // its other reasons only; for resources alone, when no preemption could
    // make room.
    if is_critical_pod(pod) {
        if let Some(r) = predicates.first() {
            return Err(r.clone());
        }
        if let Some(message) = crate::preemption::unrecoverable(pod, active, &missing) {
            return Err(reject(UNEXPECTED_ADMISSION_ERROR, message));
        }
        log::warn!(
            "pod {}: critical, and preempting other pods could admit it; rkubelet does not preempt",
            pod.full_name()
        );
    }
    match missing.first() {
        Some(r) => Err(reject(r.reason(), r.message())),
        None => Err(predicates[0].clone()),
    }
}

/// upstream rejectPodAdmissionBasedOnSupplementalGroupsPolicy: `Strict`
/// (no groups from the image's /etc/group) only on a node whose
/// `status.features` says its runtime can do it; without a node (no API
/// server), or without the field, it cannot. The kubelet hands in the node
/// with its own runtime's answer there (`Kubelet::node_for_admission`),
/// so a value another kubelet left behind is never trusted.
fn check_supplemental_groups_policy(pod: &Pod, node: Option<&Node>) -> Result<(), Rejection> {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|sc| sc.supplemental_groups_policy.as_deref());
    let supported = node
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.features.as_ref())
        .and_then(|f| f.supplemental_groups_policy)
        .unwrap_or(false);
    if policy != Some(STRICT) || supported {
        return Ok(());
    }
    Err(reject(
        SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED,
        format!("SupplementalGroupsPolicy={STRICT} is not supported in this node"),
    ))
}

const STRICT: &str = "Strict";
const SUPPLEMENTAL_GROUPS_POLICY_NOT_SUPPORTED: &str = "SupplementalGroupsPolicyNotSupported";

/// The operating system this kubelet runs pods on (Go's runtime.GOOS).
const NODE_OS: &str = std::env::consts::OS;
/// v1.LabelOSStable.
const OS_LABEL: &str = "kubernetes.io/os";

/// upstream rejectPodAdmissionBasedOnOSSelector: a pod labelled
/// `kubernetes.io/os` for another OS than the node's label (or, without
/// one, the node's own OS).
fn check_os_label(pod: &Pod, node: Option<&Node>) -> Result<(), Rejection> {
    let Some(wanted) = pod.metadata.labels.as_ref().and_then(|l| l.get(OS_LABEL)) else {
        return Ok(());
    };
    let node_os = node
        .and_then(|n| n.metadata.labels.as_ref())
        .and_then(|l| l.get(OS_LABEL))
        .filter(|os| os.as_str() == NODE_OS)
        .map_or(NODE_OS, String::as_str);
    if wanted == node_os {
        return Ok(());
    }
    Err(reject(
        "PodOSSelectorNodeLabelDoesNotMatch",
        "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
    ))
}

/// upstream rejectPodAdmissionBasedOnOSField: `spec.os.name` names
/// another OS than the node's.
fn check_os_field(pod: &Pod) -> Result<(), Rejection> {
    match pod.spec_or_default().os.as_ref() {
        Some(os) if os.name != NODE_OS => Err(reject(
            "PodOSNotSupported",
            "Failed to admit pod as the OS field doesn't match node OS",
        )),
        _ => Ok(()),
    }
}

/// The pod count alone, against maxPods (standalone: no Node object).
fn check_pod_count(active: &[Arc<Pod>], max_pods: i64) -> Result<(), Rejection> {
    let over = fit::InsufficientResource {
        name: "pods".into(),
        requested: 1,
        used: active.len() as i128,
        capacity: i128::from(max_pods),
    };
    if over.shortfall() <= 0 {
        return Ok(());
    }
    Err(reject(over.reason(), over.message()))
}

fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or("")
}

fn check_node_name(pod: &Pod, node: &Node) -> Result<(), Rejection> {
    match pod.spec_or_default().node_name.as_deref() {
        Some(n) if !n.is_empty() && n != node_name(node) => Err(reject(
            "NodeName",
            format!(
                "Predicate NodeName failed: pod is bound to node {n:?}, this is {:?}",
                node_name(node)
            ),
        )),
        _ => Ok(()),
    }
}

/// upstream generalFilter's TaintToleration check: a NoExecute taint the
/// pod does not tolerate keeps it off the node (static pods excepted).
fn check_no_execute_taints(pod: &Pod, node: &Node) -> Result<(), Rejection> {
    if crate::types::is_static_pod(pod) {
        return Ok(());
    }
    let tolerations = pod.spec_or_default().tolerations.as_deref().unwrap_or(&[]);
    let untolerated = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|t| t.effect == "NoExecute")
        .any(|t| !tolerations.iter().any(|tol| tolerates(tol, t)));
    if untolerated {
        return Err(reject(
            "TaintToleration",
            "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
        ));
    }
    Ok(())
}

/// upstream Toleration.ToleratesTaint.
fn tolerates(
    tol: &k8s_openapi::api::core::v1::Toleration,
    taint: &k8s_openapi::api::core::v1::Taint,
) -> bool {
    let effect = tol.effect.as_deref().unwrap_or("");
    let key = tol.key.as_deref().unwrap_or("");
    if (!effect.is_empty() && effect != taint.effect) || (!key.is_empty() && key != taint.key) {
        return false;
    }
    match tol.operator.as_deref().unwrap_or("") {
        "" | "Equal" => tol.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        "Exists" => true,
        _ => false,
    }
}

fn check_node_affinity(pod: &Pod, node: &Node) -> Result<(), Rejection> {
    let empty = BTreeMap::new();
    let labels = node.metadata.labels.as_ref().unwrap_or(&empty);
    let spec = pod.spec_or_default();
    let selector_ok = spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    let terms = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|s| s.node_selector_terms.as_slice());
    // Terms are ORed; an empty list of terms matches nothing (upstream).
    let affinity_ok =
        terms.is_none_or(|ts| ts.iter().any(|t| term_matches(t, labels, node_name(node))));
    if selector_ok && affinity_ok {
        Ok(())
    } else {
        Err(reject(
            "NodeAffinity",
            "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
        ))
    }
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or(&[]);
    let fields = term.match_fields.as_deref().unwrap_or(&[]);
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    let name_labels = BTreeMap::from([("metadata.name".to_string(), name.to_string())]);
    exprs.iter().all(|r| requirement_matches(r, labels))
        && fields.iter().all(|r| requirement_matches(r, &name_labels))
}

fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&r.key);
    let values = r.values.as_deref().unwrap_or(&[]);
    let as_int = |s: &str| s.parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| as_int(v)),
                values.first().and_then(|b| as_int(b)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// (protocol, hostIP, hostPort) of every host port a pod asks for.
fn host_ports(pod: &Pod) -> Vec<(String, String, i32)> {
    pod.containers()
        .iter()
        .chain(pod.init_containers())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let hp = p.host_port.filter(|hp| *hp > 0)?;
            let ip = p
                .host_ip
                .clone()
                .filter(|ip| !ip.is_empty())
                .unwrap_or_else(|| "0.0.0.0".into());
            Some((p.protocol.clone().unwrap_or_else(|| "TCP".into()), ip, hp))
        })
        .collect()
}

fn check_host_ports(pod: &Pod, active: &[Arc<Pod>]) -> Result<(), Rejection> {
    let used: HashSet<(String, String, i32)> = active.iter().flat_map(|p| host_ports(p)).collect();
    for (proto, ip, port) in host_ports(pod) {
        let clash = used.iter().any(|(p, i, hp)| {
            *p == proto && *hp == port && (i == &ip || i == "0.0.0.0" || ip == "0.0.0.0")
        });
        if clash {
            return Err(reject(
                "NodePorts",
                format!("Predicate NodePorts failed: node(s) didn't have free ports for the requested pod ports ({proto}/{port})"),
            ));
        }
    }
    Ok(())
}

fn container_request(c: &Container, name: &str) -> i128 {
    let res = c.resources.as_ref();
    let q = res
        .and_then(|r| r.requests.as_ref())
        .and_then(|m| m.get(name))
        .or_else(|| {
            res.and_then(|r| r.limits.as_ref())
                .and_then(|m| m.get(name))
        });
    q.and_then(|q| parse_quantity(&q.0).ok()).unwrap_or(0)
}

/// The pod's effective request: the larger of its app containers' sum and
/// its largest init container, plus overhead (upstream PodRequests).
pub fn pod_request(pod: &Pod, name: &str) -> i128 {
    let apps: i128 = pod
        .containers()
        .iter()
        .map(|c| container_request(c, name))
        .sum();
    let init = pod
        .init_containers()
        .iter()
        .map(|c| container_request(c, name))
        .max()
        .unwrap_or(0);
    // Pod-level resources replace the containers' (PodLevelResources).
    let pod_level = crate::cm::helpers::pod_level(pod, false);
    let apps = pod_level.get(name).copied().unwrap_or(apps);
    let init = if pod_level.contains_key(name) {
        0
    } else {
        init
    };
    let overhead = pod
        .spec_or_default()
        .overhead
        .as_ref()
        .and_then(|o| o.get(name))
        .and_then(|q| parse_quantity(&q.0).ok())
        .unwrap_or(0);
    apps.max(init) + overhead
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Affinity, ContainerPort, NodeAffinity, NodeSelector, NodeStatus, PodSpec,
        ResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn node(labels: &[(&str, &str)], alloc: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some("node1".into());
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n.status = Some(NodeStatus {
            allocatable: Some(
                alloc
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect(),
            ),
            ..Default::default()
        });
        n
    }

    fn pod(cpu: Option<&str>, mem: Option<&str>) -> Pod {
        let mut requests = BTreeMap::new();
        if let Some(c) = cpu {
            requests.insert("cpu".to_string(), Quantity(c.into()));
        }
        if let Some(m) = mem {
            requests.insert("memory".to_string(), Quantity(m.into()));
        }
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "a".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some(requests),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn n1() -> Node {
        node(
            &[("disk", "ssd"), ("zone", "a")],
            &[("cpu", "2"), ("memory", "1Gi"), ("pods", "3")],
        )
    }

    #[test]
    fn another_os_is_refused_before_resources() {
        let mut p = crate::lifecycle::fit::test_pod(&[("cpu", "500")]);
        if let Some(spec) = p.spec.as_mut() {
            spec.os = Some(k8s_openapi::api::core::v1::PodOS {
                name: "windows".into(),
            });
        }
        let r = admit(&p, &[], None, 110).unwrap_err();
        assert_eq!(r.reason, "PodOSNotSupported");
        assert_eq!(
            r.message,
            "Failed to admit pod as the OS field doesn't match node OS"
        );
        if let Some(spec) = p.spec.as_mut() {
            spec.os = Some(k8s_openapi::api::core::v1::PodOS {
                name: "linux".into(),
            });
        }
        p.metadata.labels = Some(BTreeMap::from([(
            OS_LABEL.to_string(),
            "windows".to_string(),
        )]));
        let r = admit(&p, &[], None, 110).unwrap_err();
        assert_eq!(r.reason, "PodOSSelectorNodeLabelDoesNotMatch");
        p.metadata.labels = Some(BTreeMap::from([(
            OS_LABEL.to_string(),
            "linux".to_string(),
        )]));
        assert!(admit(&p, &[], None, 110).is_ok());
    }

    #[test]
    fn strict_supplemental_groups_need_the_nodes_feature() {
        let with = |policy: &str| {
            let mut p = pod(Some("100m"), None);
            if let Some(spec) = p.spec.as_mut() {
                spec.security_context = Some(k8s_openapi::api::core::v1::PodSecurityContext {
                    supplemental_groups_policy: Some(policy.into()),
                    ..Default::default()
                });
            }
            p
        };
        let r = admit(&with("Strict"), &[], Some(&n1()), 110).unwrap_err();
        assert_eq!(r.reason, "SupplementalGroupsPolicyNotSupported");
        assert_eq!(
            r.message,
            "SupplementalGroupsPolicy=Strict is not supported in this node"
        );
        assert!(admit(&with("Strict"), &[], None, 110).is_err());
        assert!(admit(&with("Merge"), &[], Some(&n1()), 110).is_ok());
        let features = |supported: bool| {
            let mut n = n1();
            if let Some(st) = n.status.as_mut() {
                st.features = Some(k8s_openapi::api::core::v1::NodeFeatures {
                    supplemental_groups_policy: Some(supported),
                });
            }
            n
        };
        assert!(admit(&with("Strict"), &[], Some(&features(false)), 110).is_err());
        assert!(admit(&with("Strict"), &[], Some(&features(true)), 110).is_ok());
    }

    #[test]
    fn an_untolerated_no_execute_taint_rejects_all_but_static_pods() {
        use k8s_openapi::api::core::v1::{NodeSpec, Taint, Toleration};
        let mut n = n1();
        n.spec = Some(NodeSpec {
            taints: Some(vec![
                Taint {
                    key: "dedicated".into(),
                    value: Some("gpu".into()),
                    effect: "NoExecute".into(),
                    ..Default::default()
                },
                Taint {
                    key: "other".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        });
        let r = admit(&pod(Some("100m"), None), &[], Some(&n), 110).unwrap_err();
        assert_eq!(r.reason, "TaintToleration");
        assert_eq!(
            r.message,
            "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
        );
        let with = |tol: Toleration| {
            let mut p = pod(Some("100m"), None);
            if let Some(s) = p.spec.as_mut() {
                s.tolerations = Some(vec![tol]);
            }
            p
        };
        let equal = Toleration {
            key: Some("dedicated".into()),
            value: Some("gpu".into()),
            ..Default::default()
        };
        assert!(admit(&with(equal), &[], Some(&n), 110).is_ok());
        let exists = Toleration {
            operator: Some("Exists".into()),
            ..Default::default()
        };
        assert!(admit(&with(exists), &[], Some(&n), 110).is_ok());
        let wrong_value = Toleration {
            key: Some("dedicated".into()),
            value: Some("cpu".into()),
            ..Default::default()
        };
        assert!(admit(&with(wrong_value), &[], Some(&n), 110).is_err());
        let mut static_pod = pod(Some("100m"), None);
        static_pod.metadata.annotations = Some(BTreeMap::from([(
            "kubernetes.io/config.source".to_string(),
            "file".to_string(),
        )]));
        assert!(admit(&static_pod, &[], Some(&n), 110).is_ok());
    }

    #[test]
    fn resources_fit_or_name_the_resource() {
        let active = vec![Arc::new(pod(Some("1500m"), None))];
        assert!(admit(&pod(Some("500m"), None), &active, Some(&n1()), 110).is_ok());
        let r = admit(&pod(Some("600m"), None), &active, Some(&n1()), 110).unwrap_err();
        assert_eq!(r.reason, "OutOfcpu");
        assert!(
            r.message
                .contains("requested: 600, used: 1500, capacity: 2000"),
            "{}",
            r.message
        );
        let r = admit(&pod(None, Some("2Gi")), &[], Some(&n1()), 110).unwrap_err();
        assert_eq!(r.reason, "OutOfmemory");
    }

    /// The fidelity capture's `sched-bits`: a system-node-critical pod
    /// asking for hugepages the node lacks is refused as upstream refused
    /// it; an ordinary pod gets the resource's OutOf reason.
    #[test]
    fn hugepages_the_node_lacks_are_refused() {
        let mut p = pod(Some("100m"), Some("1e3"));
        let c = &mut p.spec.as_mut().unwrap().containers[0];
        c.resources
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap()
            .insert("hugepages-2Mi".into(), Quantity("2Mi".into()));
        let r = admit(&p, &[], Some(&n1()), 110).unwrap_err();
        assert_eq!(r.reason, "OutOfhugepages-2Mi");
        p.spec.as_mut().unwrap().priority = Some(2_000_001_000);
        let r = admit(&p, &[], Some(&n1()), 110).unwrap_err();
        assert_eq!(r.reason, "UnexpectedAdmissionError");
        assert!(
            r.message
                .ends_with("no set of running pods found to reclaim resources: [(res: hugepages-2Mi, q: 2097152), ]"),
            "{}",
            r.message
        );
    }

    #[test]
    fn pod_count_from_node_or_max_pods() {
        let three: Vec<_> = (0..3).map(|_| Arc::new(pod(None, None))).collect();
        assert_eq!(
            admit(&pod(None, None), &three, Some(&n1()), 110)
                .unwrap_err()
                .reason,
            "OutOfpods"
        );
        assert_eq!(
            admit(&pod(None, None), &three, None, 3).unwrap_err().reason,
            "OutOfpods"
        );
        assert!(admit(&pod(None, None), &three, None, 4).is_ok());
    }

    #[test]
    fn node_selector_and_affinity() {
        let mut p = pod(None, None);
        p.spec.as_mut().unwrap().node_selector =
            Some(BTreeMap::from([("disk".into(), "ssd".into())]));
        assert!(admit(&p, &[], Some(&n1()), 110).is_ok());
        p.spec.as_mut().unwrap().node_selector =
            Some(BTreeMap::from([("disk".into(), "hdd".into())]));
        assert_eq!(
            admit(&p, &[], Some(&n1()), 110).unwrap_err().reason,
            "NodeAffinity"
        );

        let mut a = pod(None, None);
        let req = |key: &str, op: &str, vals: &[&str]| NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(vals.iter().map(|v| v.to_string()).collect()),
        };
        let term = |exprs: Vec<NodeSelectorRequirement>| NodeSelectorTerm {
            match_expressions: Some(exprs),
            match_fields: None,
        };
        a.spec.as_mut().unwrap().affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![
                        term(vec![req("zone", "In", &["b"])]),
                        term(vec![
                            req("zone", "NotIn", &["c"]),
                            req("disk", "Exists", &[]),
                        ]),
                    ],
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(
            admit(&a, &[], Some(&n1()), 110).is_ok(),
            "second term matches"
        );
    }

    #[test]
    fn host_port_conflicts() {
        let with_port = |hp: i32, ip: Option<&str>| {
            let mut p = pod(None, None);
            p.spec.as_mut().unwrap().containers[0].ports = Some(vec![ContainerPort {
                container_port: 80,
                host_port: Some(hp),
                host_ip: ip.map(str::to_string),
                ..Default::default()
            }]);
            p
        };
        let active = vec![Arc::new(with_port(8080, None))];
        assert_eq!(
            admit(
                &with_port(8080, Some("127.0.0.1")),
                &active,
                Some(&n1()),
                110
            )
            .unwrap_err()
            .reason,
            "NodePorts"
        );
        assert!(admit(&with_port(8081, None), &active, Some(&n1()), 110).is_ok());
    }

    #[test]
    fn init_containers_count_by_their_maximum() {
        let mut p = pod(Some("100m"), None);
        p.spec.as_mut().unwrap().init_containers =
            Some(vec![
                pod(Some("1"), None).spec.unwrap().containers[0].clone()
            ]);
        assert_eq!(pod_request(&p, "cpu"), 1000);
    }
}
