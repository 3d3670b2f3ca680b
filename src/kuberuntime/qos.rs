//! QoS class and OOM score (upstream `pkg/apis/core/v1/helper/qos` and
//! `pkg/kubelet/qos/policy.go`).

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::podutil::PodExt;
use crate::util::quantity;

const GUARANTEED_OOM_SCORE_ADJ: i32 = -997;
const BEST_EFFORT_OOM_SCORE_ADJ: i32 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// Guaranteed: every container sets cpu and memory limits equal to its
/// requests. BestEffort: nobody sets any. Burstable otherwise.
pub fn qos_class(pod: &Pod) -> QosClass {
    // Upstream: whenever the pod has `spec.resources`, even empty.
    if pod.spec.as_ref().is_some_and(|s| s.resources.is_some()) {
        let requests = crate::cm::helpers::pod_level(pod, false);
        return pod_level_qos_class(&requests, &crate::cm::helpers::pod_level(pod, true));
    }
    // Upstream ComputePodQOS: requests and limits summed over all
    // containers (zero and unparsable values ignored); Guaranteed when
    // every container limits both cpu and memory and the sums match.
    let mut requests: [Option<i128>; 2] = [None; 2];
    let mut limits: [Option<i128>; 2] = [None; 2];
    let mut guaranteed = true;
    let positive = |list: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
                    name: &str| {
        list.and_then(|l| l.get(name))
            .and_then(|q| quantity::parse_quantity(&q.0).ok())
            .filter(|v| *v > 0)
    };
    for c in pod.containers().iter().chain(pod.init_containers()) {
        let res = c.resources.as_ref();
        let (lim, req) = (
            res.and_then(|r| r.limits.as_ref()),
            res.and_then(|r| r.requests.as_ref()),
        );
        let mut limited = 0;
        for (i, name) in ["cpu", "memory"].into_iter().enumerate() {
            let limit = positive(lim, name);
            // The API server defaults a missing request to the limit; a
            // static pod is not defaulted, so do it here.
            let request = if req.and_then(|r| r.get(name)).is_some() {
                positive(req, name)
            } else {
                limit
            };
            if let Some(v) = request {
                requests[i] = Some(requests[i].unwrap_or(0) + v);
            }
            if let Some(v) = limit {
                limits[i] = Some(limits[i].unwrap_or(0) + v);
                limited += 1;
            }
        }
        if limited < 2 {
            guaranteed = false;
        }
    }
    if requests.iter().chain(&limits).all(Option::is_none) {
        return QosClass::BestEffort;
    }
    let same = requests
        .iter()
        .zip(&limits)
        .all(|(r, l)| r.is_none() || r == l);
    let count = |v: &[Option<i128>; 2]| v.iter().filter(|x| x.is_some()).count();
    if guaranteed && same && count(&requests) == count(&limits) {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// Upstream ComputePodQOS when pod-level resources are set: the pod's own
/// CPU and memory requests and limits decide, the containers' do not.
fn pod_level_qos_class(
    requests: &std::collections::BTreeMap<String, i128>,
    limits: &std::collections::BTreeMap<String, i128>,
) -> QosClass {
    let positive = |m: &std::collections::BTreeMap<String, i128>, k: &str| {
        m.get(k).copied().filter(|v| *v > 0)
    };
    let pairs: Vec<(Option<i128>, Option<i128>)> = ["cpu", "memory"]
        .into_iter()
        .map(|k| (positive(requests, k), positive(limits, k)))
        .collect();
    if pairs.iter().all(|(r, l)| r.is_none() && l.is_none()) {
        return QosClass::BestEffort;
    }
    if pairs.iter().all(|(r, l)| l.is_some() && r == l) {
        QosClass::Guaranteed
    } else {
        QosClass::Burstable
    }
}

/// The container's oom_score_adj: Guaranteed pods are killed last,
/// BestEffort first, Burstable by memory request share of the machine.
pub fn oom_score_adj(pod: &Pod, container: &Container, machine_memory: u64) -> i32 {
    match qos_class(pod) {
        QosClass::Guaranteed => GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {
            let request = container
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("memory"))
                .and_then(|q| quantity::parse_quantity_value(&q.0).ok())
                .unwrap_or(0)
                .max(0) as u128;
            let capacity = u128::from(machine_memory.max(1));
            let adj = 1000 - (1000 * request / capacity) as i64;
            adj.clamp(2, 999) as i32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use std::collections::BTreeMap;

    fn pod_with(limits: &[(&str, &str)], requests: &[(&str, &str)]) -> Pod {
        let map = |v: &[(&str, &str)]| {
            (!v.is_empty()).then(|| {
                v.iter()
                    .map(|(k, q)| (k.to_string(), Quantity(q.to_string())))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "a".into(),
                    resources: Some(ResourceRequirements {
                        limits: map(limits),
                        requests: map(requests),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn classes() {
        assert_eq!(qos_class(&pod_with(&[], &[])), QosClass::BestEffort);
        let g = pod_with(&[("cpu", "1"), ("memory", "1Gi")], &[]);
        assert_eq!(qos_class(&g), QosClass::Guaranteed);
        let b = pod_with(&[("memory", "1Gi")], &[("memory", "512Mi")]);
        assert_eq!(qos_class(&b), QosClass::Burstable);
    }

    #[test]
    fn oom_scores() {
        let gib = 1u64 << 30;
        let g = pod_with(&[("cpu", "1"), ("memory", "1Gi")], &[]);
        assert_eq!(oom_score_adj(&g, &g.containers()[0], 8 * gib), -997);
        let be = pod_with(&[], &[]);
        assert_eq!(oom_score_adj(&be, &be.containers()[0], 8 * gib), 1000);
        let b = pod_with(&[], &[("memory", "4Gi")]);
        assert_eq!(oom_score_adj(&b, &b.containers()[0], 8 * gib), 500);
    }

    fn two(a: Pod, b: Pod) -> Pod {
        let mut p = a;
        let c = b.spec.unwrap().containers.remove(0);
        p.spec.as_mut().unwrap().containers.push(c);
        p
    }

    /// Upstream TestComputePodQOS's shapes: sums over containers, limits
    /// defaulting requests, zero quantities ignored.
    #[test]
    fn upstream_cases() {
        let full = || pod_with(&[("cpu", "100m"), ("memory", "100Mi")], &[]);
        let cases = [
            (two(full(), full()), QosClass::Guaranteed),
            (
                two(full(), pod_with(&[("cpu", "100m")], &[("cpu", "100m")])),
                QosClass::Burstable,
            ),
            (
                pod_with(&[("cpu", "100m"), ("memory", "100Mi")], &[("cpu", "50m")]),
                QosClass::Burstable,
            ),
            (
                pod_with(&[], &[("cpu", "0"), ("memory", "0")]),
                QosClass::BestEffort,
            ),
            (
                pod_with(&[("cpu", "1"), ("memory", "1Gi")], &[("cpu", "0")]),
                QosClass::Burstable,
            ),
            (pod_with(&[], &[("memory", "1Gi")]), QosClass::Burstable),
            // Extended resources do not count.
            (
                pod_with(&[("nvidia.com/gpu", "1")], &[]),
                QosClass::BestEffort,
            ),
        ];
        for (i, (p, want)) in cases.into_iter().enumerate() {
            assert_eq!(qos_class(&p), want, "case {i}");
        }
    }
}
