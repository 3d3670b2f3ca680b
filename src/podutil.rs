//! Read-only accessors over the API's `Pod`, whose fields are mostly
//! `Option`s: one place decides what an absent field means.

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod, PodSpec, PodStatus, Volume};

const MINIMUM_GRACE_PERIOD_SECONDS: i64 = 2;
const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

pub trait PodExt {
    fn name(&self) -> &str;
    fn namespace(&self) -> &str;
    fn uid(&self) -> &str;
    fn spec_or_default(&self) -> &PodSpec;
    fn containers(&self) -> &[Container];
    fn init_containers(&self) -> &[Container];
    /// `spec.ephemeralContainers` (added through the `ephemeralcontainers`
    /// subresource, e.g. by `kubectl debug`).
    fn ephemeral_containers(&self) -> &[EphemeralContainer];
    fn restart_policy(&self) -> RestartPolicy;
    fn is_host_network(&self) -> bool;
    fn is_being_deleted(&self) -> bool;
    /// The grace period to kill this pod with: the deletion's, else the
    /// spec's, never below upstream's minimum of 2 s.
    fn kill_grace_seconds(&self) -> i64;
    fn full_name(&self) -> String;
    /// `namespace/name`, for log messages (klog.KObj).
    fn namespaced_name(&self) -> String;
    fn annotation(&self, key: &str) -> Option<&str>;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

static EMPTY_SPEC: std::sync::OnceLock<PodSpec> = std::sync::OnceLock::new();

impl PodExt for Pod {
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or("")
    }

    fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or("default")
    }

    fn uid(&self) -> &str {
        self.metadata.uid.as_deref().unwrap_or("")
    }

    fn spec_or_default(&self) -> &PodSpec {
        self.spec
            .as_ref()
            .unwrap_or_else(|| EMPTY_SPEC.get_or_init(PodSpec::default))
    }

    fn containers(&self) -> &[Container] {
        &self.spec_or_default().containers
    }

    fn init_containers(&self) -> &[Container] {
        self.spec_or_default()
            .init_containers
            .as_deref()
            .unwrap_or(&[])
    }

    fn ephemeral_containers(&self) -> &[EphemeralContainer] {
        self.spec_or_default()
            .ephemeral_containers
            .as_deref()
            .unwrap_or(&[])
    }

    fn restart_policy(&self) -> RestartPolicy {
        match self.spec_or_default().restart_policy.as_deref() {
            Some("Never") => RestartPolicy::Never,
            Some("OnFailure") => RestartPolicy::OnFailure,
            _ => RestartPolicy::Always,
        }
    }

    fn is_host_network(&self) -> bool {
        self.spec_or_default().host_network.unwrap_or(false)
    }

    fn is_being_deleted(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    fn kill_grace_seconds(&self) -> i64 {
        let grace = self
            .metadata
            .deletion_grace_period_seconds
            .or(self.spec_or_default().termination_grace_period_seconds)
            .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS);
        grace.max(MINIMUM_GRACE_PERIOD_SECONDS)
    }

    fn full_name(&self) -> String {
        crate::container::pod_full_name(self.name(), self.namespace())
    }

    fn namespaced_name(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }

    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .map(String::as_str)
    }
}

/// An ephemeral container as the `Container` it shares its fields with
/// (upstream converts `EphemeralContainerCommon` to `v1.Container` the same
/// way); `targetContainerName` is the only field left behind.
pub fn ephemeral_as_container(ec: &EphemeralContainer) -> Container {
    let ec = ec.clone();
    Container {
        args: ec.args,
        command: ec.command,
        env: ec.env,
        env_from: ec.env_from,
        image: ec.image,
        image_pull_policy: ec.image_pull_policy,
        lifecycle: ec.lifecycle,
        liveness_probe: ec.liveness_probe,
        name: ec.name,
        ports: ec.ports,
        readiness_probe: ec.readiness_probe,
        resize_policy: ec.resize_policy,
        resources: ec.resources,
        restart_policy: ec.restart_policy,
        restart_policy_rules: ec.restart_policy_rules,
        security_context: ec.security_context,
        startup_probe: ec.startup_probe,
        stdin: ec.stdin,
        stdin_once: ec.stdin_once,
        termination_message_path: ec.termination_message_path,
        termination_message_policy: ec.termination_message_policy,
        tty: ec.tty,
        volume_devices: ec.volume_devices,
        volume_mounts: ec.volume_mounts,
        working_dir: ec.working_dir,
    }
}

/// A sidecar: an init container with `restartPolicy: Always` (KEP-753,
/// upstream `IsRestartableInitContainer`). It keeps running beside the app
/// containers, and is restarted whenever it exits.
pub fn is_restartable_init(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Whether `name` is an init container that runs to completion before the
/// next one starts (upstream isRegularInitContainer): not a sidecar.
pub fn is_regular_init_container(pod: &Pod, name: &str) -> bool {
    let init = pod.init_containers().iter().find(|c| c.name == name);
    init.is_some_and(|c| !is_restartable_init(c))
}

/// The spec of the pod's regular or init container `name`.
pub fn find_container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    pod.containers()
        .iter()
        .chain(pod.init_containers())
        .find(|c| c.name == name)
}

/// Every container name of the pod that status and logs can refer to:
/// init, regular and ephemeral containers.
pub fn has_container_named(pod: &Pod, name: &str) -> bool {
    find_container(pod, name).is_some() || pod.ephemeral_containers().iter().any(|c| c.name == name)
}

/// Gives back a kept list's spare room: a list decoded or built element by
/// element grows by doubling, so three elements hold room for four.
pub fn shrink_list<T>(list: &mut Option<Vec<T>>) {
    if let Some(l) = list {
        l.shrink_to_fit();
    }
}

/// The same for every list of a pod status that is kept until its next
/// change (a k8s-openapi ContainerStatus is some 700 bytes).
pub fn shrink_status_to_fit(status: &mut PodStatus) {
    shrink_list(&mut status.conditions);
    shrink_list(&mut status.container_statuses);
    shrink_list(&mut status.init_container_statuses);
    shrink_list(&mut status.ephemeral_container_statuses);
    shrink_list(&mut status.pod_ips);
    shrink_list(&mut status.host_ips);
}

/// The source fields a volume spells out (`configMap`, `csi`, ...), read
/// from its JSON so that a source kind new to the API needs no code here.
/// Encoded to bytes, as every pod's volumes already are (static pod UIDs,
/// mirror pods), so that no second Volume encoder is built into the binary.
pub fn volume_source_fields(v: &Volume) -> Vec<String> {
    let json = serde_json::to_vec(v).unwrap_or_default();
    match serde_json::from_slice::<serde_json::Value>(&json) {
        Ok(serde_json::Value::Object(fields)) => fields
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| k != "name")
            .collect(),
        _ => Vec::new(),
    }
}
