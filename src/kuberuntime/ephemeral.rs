//! Ephemeral containers (`kubectl debug`): what sets them apart when they
//! start (upstream `ephemeralContainerStartSpec`, `getTargetID` and the
//! `NamespaceMode_TARGET` branch of `generateLinuxContainerConfig` in
//! `kuberuntime_container.go` / `kuberuntime_container_linux.go`). When they
//! start is `actions::compute_pod_actions`' `ephemeral_to_start`.

use k8s_openapi::api::core::v1::Pod;
use protobuf::EnumOrUnknown;

use crate::container::PodStatus;
use crate::cri::api;
use crate::podutil::PodExt;

/// The `targetContainerName` of the ephemeral container `name`, if it is
/// one and names a target.
pub fn target_name<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    pod.ephemeral_containers()
        .iter()
        .find(|ec| ec.name == name)
        .and_then(|ec| ec.target_container_name.as_deref())
        .filter(|t| !t.is_empty())
}

/// Points the PID namespace of the ephemeral container `name` at its
/// target's (CRI `NamespaceMode::TARGET` with the target's ID), as upstream
/// does when the pod would otherwise give it a namespace of its own; with
/// `shareProcessNamespace` or `hostPID` it already sees the target. The
/// target is the newest instance of that container, as upstream's
/// `FindContainerStatusByName`; none is an error (upstream's "unable to
/// find target container"), reported as CreateContainerConfigError.
pub fn set_pid_target(
    pod: &Pod,
    name: &str,
    status: &PodStatus,
    config: &mut api::ContainerConfig,
) -> Result<(), super::container::ConfigError> {
    let Some(target) = target_name(pod, name) else {
        return Ok(());
    };
    let Some(instance) = status.find_container(target) else {
        return Err(super::container::ConfigError::NoTarget(target.to_string()));
    };
    let Some(ns) = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|sc| sc.namespace_options.as_mut())
    else {
        return Ok(());
    };
    if ns.pid.enum_value() == Ok(api::NamespaceMode::CONTAINER) {
        ns.pid = EnumOrUnknown::new(api::NamespaceMode::TARGET);
        ns.target_id = instance.id.clone();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::container::{ContainerState, ContainerStatus};
    use k8s_openapi::api::core::v1::{EphemeralContainer, PodSpec};
    use std::time::SystemTime;

    fn pod(target: Option<&str>, share: bool) -> Pod {
        Pod {
            spec: Some(PodSpec {
                share_process_namespace: Some(share),
                ephemeral_containers: Some(vec![EphemeralContainer {
                    name: "debugger".into(),
                    target_container_name: target.map(str::to_string),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn config(p: &Pod) -> api::ContainerConfig {
        api::ContainerConfig {
            linux: Some(api::LinuxContainerConfig {
                security_context: Some(api::LinuxContainerSecurityContext {
                    namespace_options: Some(super::super::sandbox::namespace_options(p, None))
                        .into(),
                    ..Default::default()
                })
                .into(),
                ..Default::default()
            })
            .into(),
            ..Default::default()
        }
    }

    fn running(name: &str, id: &str) -> PodStatus {
        PodStatus {
            containers: vec![ContainerStatus {
                id: id.into(),
                name: name.into(),
                state: ContainerState::Running,
                created_at: SystemTime::UNIX_EPOCH,
                started_at: None,
                finished_at: None,
                exit_code: 0,
                image: String::new(),
                image_ref: String::new(),
                hash: String::new(),
                restart_count: 0,
                reason: String::new(),
                message: String::new(),
                user: None,
            }],
            ..Default::default()
        }
    }

    fn pid(c: &api::ContainerConfig) -> (api::NamespaceMode, String) {
        let ns = c.linux.security_context.namespace_options.as_ref().unwrap();
        (ns.pid.enum_value().unwrap(), ns.target_id.clone())
    }

    #[test]
    fn target_shares_the_targets_pid_namespace() {
        let p = pod(Some("app"), false);
        let mut c = config(&p);
        set_pid_target(&p, "debugger", &running("app", "abc"), &mut c).unwrap();
        assert_eq!(pid(&c), (api::NamespaceMode::TARGET, "abc".into()));
    }

    #[test]
    fn shared_process_namespace_or_no_target_is_left_alone() {
        let p = pod(Some("app"), true);
        let mut c = config(&p);
        set_pid_target(&p, "debugger", &running("app", "abc"), &mut c).unwrap();
        assert_eq!(pid(&c), (api::NamespaceMode::POD, String::new()));
        let p = pod(None, false);
        let mut c = config(&p);
        set_pid_target(&p, "debugger", &running("app", "abc"), &mut c).unwrap();
        assert_eq!(pid(&c), (api::NamespaceMode::CONTAINER, String::new()));
        // Not an ephemeral container at all.
        let p = pod(Some("app"), false);
        let mut c = config(&p);
        set_pid_target(&p, "app", &running("app", "abc"), &mut c).unwrap();
        assert_eq!(pid(&c).0, api::NamespaceMode::CONTAINER);
    }

    #[test]
    fn missing_target_is_an_error() {
        let p = pod(Some("gone"), false);
        let mut c = config(&p);
        let err = set_pid_target(&p, "debugger", &running("app", "abc"), &mut c).unwrap_err();
        assert_eq!(err.to_string(), "unable to find target container gone");
    }
}
