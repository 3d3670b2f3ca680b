//! What an in-place resize puts in the pod's status (upstream v1.34
//! status manager's PodResizePending / PodResizeInProgress conditions,
//! and convertToAPIContainerStatuses' `resources` and
//! `allocatedResources`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as api;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::generate::{Actuated, ResizeState};

pub const POD_RESIZE_PENDING: &str = "PodResizePending";
pub const POD_RESIZE_IN_PROGRESS: &str = "PodResizeInProgress";

/// The resize conditions the pod carries now. Each keeps the probe time it
/// got when it began, as long as it says the same (the v1.34 capture's
/// lastProbeTime equals lastTransitionTime and does not move).
pub fn conditions(
    pod: &api::Pod,
    resize: &ResizeState<'_>,
    old: &api::PodStatus,
) -> Vec<api::PodCondition> {
    let mut out = Vec::new();
    if let Some(p) = &resize.pending {
        out.push(condition(
            pod,
            POD_RESIZE_PENDING,
            Some(p.reason.as_str()),
            Some(p.message.clone()),
        ));
    }
    if resize.in_progress {
        out.push(condition(pod, POD_RESIZE_IN_PROGRESS, None, None));
    }
    for c in &mut out {
        let same = old.conditions.iter().flatten().find(|o| {
            o.type_ == c.type_
                && o.status == c.status
                && o.reason == c.reason
                && o.message == c.message
        });
        c.last_probe_time = same
            .and_then(|o| o.last_probe_time.clone())
            .or_else(|| super::generate::to_time(std::time::SystemTime::now()));
    }
    out
}

fn condition(
    pod: &api::Pod,
    kind: &str,
    reason: Option<&str>,
    message: Option<String>,
) -> api::PodCondition {
    api::PodCondition {
        type_: kind.to_string(),
        status: "True".to_string(),
        reason: reason.map(str::to_string),
        message,
        observed_generation: pod.metadata.generation,
        ..Default::default()
    }
}

/// `resources` and `allocatedResources` of a container the runtime has an
/// instance of (from v1.33; older servers get neither,
/// `ServerVersion::adapt_pod_status`). `spec` is the container as
/// allocated: `allocatedResources` are its requests, `{}` for a container
/// without any as the v1.34 capture shows. A running container's
/// `resources` show what it was last given (`actuated`) for the values a
/// resize changes, the CPU and memory limits and the CPU request, as
/// upstream reads them back from the runtime.
pub fn resource_statuses(
    spec: &api::Container,
    actuated: Option<&Actuated<'_>>,
) -> (
    Option<api::ResourceRequirements>,
    Option<BTreeMap<String, Quantity>>,
) {
    let r = spec.resources.as_ref();
    let nonempty = |m: Option<&BTreeMap<String, Quantity>>| m.filter(|m| !m.is_empty()).cloned();
    let requests = nonempty(r.and_then(|r| r.requests.as_ref()));
    let mut resources = api::ResourceRequirements {
        limits: nonempty(r.and_then(|r| r.limits.as_ref())),
        requests: requests.clone(),
        ..Default::default()
    };
    if let Some(given) = actuated.and_then(|f| f(&spec.name)) {
        overlay(
            &mut resources.limits,
            given.limits.as_ref(),
            &["cpu", "memory"],
        );
        overlay(&mut resources.requests, given.requests.as_ref(), &["cpu"]);
    }
    (Some(resources), requests)
}

/// Takes `names` from `given` into `into`, when `into` lists anything.
fn overlay(
    into: &mut Option<BTreeMap<String, Quantity>>,
    given: Option<&BTreeMap<String, Quantity>>,
    names: &[&str],
) {
    let Some(into) = into.as_mut() else { return };
    for name in names {
        match given.and_then(|g| g.get(*name)) {
            Some(q) => {
                into.insert(name.to_string(), q.clone());
            }
            None => {
                into.remove(*name);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocation::{PendingReason, PendingResize};

    fn rr(req: &[(&str, &str)], lim: &[(&str, &str)]) -> api::ResourceRequirements {
        let m = |kv: &[(&str, &str)]| {
            Some(
                kv.iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect(),
            )
        };
        api::ResourceRequirements {
            requests: m(req),
            limits: m(lim),
            ..Default::default()
        }
    }

    #[test]
    fn in_progress_shows_what_runs_beside_what_is_allocated() {
        // The capture's v-resize mid-resize: allocatedResources new,
        // resources old.
        let spec = api::Container {
            name: "c".into(),
            resources: Some(rr(
                &[("cpu", "150m"), ("memory", "48Mi")],
                &[("cpu", "300m"), ("memory", "96Mi")],
            )),
            ..Default::default()
        };
        let old = rr(
            &[("cpu", "100m"), ("memory", "32Mi")],
            &[("cpu", "200m"), ("memory", "64Mi")],
        );
        let given = |_: &str| Some(old.clone());
        let (res, alloc) = resource_statuses(&spec, Some(&given));
        let alloc = alloc.unwrap();
        assert_eq!(alloc["cpu"].0, "150m");
        assert_eq!(alloc["memory"].0, "48Mi");
        let res = res.unwrap();
        assert_eq!(res.limits.as_ref().unwrap()["cpu"].0, "200m");
        assert_eq!(res.limits.as_ref().unwrap()["memory"].0, "64Mi");
        assert_eq!(res.requests.as_ref().unwrap()["cpu"].0, "100m");
        // The memory request is the allocation's: the runtime has none.
        assert_eq!(res.requests.as_ref().unwrap()["memory"].0, "48Mi");
        // Without resources: `{}` and no allocatedResources.
        let bare = api::Container {
            name: "b".into(),
            ..Default::default()
        };
        assert_eq!(
            resource_statuses(&bare, Some(&given)),
            (Some(Default::default()), None)
        );
    }

    #[test]
    fn pending_condition_is_the_captures_and_keeps_its_probe_time() {
        let mut pod = api::Pod::default();
        pod.metadata.generation = Some(2);
        let state = ResizeState {
            pending: Some(PendingResize {
                reason: PendingReason::Infeasible,
                message: "Node didn't have enough capacity: cpu, requested: 500000, capacity: 2000"
                    .into(),
            }),
            ..Default::default()
        };
        let first = conditions(&pod, &state, &api::PodStatus::default());
        assert_eq!(first.len(), 1);
        let c = &first[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str()),
            (POD_RESIZE_PENDING, "True")
        );
        assert_eq!(c.reason.as_deref(), Some("Infeasible"));
        assert_eq!(c.observed_generation, Some(2));
        assert!(c.last_probe_time.is_some());
        let mut earlier = c.clone();
        earlier.last_probe_time = super::super::generate::to_time(std::time::UNIX_EPOCH);
        let old = api::PodStatus {
            conditions: Some(vec![earlier.clone()]),
            ..Default::default()
        };
        assert_eq!(
            conditions(&pod, &state, &old)[0].last_probe_time,
            earlier.last_probe_time
        );
        let moving = ResizeState {
            in_progress: true,
            ..Default::default()
        };
        let c = &conditions(&pod, &moving, &old)[0];
        assert_eq!(
            (c.type_.as_str(), c.reason.as_deref()),
            (POD_RESIZE_IN_PROGRESS, None)
        );
    }
}
