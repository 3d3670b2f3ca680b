//! A pod's ResourceClaims as the kubelet reads them (upstream
//! `k8s.io/dynamic-resource-allocation/resourceclaim`): which claim each
//! of the pod's entries names, and whether the claim is the pod's to use.
//!
//! The claim is decoded into a view of the few fields read here, which
//! `resource.k8s.io/v1` and `v1beta1` spell alike, rather than the full
//! generated type of one version.

use k8s_openapi::api::core::v1::{Pod, PodResourceClaim};
use serde::Deserialize;

use crate::client::version::ServerVersion;
use crate::podutil::PodExt;

/// upstream resourceclaim.ErrClaimNotFound.
const CLAIM_NOT_CREATED: &str = "ResourceClaim not created yet";

/// The group version a control plane serves claims under: GA `v1` from
/// v1.34, `v1beta1` on v1.32 and v1.33 (where it must be enabled, as
/// DRA itself), none before (an older, incompatible alpha).
pub(super) fn api_version(server: ServerVersion) -> Option<&'static str> {
    match server.minor {
        34.. => Some("resource.k8s.io/v1"),
        32 | 33 => Some("resource.k8s.io/v1beta1"),
        _ => None,
    }
}

/// `GET` path of a claim.
pub(super) fn claim_path(api_version: &str, ns: &str, name: &str) -> String {
    format!("/apis/{api_version}/namespaces/{ns}/resourceclaims/{name}")
}

/// The name of the claim `pod_claim` stands for (upstream resourceclaim.Name):
/// `Ok(None)` when a template produced no claim (nothing to prepare);
/// `must_check_owner` when the claim was made for the pod from a template.
pub(super) fn claim_name(pod: &Pod, pod_claim: &PodResourceClaim) -> Result<Option<Named>, String> {
    if let Some(name) = &pod_claim.resource_claim_name {
        return Ok(Some(Named {
            name: name.clone(),
            must_check_owner: false,
        }));
    }
    if pod_claim.resource_claim_template_name.is_none() {
        return Err(format!(
            "pod \"{}/{}\", spec.resourceClaim {:?}: API unsupported",
            pod.namespace(),
            pod.name(),
            pod_claim.name
        ));
    }
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.resource_claim_statuses.as_deref())
        .unwrap_or(&[]);
    match statuses.iter().find(|s| s.name == pod_claim.name) {
        Some(s) => Ok(s.resource_claim_name.clone().map(|name| Named {
            name,
            must_check_owner: true,
        })),
        None => Err(format!(
            "pod \"{}/{}\": {CLAIM_NOT_CREATED}",
            pod.namespace(),
            pod.name()
        )),
    }
}

/// A claim's name, as [`claim_name`] resolved it.
#[derive(Debug, PartialEq)]
pub(super) struct Named {
    pub name: String,
    pub must_check_owner: bool,
}

/// The fields of a ResourceClaim the kubelet reads.
#[derive(Debug, Default, Deserialize)]
pub(super) struct ResourceClaim {
    #[serde(default)]
    pub metadata: Meta,
    #[serde(default)]
    pub status: Option<ClaimStatus>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Meta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub uid: String,
    #[serde(default, rename = "ownerReferences")]
    pub owner_references: Vec<OwnerReference>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct OwnerReference {
    #[serde(default)]
    pub uid: String,
    #[serde(default)]
    pub controller: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct ClaimStatus {
    #[serde(default)]
    pub allocation: Option<Allocation>,
    #[serde(default, rename = "reservedFor")]
    pub reserved_for: Vec<Consumer>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct Allocation {
    #[serde(default)]
    pub devices: Option<DeviceAllocation>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct DeviceAllocation {
    #[serde(default)]
    pub results: Vec<AllocationResult>,
}

/// One allocated device: the driver that prepares it.
#[derive(Debug, Default, Deserialize)]
pub(super) struct AllocationResult {
    #[serde(default)]
    pub driver: String,
}

/// An entry of `status.reservedFor`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Consumer {
    #[serde(default)]
    pub resource: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub uid: String,
}

impl ResourceClaim {
    /// upstream resourceclaim.IsForPod: a claim made from a template must
    /// be controlled by the pod.
    pub fn check_owner(&self, pod: &Pod) -> Result<(), String> {
        let owned = self
            .metadata
            .owner_references
            .iter()
            .any(|o| o.controller == Some(true) && o.uid == pod.uid());
        if owned {
            return Ok(());
        }
        Err(format!(
            "ResourceClaim {} was not created for pod {}/{} (pod is not owner)",
            self.metadata.name,
            pod.namespace(),
            pod.name()
        ))
    }

    /// upstream resourceclaim.IsReservedForPod.
    pub fn check_reserved(&self, pod: &Pod) -> Result<(), String> {
        let reserved = self.status.as_ref().is_some_and(|s| {
            s.reserved_for
                .iter()
                .any(|c| c.resource == "pods" && c.name == pod.name() && c.uid == pod.uid())
        });
        if reserved {
            return Ok(());
        }
        Err(format!(
            "pod {} ({}) is not allowed to use ResourceClaim {} ({})",
            pod.name(),
            pod.uid(),
            self.metadata.name,
            self.metadata.uid
        ))
    }

    /// The drivers of the claim's allocated devices, sorted, each once;
    /// `Err` when the claim is not allocated.
    pub fn drivers(&self) -> Result<Vec<String>, String> {
        let Some(allocation) = self.status.as_ref().and_then(|s| s.allocation.as_ref()) else {
            return Err(format!(
                "ResourceClaim {}: not allocated",
                self.metadata.name
            ));
        };
        let mut drivers: Vec<String> = allocation
            .devices
            .iter()
            .flat_map(|d| d.results.iter().map(|r| r.driver.clone()))
            .collect();
        drivers.sort();
        drivers.dedup();
        Ok(drivers)
    }
}
