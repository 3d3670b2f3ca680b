//! Events the kubelet records about pods and its node (upstream
//! `pkg/kubelet/events`). Standalone, they go to the log ([`LogRecorder`]);
//! with an API server, [`ApiRecorder`] posts them (client-go's tools/record).

mod api;

use k8s_openapi::api::core::v1::Pod;

use crate::podutil::PodExt;

pub use api::ApiRecorder;

// Reasons, as upstream names them.
pub const PULLING_IMAGE: &str = "Pulling";
pub const PULLED_IMAGE: &str = "Pulled";
pub const FAILED_TO_PULL_IMAGE: &str = "Failed";
pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
pub const BACK_OFF_PULL_IMAGE: &str = "BackOff";
pub const FAILED_TO_INSPECT_IMAGE: &str = "InspectFailed";
pub const CREATED_CONTAINER: &str = "Created";
pub const STARTED_CONTAINER: &str = "Started";
pub const FAILED_TO_CREATE_CONTAINER: &str = "Failed";
pub const FAILED_TO_START_CONTAINER: &str = "Failed";
pub const KILLING_CONTAINER: &str = "Killing";
pub const BACK_OFF_START_CONTAINER: &str = "BackOff";
pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
pub const SANDBOX_CHANGED: &str = "SandboxChanged";
pub const CONTAINER_UNHEALTHY: &str = "Unhealthy";
pub const FAILED_POST_START_HOOK: &str = "FailedPostStartHook";
pub const FAILED_PRE_STOP_HOOK: &str = "FailedPreStopHook";

// Node event reasons.
pub const STARTING_KUBELET: &str = "Starting";
pub const NODE_SHUTDOWN: &str = "Shutdown";
pub const NODE_ALLOCATABLE_ENFORCED: &str = "NodeAllocatableEnforced";
pub const IMAGE_GC_FAILED: &str = "ImageGCFailed";
pub const INVALID_DISK_CAPACITY: &str = "InvalidDiskCapacity";
pub const FREE_DISK_SPACE_FAILED: &str = "FreeDiskSpaceFailed";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    /// The API's `Event.type`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

pub trait EventRecorder: Send + Sync {
    fn pod_event(&self, pod: &Pod, kind: EventType, reason: &str, message: &str);

    /// An event about one container of the pod; the API recorder points
    /// `involvedObject.fieldPath` at it (`spec.containers{name}`).
    fn pod_container_event(
        &self,
        pod: &Pod,
        container: &str,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        let _ = container;
        self.pod_event(pod, kind, reason, message);
    }

    /// An event about this node (Starting, NodeReady, ...).
    fn node_event(&self, kind: EventType, reason: &str, message: &str) {
        let _ = (kind, reason, message);
    }

    /// The pod with this UID is gone from the node for good: forget what
    /// was kept to correlate its events.
    fn forget_pod(&self, uid: &str) {
        let _ = uid;
    }
}

/// Writes events to the log, in the shape `kubectl get events` shows them.
pub struct LogRecorder;

impl EventRecorder for LogRecorder {
    fn pod_event(&self, pod: &Pod, kind: EventType, reason: &str, message: &str) {
        let target = format!("{}/{}", pod.namespace(), pod.name());
        match kind {
            EventType::Normal => log::info!("event: pod {target}: {reason}: {message}"),
            EventType::Warning => log::warn!("event: pod {target}: {reason}: {message}"),
        }
    }

    fn pod_container_event(
        &self,
        pod: &Pod,
        container: &str,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        let target = format!("{}/{} container {container}", pod.namespace(), pod.name());
        match kind {
            EventType::Normal => log::info!("event: pod {target}: {reason}: {message}"),
            EventType::Warning => log::warn!("event: pod {target}: {reason}: {message}"),
        }
    }

    fn node_event(&self, kind: EventType, reason: &str, message: &str) {
        match kind {
            EventType::Normal => log::info!("event: node: {reason}: {message}"),
            EventType::Warning => log::warn!("event: node: {reason}: {message}"),
        }
    }
}
