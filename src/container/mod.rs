//! Runtime-neutral views of pods and containers (upstream
//! `pkg/kubelet/container`): what the runtime manager reports and what the
//! kubelet, PLEG and the pod workers reason about.

pub mod cache;

use std::time::SystemTime;

/// A container's state as the kubelet sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    Created,
    Running,
    Exited,
    Unknown,
}

/// The status of one container instance (one restart of a container).
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerStatus {
    pub id: String,
    pub name: String,
    pub state: ContainerState,
    pub created_at: SystemTime,
    pub started_at: Option<SystemTime>,
    pub finished_at: Option<SystemTime>,
    pub exit_code: i32,
    pub image: String,
    pub image_ref: String,
    /// Hash of the container spec it was created from.
    pub hash: String,
    pub restart_count: u32,
    pub reason: String,
    pub message: String,
    /// The identity the container's process runs as, where the runtime
    /// says (CRI ContainerStatus.user; containerd 2.0+).
    pub user: Option<ContainerUser>,
}

/// upstream kubecontainer.ContainerUser: what CRI reports of a running
/// container's identity. `linux` is None when the runtime sent a user
/// without its Linux part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerUser {
    pub linux: Option<LinuxContainerUser>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinuxContainerUser {
    pub uid: i64,
    pub gid: i64,
    pub supplemental_groups: Vec<i64>,
}

/// A runtime handler and what it supports, from CRI Status (upstream
/// kubecontainer.RuntimeHandler). The default handler's name is empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeHandler {
    pub name: String,
    pub supports_recursive_read_only_mounts: bool,
    pub supports_user_namespaces: bool,
}

/// What the runtime as a whole supports, from CRI Status (upstream
/// kubecontainer.RuntimeFeatures). A runtime older than the field sends
/// none, and the kubelet then knows nothing (not "false").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeFeatures {
    pub supplemental_groups_policy: bool,
}

/// upstream runtimeHandlerSupportsRecursiveReadOnlyMounts: a runtime that
/// lists no handlers supports it for none, nor for a handler it does not
/// list.
pub fn handler_supports_recursive_read_only(handlers: &[RuntimeHandler], handler: &str) -> bool {
    let found = handlers.iter().find(|h| h.name == handler);
    if found.is_none() && !handlers.is_empty() {
        log::warn!("unknown runtime handler {handler:?}: recursive read-only mounts not supported");
    }
    found.is_some_and(|h| h.supports_recursive_read_only_mounts)
}

/// The reason the runtime gives a container the kernel OOM-killed.
pub const OOM_KILLED_REASON: &str = "OOMKilled";
/// containerd's reason for any other non-zero exit.
const ERROR_REASON: &str = "Error";
/// The exit code of a SIGKILLed process (128 + 9).
const SIGKILL_EXIT_CODE: i32 = 137;

impl ContainerStatus {
    /// Exited by SIGKILL with the runtime's generic `Error`: what
    /// containerd says of an OOM kill before its TaskOOM event arrives
    /// (cgroup v2: the exit and the OOM event race), or when it sends that
    /// event for the sandbox instead (v1 with SystemdCgroup).
    pub fn may_be_unreported_oom_kill(&self) -> bool {
        self.state == ContainerState::Exited
            && self.exit_code == SIGKILL_EXIT_CODE
            && self.reason == ERROR_REASON
    }
}

/// A pod sandbox as the runtime reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxStatus {
    pub id: String,
    pub ready: bool,
    pub attempt: u32,
    pub created_at: SystemTime,
    pub ip: Option<String>,
    pub additional_ips: Vec<String>,
    pub host_network: bool,
}

/// Everything the runtime knows about one pod, newest first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PodStatus {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    /// Sandboxes, newest first.
    pub sandboxes: Vec<SandboxStatus>,
    /// Container instances, newest first.
    pub containers: Vec<ContainerStatus>,
}

impl PodStatus {
    /// The newest instance of the named container.
    pub fn find_container(&self, name: &str) -> Option<&ContainerStatus> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// Whether the named container has an instance created in the newest
    /// sandbox (upstream tracks each container's sandbox; one created after
    /// the sandbox is in it). Old sandboxes' instances prove nothing about
    /// the current one, e.g. after a reboot.
    pub fn created_in_current_sandbox(&self, name: &str) -> bool {
        let Some(sandbox) = self.sandboxes.first() else {
            return false;
        };
        self.containers
            .iter()
            .any(|c| c.name == name && c.created_at >= sandbox.created_at)
    }

    pub fn running_containers(&self) -> impl Iterator<Item = &ContainerStatus> {
        self.containers
            .iter()
            .filter(|c| c.state == ContainerState::Running)
    }

    /// The pod's IPs from its newest sandbox.
    pub fn ips(&self) -> Vec<String> {
        match self.sandboxes.first() {
            Some(sb) => sb
                .ip
                .iter()
                .chain(sb.additional_ips.iter())
                .cloned()
                .collect(),
            None => Vec::new(),
        }
    }
}

/// A container found in the runtime, without inspecting it.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeContainer {
    pub id: String,
    pub name: String,
    pub state: ContainerState,
    pub hash: String,
    pub created_at: SystemTime,
    /// The pod's grace period as recorded on the container, for killing
    /// orphans whose spec the kubelet no longer has.
    pub grace_seconds: Option<i64>,
}

/// A sandbox found in the runtime, without inspecting it.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeSandbox {
    pub id: String,
    pub ready: bool,
    pub created_at: SystemTime,
}

/// A pod as listed from the runtime (upstream `kubecontainer.Pod`): the
/// unit PLEG compares between relists and housekeeping reaps.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RuntimePod {
    pub uid: String,
    pub name: String,
    pub namespace: String,
    pub sandboxes: Vec<RuntimeSandbox>,
    pub containers: Vec<RuntimeContainer>,
}

impl RuntimePod {
    pub fn is_running(&self) -> bool {
        self.sandboxes.iter().any(|s| s.ready)
            || self
                .containers
                .iter()
                .any(|c| c.state == ContainerState::Running)
    }
}

/// The IDs of the running containers of `pods`.
pub fn running_container_ids(pods: &[RuntimePod]) -> impl Iterator<Item = &str> {
    pods.iter()
        .flat_map(|p| &p.containers)
        .filter(|c| c.state == ContainerState::Running)
        .map(|c| c.id.as_str())
}

/// `name_namespace`, as upstream's GetPodFullName.
pub fn pod_full_name(name: &str, namespace: &str) -> String {
    format!("{name}_{namespace}")
}

/// Where PLEG lists and inspects pods (the part of upstream's
/// `kubecontainer.Runtime` it uses): the runtime manager, or the in-memory
/// fake in tests.
pub trait PodSource: Send + Sync {
    /// Every pod the runtime holds, without inspecting them. A source may
    /// give back the very snapshot of its last call when nothing changed.
    fn get_pods(&self) -> Result<std::sync::Arc<Vec<RuntimePod>>, crate::cri::CriError>;
    /// One pod's sandboxes and containers, inspected.
    fn get_pod_status(
        &self,
        uid: &str,
        name: &str,
        namespace: &str,
    ) -> Result<PodStatus, crate::cri::CriError>;
}
