//! Conversions of CRI answers into the kubelet's runtime-neutral terms
//! (upstream kuberuntime/helpers.go).

use crate::container::RuntimeHandler;
use crate::cri::api;

/// upstream toKubeRuntimeStatus for one handler: one without features
/// supports none.
pub fn to_runtime_handler(h: &api::RuntimeHandler) -> RuntimeHandler {
    let features = h.features.as_ref();
    RuntimeHandler {
        name: h.name.clone(),
        supports_recursive_read_only_mounts: features.is_some_and(|f| f.recursive_read_only_mounts),
        supports_user_namespaces: features.is_some_and(|f| f.user_namespaces),
    }
}
