//! Dynamic resource allocation on the node (upstream pkg/kubelet/cm/dra).
//!
//! rkubelet has no DRA manager yet: no `DRAPlugin` registration, no
//! `NodePrepareResources`. A pod that names ResourceClaims (DRA is GA and
//! on in v1.34, so the server passes them) therefore never gets its
//! sandbox: it waits, with upstream's `FailedPrepareDynamicResources`
//! event, as upstream's pod waits on a node whose DRA driver is missing,
//! instead of running without the devices it claimed.

use k8s_openapi::api::core::v1::Pod;

/// upstream events.FailedPrepareDynamicResources.
pub const FAILED_PREPARE_DYNAMIC_RESOURCES: &str = "FailedPrepareDynamicResources";

/// Upstream PrepareDynamicResources, before the pod's sandbox is made.
/// `Err` names the claims that cannot be prepared.
pub fn prepare_resources(pod: &Pod) -> Result<(), String> {
    let claims: Vec<&str> = pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_deref())
        .unwrap_or(&[])
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    if claims.is_empty() {
        return Ok(());
    }
    Err(format!(
        "no DRA plugin is registered with this kubelet, which does not support dynamic \
         resource allocation: claims {claims:?} cannot be prepared"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_with_claims_is_not_prepared_and_says_which() {
        let plain: Pod =
            serde_json::from_value(json!({"spec": {"containers": [{"name": "c"}]}})).expect("pod");
        assert_eq!(prepare_resources(&plain), Ok(()));
        let claiming: Pod = serde_json::from_value(json!({"spec": {
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}}))
        .expect("pod");
        let e = prepare_resources(&claiming).unwrap_err();
        assert!(e.ends_with("claims [\"gpu\"] cannot be prepared"), "{e}");
    }
}
