//! Kubelet-internal pod types and helpers (upstream pkg/kubelet/types).

use crate::podutil::PodExt;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// Annotation recording which source (file, http, api) a pod came from.
pub const CONFIG_SOURCE_ANNOTATION: &str = "kubernetes.io/config.source";
/// Annotation marking a mirror pod (the API-server copy of a static pod).
pub const CONFIG_MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Annotation with the time the kubelet first saw the pod.
pub const CONFIG_FIRST_SEEN_ANNOTATION: &str = "kubernetes.io/config.seen";
/// Annotation with the hash (the generated UID) of a static pod manifest.
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";

/// Pods read from the static pod path.
pub const FILE_SOURCE: &str = "file";
/// Pods read from the static pod URL.
pub const HTTP_SOURCE: &str = "http";
/// Pods bound to this node through the API server.
pub const API_SOURCE: &str = "api";

/// Namespace used when a manifest does not name one.
pub const NAMESPACE_DEFAULT: &str = "default";

/// What a `PodUpdate` asks the receiver to do with its pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PodOperation {
    /// The complete current set of pods of one source.
    Set,
    /// Pods new to this source.
    Add,
    /// Pods gracefully deleted from this source (deletionTimestamp set).
    Delete,
    /// Pods removed from this source.
    Remove,
    /// Pods whose spec, labels or annotations changed.
    Update,
    /// Pods whose status differs from what the kubelet believes.
    Reconcile,
}

impl fmt::Display for PodOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            PodOperation::Set => "SET",
            PodOperation::Add => "ADD",
            PodOperation::Delete => "DELETE",
            PodOperation::Remove => "REMOVE",
            PodOperation::Update => "UPDATE",
            PodOperation::Reconcile => "RECONCILE",
        };
        f.write_str(s)
    }
}

/// One change sent on a config channel. Pods are shared (`Arc`): the config
/// store, the pod manager, the pod workers and the prober all hold the same
/// copy, and a changed pod is a new `Arc` (copy on write).
#[derive(Clone, Debug, PartialEq)]
pub struct PodUpdate {
    pub pods: Vec<Arc<Pod>>,
    pub op: PodOperation,
    pub source: String,
}

impl PodUpdate {
    /// A full snapshot of `source`'s pods.
    pub fn set(source: &str, pods: Vec<Pod>) -> Self {
        PodUpdate {
            pods: pods.into_iter().map(Arc::new).collect(),
            op: PodOperation::Set,
            source: source.to_string(),
        }
    }
}

/// A pod's phase (core/v1 PodPhase), parsed from the API's string once so
/// the kubelet compares variants, not strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodPhase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl PodPhase {
    /// A missing phase is Pending, as the API server defaults it; an
    /// unrecognised one is Unknown.
    pub fn parse(phase: Option<&str>) -> PodPhase {
        match phase {
            None | Some("") | Some("Pending") => PodPhase::Pending,
            Some("Running") => PodPhase::Running,
            Some("Succeeded") => PodPhase::Succeeded,
            Some("Failed") => PodPhase::Failed,
            Some(_) => PodPhase::Unknown,
        }
    }

    pub fn of(status: Option<&k8s_openapi::api::core::v1::PodStatus>) -> PodPhase {
        PodPhase::parse(status.and_then(|s| s.phase.as_deref()))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PodPhase::Pending => "Pending",
            PodPhase::Running => "Running",
            PodPhase::Succeeded => "Succeeded",
            PodPhase::Failed => "Failed",
            PodPhase::Unknown => "Unknown",
        }
    }

    /// Succeeded or Failed: final, never left (upstream IsPodPhaseTerminal).
    pub fn is_terminal(self) -> bool {
        matches!(self, PodPhase::Succeeded | PodPhase::Failed)
    }
}

impl std::fmt::Display for PodPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The source a pod came from, from its config.source annotation; None
/// when it has none.
pub fn get_pod_source(pod: &Pod) -> Option<&str> {
    pod.annotation(CONFIG_SOURCE_ANNOTATION)
}

/// True for pods that did not come from the API server (file or http).
pub fn is_static_pod(pod: &Pod) -> bool {
    get_pod_source(pod).is_some_and(|source| source != API_SOURCE)
}

/// True for the API-server copies the kubelet creates for static pods.
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.annotation(CONFIG_MIRROR_ANNOTATION).is_some()
}

/// The current time in whole Unix seconds (0 before the epoch), the unit
/// certificate validity and expiry checks compare in.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The current time as RFC 3339 with nanoseconds, as the config.seen annotation holds it.
pub fn now_rfc3339_nano() -> String {
    // jiff's clock needs its "std" feature, which k8s-openapi does not enable.
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX);
    let nanos = i32::try_from(since_epoch.subsec_nanos()).unwrap_or(0);
    k8s_openapi::jiff::Timestamp::new(secs, nanos)
        .map(|ts| ts.to_string())
        .unwrap_or_default()
}

/// Time since the kubelet first saw `pod` (its config.seen annotation).
pub fn since_first_seen(pod: &Pod) -> Option<std::time::Duration> {
    let seen: k8s_openapi::jiff::Timestamp =
        pod.annotation(CONFIG_FIRST_SEEN_ANNOTATION)?.parse().ok()?;
    let seen = std::time::SystemTime::from(seen);
    std::time::SystemTime::now().duration_since(seen).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn pod_with_source(source: Option<&str>) -> Pod {
        let annotations =
            source.map(|s| BTreeMap::from([(CONFIG_SOURCE_ANNOTATION.to_string(), s.to_string())]));
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("prod".into()),
                uid: Some("u1".into()),
                annotations,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn full_name_and_source() {
        let pod = pod_with_source(Some(FILE_SOURCE));
        assert_eq!(pod.full_name(), "web_prod");
        assert_eq!(pod.namespaced_name(), "prod/web");
        assert_eq!(get_pod_source(&pod), Some("file"));
        assert!(is_static_pod(&pod));
        assert!(!is_static_pod(&pod_with_source(Some(API_SOURCE))));
        assert!(!is_static_pod(&pod_with_source(None)));
        assert!(get_pod_source(&pod_with_source(None)).is_none());
    }

    #[test]
    fn timestamp_is_rfc3339() {
        let ts = now_rfc3339_nano();
        assert!(ts.ends_with('Z') && ts.contains('T'), "{ts}");
    }
}
