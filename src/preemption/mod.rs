//! Admission of critical pods (upstream `pkg/kubelet/preemption`): a
//! critical pod that fails admission only for want of resources is not
//! refused outright; upstream evicts lower-priority pods to make room.
//!
//! rkubelet computes upstream's first step, whether the pods it could
//! preempt hold enough of every missing resource at all, and refuses with
//! upstream's `UnexpectedAdmissionError` when they do not (hugepages on a
//! node without any, say). It does not evict pods to admit one: where
//! upstream would, the pod is refused with the resource's `OutOf<name>`
//! reason instead (docs/deviations.md).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::eviction::rank::{is_critical_pod, priority};
use crate::lifecycle::fit::{request_units, InsufficientResource};

/// One resource still missing after preempting: (name, quantity).
type Requirement = (String, i128);

/// upstream kubelettypes.Preemptable: a critical pod may preempt any
/// non-critical one; otherwise only a higher priority preempts.
fn preemptable(preemptor: &Pod, preemptee: &Pod) -> bool {
    if is_critical_pod(preemptor) && !is_critical_pod(preemptee) {
        return true;
    }
    let set = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority).is_some();
    set(preemptor) && set(preemptee) && priority(preemptor) > priority(preemptee)
}

/// What would still be missing if every pod `pod` may preempt were gone
/// (upstream admissionRequirementList.subtract over all of them).
fn unmet_after_preempting_all(
    pod: &Pod,
    active: &[Arc<Pod>],
    missing: &[InsufficientResource],
) -> Vec<Requirement> {
    let victims: Vec<&Pod> = active
        .iter()
        .map(|p| p.as_ref())
        .filter(|p| preemptable(pod, p))
        .collect();
    missing
        .iter()
        .map(|r| {
            let freed: i128 = victims.iter().map(|v| request_units(v, &r.name)).sum();
            (r.name.clone(), r.shortfall() - freed)
        })
        .filter(|(_, left)| *left > 0)
        .collect()
}

/// upstream admissionRequirementList.toString.
fn requirements_string(reqs: &[Requirement]) -> String {
    let inner: String = reqs
        .iter()
        .map(|(name, q)| format!("(res: {name}, q: {q}), "))
        .collect();
    format!("[{inner}]")
}

/// For a critical pod that lacks only resources: upstream's
/// UnexpectedAdmissionError message when no set of running pods could free
/// them; None when preempting could (which rkubelet does not do).
pub fn unrecoverable(
    pod: &Pod,
    active: &[Arc<Pod>],
    missing: &[InsufficientResource],
) -> Option<String> {
    let unmet = unmet_after_preempting_all(pod, active, missing);
    (!unmet.is_empty()).then(|| {
        format!(
            "Unexpected error while attempting to recover from admission failure: \
             preemption: error finding a set of pods to preempt: \
             no set of running pods found to reclaim resources: {}",
            requirements_string(&unmet)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(priority: i32, requests: &[(&str, &str)]) -> Pod {
        let mut p = crate::lifecycle::fit::test_pod(requests);
        if let Some(spec) = p.spec.as_mut() {
            spec.priority = Some(priority);
        }
        p
    }

    fn missing(name: &str, requested: i128, used: i128, capacity: i128) -> InsufficientResource {
        InsufficientResource {
            name: name.into(),
            requested,
            used,
            capacity,
        }
    }

    const CRITICAL: i32 = 2_000_001_000;

    /// The fidelity capture's `sched-bits`, word for word.
    #[test]
    fn hugepages_nobody_holds_give_upstreams_message() {
        let critical = pod(CRITICAL, &[("hugepages-2Mi", "2Mi")]);
        let others = vec![Arc::new(pod(0, &[("cpu", "1")]))];
        let msg = unrecoverable(
            &critical,
            &others,
            &[missing("hugepages-2Mi", 2 << 20, 0, 0)],
        );
        assert_eq!(
            msg.as_deref(),
            Some(
                "Unexpected error while attempting to recover from admission failure: \
                 preemption: error finding a set of pods to preempt: no set of running pods \
                 found to reclaim resources: [(res: hugepages-2Mi, q: 2097152), ]"
            )
        );
    }

    #[test]
    fn only_lower_priority_or_non_critical_pods_count() {
        let critical = pod(CRITICAL, &[("cpu", "1")]);
        let short = [missing("cpu", 1000, 2000, 2000)];
        let peer = vec![Arc::new(pod(CRITICAL, &[("cpu", "2")]))];
        assert!(unrecoverable(&critical, &peer, &short).is_some());
        let victim = vec![Arc::new(pod(0, &[("cpu", "2")]))];
        assert_eq!(unrecoverable(&critical, &victim, &short), None);
        let partial = vec![Arc::new(pod(0, &[("cpu", "400m")]))];
        let msg = unrecoverable(&critical, &partial, &short).unwrap();
        assert!(msg.ends_with("[(res: cpu, q: 600), ]"), "{msg}");
    }
}
