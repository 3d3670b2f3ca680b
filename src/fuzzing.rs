//! What the fuzz targets in fuzz/ call (feature `fuzzing`): one function
//! per parser of outside input, each taking the fuzzer's bytes the way the
//! kubelet receives them. A panic, a hang or unbounded memory is a finding;
//! an error is the expected answer to bad input.

use std::path::Path;

use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};
use serde_json::Value;

use crate::config::common::ManifestOrigin;
use crate::podutil::PodExt;

/// A static pod manifest (YAML or JSON, one or more documents) from the
/// manifest directory and from the manifest URL: decoding, defaults and
/// validation.
pub fn manifest(data: &[u8]) {
    for origin in [
        ManifestOrigin::File("/etc/kubernetes/manifests/fuzz.yaml"),
        ManifestOrigin::Url("http://fuzz.invalid/pods"),
    ] {
        if let Ok(pods) = crate::config::common::decode_pods(data, origin, "fuzz-node") {
            for pod in &pods {
                exercise_pod(pod);
            }
        }
    }
}

/// The --config file: KubeletConfiguration as YAML or JSON.
pub fn kubelet_config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        crate::kubeletconfig::fuzz_config_file(text);
    }
}

/// Command-line flags: NUL-separated arguments (never --config, which
/// would read a file).
pub fn flags(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let args = std::iter::once("rkubelet")
        .chain(text.split('\0'))
        .filter(|a| !a.starts_with("--config"))
        .map(String::from)
        .collect();
    crate::kubeletconfig::fuzz_flags(args);
}

/// A kubeconfig (its file references resolve under a directory that does
/// not exist).
pub fn kubeconfig(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = crate::client::kubeconfig::from_yaml(text, Path::new("/nonexistent/fuzz"));
    }
}

/// A Pod or Node as the API server sends it, then what the pod workers
/// first do with a pod: compute its actions against an empty runtime.
pub fn api_object(data: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let _ = serde_json::from_value::<Node>(v.clone());
    if let Ok(pod) = serde_json::from_value::<Pod>(v) {
        exercise_pod(&pod);
    }
}

/// One line of a watch stream.
pub fn watch_event(data: &[u8]) {
    crate::client::fuzz_watch_event(data);
}

/// The body of a chunked watch response, as the object watches'
/// multiplexer reads it: the chunked decoder and the line splitter.
pub fn watch_chunked(data: &[u8]) {
    crate::client::multiwatch::fuzz_watch_chunked(data);
}

/// The status PATCH from the API's copy of `old` to `new`.
pub fn status_patch(old: &Pod, new: &PodStatus) -> Value {
    crate::status::fuzz_status_patch(old, new)
}

/// A resource quantity ("100Mi", "1.5e3", "250m").
pub fn quantity(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::util::quantity::parse_quantity(s);
        let _ = crate::util::quantity::parse_quantity_value(s);
    }
}

/// A request to the kubelet server on 10250/10255: its head, target and
/// the authorization attributes its path maps to.
pub fn http_request(data: &[u8]) {
    crate::server::kubelet::fuzz_request(data);
}

/// A client certificate (DER) on port 10250: the user and groups the x509
/// authenticator derives from it, then the fields the certificate managers
/// read through the same parser. A user exactly when the subject has a
/// non-empty CN.
pub fn client_cert_user(data: &[u8]) {
    let user = crate::server::kubelet::fuzz_client_cert(data);
    let Ok(cert) = crate::certificate::x509::Certificate::from_der(data) else {
        assert!(user.is_none(), "a user from an unparsable certificate");
        return;
    };
    let _ = (cert.validity(), cert.subject_alt_names());
    let cn = cert.subject().common_name.filter(|cn| !cn.is_empty());
    assert_eq!(user.map(|u| u.0), cn);
}

/// The streaming URL the runtime hands back for exec/attach/port-forward,
/// which the kubelet proxies to (it relays the upgraded bytes unparsed).
pub fn stream_url(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = crate::server::streaming::proxy::StreamUrl::parse(s);
    }
}

/// One line of a container log file (CRI format).
pub fn cri_log_line(data: &[u8]) {
    crate::server::kubelet::crilog::fuzz_line(data);
}

fn exercise_pod(pod: &Pod) {
    let _ = (
        pod.full_name(),
        pod.kill_grace_seconds(),
        pod.is_host_network(),
    );
    let status = crate::container::PodStatus {
        uid: pod.uid().to_string(),
        name: pod.name().to_string(),
        namespace: pod.namespace().to_string(),
        sandboxes: Vec::new(),
        containers: Vec::new(),
    };
    let probes = crate::kuberuntime::actions::ProbeResults::default();
    let _ = crate::kuberuntime::actions::compute_pod_actions(pod, &status, &probes);
}
