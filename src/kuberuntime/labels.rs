//! The labels and annotations the kubelet puts on sandboxes and containers
//! (upstream `kuberuntime/labels.go`). They are how a restarted kubelet
//! recognises its own pods: same keys as upstream, so a node can switch
//! between the two kubelets without orphaning containers.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use md5::{Digest, Md5};

use crate::podutil::PodExt;

pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";

pub const CONTAINER_HASH_ANNOTATION: &str = "io.kubernetes.container.hash";
pub const CONTAINER_RESTART_COUNT_ANNOTATION: &str = "io.kubernetes.container.restartCount";
pub const TERMINATION_MESSAGE_PATH_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePath";
pub const TERMINATION_MESSAGE_POLICY_ANNOTATION: &str =
    "io.kubernetes.container.terminationMessagePolicy";
pub const POD_TERMINATION_GRACE_PERIOD_ANNOTATION: &str =
    "io.kubernetes.pod.terminationGracePeriod";
pub const CONTAINER_PORTS_ANNOTATION: &str = "io.kubernetes.container.ports";

/// Labels of a pod's sandbox: the pod's own labels plus the kubelet's.
pub fn sandbox_labels(pod: &Pod) -> HashMap<String, String> {
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.extend(pod_identity_labels(pod));
    labels
}

pub fn sandbox_annotations(pod: &Pod) -> HashMap<String, String> {
    pod.metadata
        .annotations
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

pub fn container_labels(pod: &Pod, container: &Container) -> HashMap<String, String> {
    let mut labels = pod_identity_labels(pod);
    labels.insert(CONTAINER_NAME_LABEL.into(), container.name.clone());
    labels
}

pub fn container_annotations(
    pod: &Pod,
    container: &Container,
    restart_count: u32,
) -> HashMap<String, String> {
    let mut a = HashMap::new();
    a.insert(CONTAINER_HASH_ANNOTATION.into(), container_hash(container));
    a.insert(
        CONTAINER_RESTART_COUNT_ANNOTATION.into(),
        restart_count.to_string(),
    );
    a.insert(
        TERMINATION_MESSAGE_PATH_ANNOTATION.into(),
        container
            .termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into()),
    );
    a.insert(
        TERMINATION_MESSAGE_POLICY_ANNOTATION.into(),
        container
            .termination_message_policy
            .clone()
            .unwrap_or_else(|| "File".into()),
    );
    if let Some(grace) = pod.spec_or_default().termination_grace_period_seconds {
        a.insert(
            POD_TERMINATION_GRACE_PERIOD_ANNOTATION.into(),
            grace.to_string(),
        );
    }
    if let Some(ports) = container.ports.as_ref().filter(|p| !p.is_empty()) {
        if let Ok(json) = serde_json::to_string(ports) {
            a.insert(CONTAINER_PORTS_ANNOTATION.into(), json);
        }
    }
    a
}

fn pod_identity_labels(pod: &Pod) -> HashMap<String, String> {
    HashMap::from([
        (POD_NAME_LABEL.to_string(), pod.name().to_string()),
        (POD_NAMESPACE_LABEL.to_string(), pod.namespace().to_string()),
        (POD_UID_LABEL.to_string(), pod.uid().to_string()),
    ])
}

/// A stable digest of a container's spec. A running container whose hash
/// differs from its spec's is restarted; the same binary always computes the
/// same hash, so a restarted kubelet adopts what it created. Resources are
/// left out, as upstream does, so a resize alone does not restart.
pub fn container_hash(container: &Container) -> String {
    let mut c = container.clone();
    c.resources = None;
    let json = serde_json::to_vec(&c).unwrap_or_default();
    let digest = Md5::digest(&json);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// What a runtime object's labels and annotations say about the pod and
/// container it belongs to; `None` when it is not the kubelet's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIdentity {
    pub uid: String,
    pub name: String,
    pub namespace: String,
}

pub fn pod_identity(labels: &HashMap<String, String>) -> Option<PodIdentity> {
    Some(PodIdentity {
        uid: labels.get(POD_UID_LABEL)?.clone(),
        name: labels.get(POD_NAME_LABEL).cloned().unwrap_or_default(),
        namespace: labels.get(POD_NAMESPACE_LABEL).cloned().unwrap_or_default(),
    })
}

pub fn restart_count(annotations: &HashMap<String, String>) -> u32 {
    annotations
        .get(CONTAINER_RESTART_COUNT_ANNOTATION)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(image: &str) -> Container {
        Container {
            name: "app".into(),
            image: Some(image.into()),
            ..Default::default()
        }
    }

    #[test]
    fn hash_is_stable_and_tracks_the_spec() {
        let a = container("busybox:1.36");
        assert_eq!(container_hash(&a), container_hash(&a.clone()));
        assert_ne!(
            container_hash(&a),
            container_hash(&container("busybox:1.37"))
        );
        let mut resized = a.clone();
        resized.resources = Some(Default::default());
        assert_eq!(container_hash(&a), container_hash(&resized));
        assert_eq!(container_hash(&a).len(), 16);
    }

    #[test]
    fn identity_round_trips_through_labels() {
        let mut pod = Pod::default();
        pod.metadata.name = Some("web-node1".into());
        pod.metadata.namespace = Some("default".into());
        pod.metadata.uid = Some("abc".into());
        let labels = container_labels(&pod, &container("x"));
        let id = pod_identity(&labels).unwrap();
        assert_eq!(id.uid, "abc");
        assert_eq!(id.name, "web-node1");
        assert_eq!(labels[CONTAINER_NAME_LABEL], "app");
        assert!(pod_identity(&HashMap::new()).is_none());
    }
}
