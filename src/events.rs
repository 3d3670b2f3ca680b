//! Events the kubelet records about pods (upstream `pkg/kubelet/events`).
//! Standalone, they go to the log; with an API server a recorder that
//! posts them takes this trait's place.

use k8s_openapi::api::core::v1::Pod;

use crate::podutil::PodExt;

// Reasons, as upstream names them.
pub const PULLING_IMAGE: &str = "Pulling";
pub const PULLED_IMAGE: &str = "Pulled";
pub const FAILED_TO_PULL_IMAGE: &str = "Failed";
pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
pub const BACK_OFF_PULL_IMAGE: &str = "BackOff";
pub const CREATED_CONTAINER: &str = "Created";
pub const STARTED_CONTAINER: &str = "Started";
pub const FAILED_TO_CREATE_CONTAINER: &str = "Failed";
pub const FAILED_TO_START_CONTAINER: &str = "Failed";
pub const KILLING_CONTAINER: &str = "Killing";
pub const BACK_OFF_START_CONTAINER: &str = "BackOff";
pub const FAILED_CREATE_POD_SANDBOX: &str = "FailedCreatePodSandBox";
pub const SANDBOX_CHANGED: &str = "SandboxChanged";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

pub trait EventRecorder: Send + Sync {
    fn pod_event(&self, pod: &Pod, kind: EventType, reason: &str, message: &str);
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
}
