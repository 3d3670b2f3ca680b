//! Recursive read-only mounts (upstream `resolveRecursiveReadOnly` and
//! `runtimeClassSupportsRecursiveReadOnlyMounts` in kubelet_pods.go): a
//! mount asking for it gets it where the pod's runtime handler reports
//! the feature in CRI Status; `Enabled` is refused where it does not,
//! never mounted writable below the top.

use k8s_openapi::api::core::v1::{Container, Pod, VolumeMount};

use crate::container::{handler_supports_recursive_read_only, RuntimeHandler};
use crate::podutil::PodExt;

/// upstream resolveRecursiveReadOnly: whether the mount is made
/// recursively read-only, or why it cannot be made as asked.
pub fn resolve(vm: &VolumeMount, runtime_supports: bool) -> Result<bool, String> {
    let mode = match vm.recursive_read_only.as_deref() {
        None | Some("Disabled") => return Ok(false),
        Some(mode) => mode,
    };
    let name = &vm.name;
    if vm.read_only != Some(true) {
        return Err(format!(
            "volume {name:?} requested recursive read-only mode, but it is not read-only"
        ));
    }
    if let Some(p) = vm.mount_propagation.as_deref().filter(|p| *p != "None") {
        return Err(format!(
            "volume {name:?} requested recursive read-only mode, but it is not compatible with propagation {p:?}"
        ));
    }
    match mode {
        "IfPossible" => Ok(runtime_supports),
        "Enabled" if runtime_supports => Ok(true),
        "Enabled" => Err(format!(
            "volume {name:?} requested recursive read-only mode, but it is not supported by the runtime"
        )),
        other => Err(format!("unknown recursive read-only mode {other:?}")),
    }
}

fn wants_it(c: &Container) -> bool {
    c.volume_mounts.iter().flatten().any(|m| {
        matches!(
            m.recursive_read_only.as_deref(),
            Some("Enabled" | "IfPossible")
        )
    })
}

impl super::KubeRuntimeManager {
    /// Keeps the runtime's handlers from its last ready Status (upstream
    /// reads runtimeState's), so no container start or status asks again.
    pub fn set_runtime_handlers(&self, handlers: Vec<RuntimeHandler>) {
        *rkubelet_util::lock(&self.runtime_handlers) = handlers;
    }

    /// Whether the pod's runtime handler supports recursive read-only
    /// mounts, for a container that wants them.
    pub(super) fn supports_recursive_read_only(&self, pod: &Pod, c: &Container) -> bool {
        wants_it(c) && self.handler_supports_recursive_read_only(pod)
    }

    /// The same for any container of the pod, ephemeral ones included, for
    /// its status's `volumeMounts`.
    pub fn pod_supports_recursive_read_only(&self, pod: &Pod) -> bool {
        let spec = pod.spec_or_default();
        let wants = spec.init_containers.iter().flatten().any(wants_it)
            || spec.containers.iter().any(wants_it)
            || spec
                .ephemeral_containers
                .iter()
                .flatten()
                .any(ephemeral_wants_it);
        wants && self.handler_supports_recursive_read_only(pod)
    }

    /// upstream runtimeClassSupportsRecursiveReadOnlyMounts: a handler that
    /// cannot be looked up supports nothing.
    fn handler_supports_recursive_read_only(&self, pod: &Pod) -> bool {
        match self.runtime_handler(pod) {
            Ok(handler) => handler_supports_recursive_read_only(
                &rkubelet_util::lock(&self.runtime_handlers),
                &handler,
            ),
            Err(e) => {
                log::warn!(
                    "pod {}: failed to look up the runtime handler: {e}",
                    pod.full_name()
                );
                false
            }
        }
    }
}

fn ephemeral_wants_it(e: &k8s_openapi::api::core::v1::EphemeralContainer) -> bool {
    e.volume_mounts.iter().flatten().any(|m| {
        matches!(
            m.recursive_read_only.as_deref(),
            Some("Enabled" | "IfPossible")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::api;
    use crate::kuberuntime::helpers::to_runtime_handler;

    fn vm(mode: &str, ro: bool, prop: Option<&str>) -> VolumeMount {
        VolumeMount {
            name: "v".into(),
            mount_path: "/v".into(),
            read_only: Some(ro),
            recursive_read_only: Some(mode.into()),
            mount_propagation: prop.map(String::from),
            ..Default::default()
        }
    }

    #[test]
    fn a_runtime_without_the_feature_refuses_enabled_and_drops_if_possible() {
        assert_eq!(resolve(&vm("Disabled", false, None), false), Ok(false));
        assert_eq!(resolve(&vm("IfPossible", true, None), false), Ok(false));
        assert_eq!(
            resolve(&vm("Enabled", true, Some("None")), false),
            Err("volume \"v\" requested recursive read-only mode, but it is not supported by the runtime".into())
        );
        assert_eq!(
            resolve(&vm("Enabled", false, None), true),
            Err("volume \"v\" requested recursive read-only mode, but it is not read-only".into())
        );
        let e = resolve(&vm("IfPossible", true, Some("HostToContainer")), true);
        assert!(
            e.is_err_and(|e| e.ends_with("not compatible with propagation \"HostToContainer\""))
        );
        assert_eq!(
            resolve(&vm("Sometimes", true, None), true),
            Err("unknown recursive read-only mode \"Sometimes\"".into())
        );
    }

    #[test]
    fn a_runtime_with_the_feature_mounts_recursively_read_only() {
        assert_eq!(resolve(&vm("Enabled", true, None), true), Ok(true));
        assert_eq!(
            resolve(&vm("IfPossible", true, Some("None")), true),
            Ok(true)
        );
        assert_eq!(resolve(&vm("Disabled", true, None), true), Ok(false));
    }

    #[test]
    fn only_a_listed_handler_with_the_feature_supports_it() {
        let cri = |name: &str, rro: bool| api::RuntimeHandler {
            name: name.into(),
            features: protobuf::MessageField::some(api::RuntimeHandlerFeatures {
                recursive_read_only_mounts: rro,
                ..Default::default()
            }),
            ..Default::default()
        };
        let handlers: Vec<RuntimeHandler> = [cri("", true), cri("kata", false)]
            .iter()
            .map(to_runtime_handler)
            .collect();
        assert!(handler_supports_recursive_read_only(&handlers, ""));
        assert!(!handler_supports_recursive_read_only(&handlers, "kata"));
        assert!(!handler_supports_recursive_read_only(&handlers, "gvisor"));
        assert!(!handler_supports_recursive_read_only(&[], ""));
        let bare = to_runtime_handler(&api::RuntimeHandler::default());
        assert!(!bare.supports_recursive_read_only_mounts && !bare.supports_user_namespaces);
    }
}
