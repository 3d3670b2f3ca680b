//! What an evicted pod's status and event say (upstream `helpers.go`
//! evictionMessage and the local-storage message formats).

use k8s_openapi::api::core::v1::Pod;

use super::api::{Resource, Threshold};
use super::helpers::{format_quantity, Observations};
use super::rank::StatsFunc;
use crate::podutil::PodExt;

/// The reason of an evicted pod and of its event (upstream Reason).
pub const REASON: &str = "Evicted";

/// upstream getThresholdMetInfo: the first met threshold of the resource,
/// as (threshold quantity, available).
fn threshold_met_info(
    resource: Resource,
    thresholds: &[Threshold],
    observations: &Observations,
) -> Option<(String, String)> {
    let binary = matches!(resource, Resource::Memory | Resource::EphemeralStorage);
    thresholds
        .iter()
        .filter(|t| t.signal.resource() == resource)
        .find_map(|t| {
            let obs = observations.get(&t.signal)?;
            Some((
                format_quantity(t.value.value(obs.capacity), true),
                format_quantity(obs.available, binary),
            ))
        })
}

/// A container's request of `resource` as written in its spec, "0" when none.
fn container_request(
    c: &k8s_openapi::api::core::v1::Container,
    resource: Resource,
) -> (i128, String) {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get(resource.as_str()))
        .and_then(|q| {
            let milli = crate::util::quantity::parse_quantity(&q.0).ok()?;
            Some((milli / 1000, q.0.clone()))
        })
        .unwrap_or((0, "0".to_string()))
}

/// upstream evictionMessage: "The node was low on resource: memory.
/// Threshold quantity: 100Mi, available: 51200Ki. Container app was using
/// 1Gi, request is 0, has larger consumption of memory. "
pub fn eviction_message(
    resource: Resource,
    pod: &Pod,
    stats: &StatsFunc<'_>,
    thresholds: &[Threshold],
    observations: &Observations,
) -> String {
    let mut msg = format!("The node was low on resource: {resource}. ");
    if let Some((quantity, available)) = threshold_met_info(resource, thresholds, observations) {
        msg += &format!("Threshold quantity: {quantity}, available: {available}. ");
    }
    let Some(pod_stats) = stats.get(pod) else {
        return msg;
    };
    // Ephemeral containers cannot ask for resources; they are never blamed.
    let containers: Vec<_> = pod
        .containers()
        .iter()
        .chain(pod.init_containers())
        .collect();
    for cs in &pod_stats.containers {
        let Some(c) = containers.iter().find(|c| c.name == cs.name) else {
            continue;
        };
        let usage = match resource {
            Resource::EphemeralStorage => match (
                cs.rootfs.as_ref().and_then(|f| f.used_bytes),
                cs.logs.as_ref().and_then(|f| f.used_bytes),
            ) {
                (Some(r), Some(l)) => Some(i128::from(r) + i128::from(l)),
                _ => None,
            },
            Resource::Memory => cs
                .memory
                .as_ref()
                .and_then(|m| m.working_set_bytes)
                .map(i128::from),
            _ => None,
        };
        let (req, req_text) = container_request(c, resource);
        if let Some(u) = usage.filter(|u| *u > req) {
            msg += &format!(
                "Container {} was using {}, request is {req_text}, has larger consumption of {resource}. ",
                c.name,
                format_quantity(u, true)
            );
        }
    }
    msg
}

/// upstream emptyDirMessageFmt.
pub fn empty_dir_message(volume: &str, limit: &str) -> String {
    format!("Usage of EmptyDir volume {volume:?} exceeds the limit {limit:?}. ")
}

/// upstream containerEphemeralStorageMessageFmt.
pub fn container_ephemeral_storage_message(container: &str, limit: &str) -> String {
    format!("Container {container} exceeded its local ephemeral storage limit {limit:?}. ")
}

/// upstream nodeConditionMessageFmt, with Go's `%v` of a slice.
pub fn node_condition_message(conditions: &[&str]) -> String {
    format!("The node had condition: [{}]. ", conditions.join(" "))
}
