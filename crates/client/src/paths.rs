//! REST paths of the resources the kubelet uses, and query building.
//! Names and namespaces are percent-encoded as path segments.

use std::fmt::Write;

const CORE: &str = "/api/v1";
const COORDINATION: &str = "/apis/coordination.k8s.io/v1";
const CERTIFICATES: &str = "/apis/certificates.k8s.io/v1";
const NODE: &str = "/apis/node.k8s.io/v1";

fn namespaced(group: &str, ns: &str, resource: &str) -> String {
    format!("{group}/namespaces/{}/{resource}", segment(ns))
}

fn named(collection: String, name: &str) -> String {
    format!("{collection}/{}", segment(name))
}

/// Pods in every namespace (the kubelet lists with a spec.nodeName field selector).
pub fn all_pods() -> String {
    format!("{CORE}/pods")
}

pub fn pods(ns: &str) -> String {
    namespaced(CORE, ns, "pods")
}

pub fn pod(ns: &str, name: &str) -> String {
    named(pods(ns), name)
}

pub fn pod_status(ns: &str, name: &str) -> String {
    format!("{}/status", pod(ns, name))
}

pub fn nodes() -> String {
    format!("{CORE}/nodes")
}

pub fn node(name: &str) -> String {
    named(nodes(), name)
}

pub fn node_status(name: &str) -> String {
    format!("{}/status", node(name))
}

pub fn leases(ns: &str) -> String {
    namespaced(COORDINATION, ns, "leases")
}

pub fn lease(ns: &str, name: &str) -> String {
    named(leases(ns), name)
}

pub fn events(ns: &str) -> String {
    namespaced(CORE, ns, "events")
}

pub fn event(ns: &str, name: &str) -> String {
    named(events(ns), name)
}

/// Services in every namespace (the kubelet's service env vars).
pub fn services() -> String {
    format!("{CORE}/services")
}

pub fn namespace(name: &str) -> String {
    format!("{CORE}/namespaces/{}", segment(name))
}

pub fn configmap(ns: &str, name: &str) -> String {
    named(namespaced(CORE, ns, "configmaps"), name)
}

pub fn secret(ns: &str, name: &str) -> String {
    named(namespaced(CORE, ns, "secrets"), name)
}

/// TokenRequest for a service account's projected token.
pub fn service_account_token(ns: &str, name: &str) -> String {
    format!(
        "{}/token",
        named(namespaced(CORE, ns, "serviceaccounts"), name)
    )
}

pub fn persistent_volume_claim(ns: &str, name: &str) -> String {
    named(namespaced(CORE, ns, "persistentvolumeclaims"), name)
}

pub fn persistent_volume(name: &str) -> String {
    format!("{CORE}/persistentvolumes/{}", segment(name))
}

pub fn csi_nodes() -> String {
    "/apis/storage.k8s.io/v1/csinodes".into()
}

pub fn csi_node(name: &str) -> String {
    named(csi_nodes(), name)
}

pub fn csi_driver(name: &str) -> String {
    named("/apis/storage.k8s.io/v1/csidrivers".into(), name)
}

pub fn volume_attachment(name: &str) -> String {
    named("/apis/storage.k8s.io/v1/volumeattachments".into(), name)
}

pub fn runtime_classes() -> String {
    format!("{NODE}/runtimeclasses")
}

pub fn certificate_signing_requests() -> String {
    format!("{CERTIFICATES}/certificatesigningrequests")
}

pub fn certificate_signing_request(name: &str) -> String {
    named(certificate_signing_requests(), name)
}

/// `path?k=v&...` (or `&` when `path` has a query), values percent-encoded:
/// `with_query(&all_pods(), &[("fieldSelector", "spec.nodeName=n1")])`.
pub fn with_query(path: &str, params: &[(&str, &str)]) -> String {
    let mut out = path.to_string();
    let mut sep = if path.contains('?') { '&' } else { '?' };
    for (k, v) in params {
        let _ = write!(out, "{sep}{}={}", query_component(k), query_component(v));
        sep = '&';
    }
    out
}

/// Percent-encodes all but RFC 3986 unreserved characters (and ':' and '@',
/// which are fine in a path segment, e.g. `system:node:n1`).
fn segment(s: &str) -> String {
    encode(s, |b| b == b':' || b == b'@')
}

fn query_component(s: &str) -> String {
    encode(s, |_| false)
}

fn encode(s: &str, keep: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') || keep(b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(
            pod_status("default", "x"),
            "/api/v1/namespaces/default/pods/x/status"
        );
        assert_eq!(node_status("n1"), "/api/v1/nodes/n1/status");
        assert_eq!(
            lease("kube-node-lease", "n1"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
        );
        assert_eq!(events("ns"), "/api/v1/namespaces/ns/events");
        assert_eq!(
            service_account_token("ns", "default"),
            "/api/v1/namespaces/ns/serviceaccounts/default/token"
        );
        assert_eq!(pod("ns", "a/b"), "/api/v1/namespaces/ns/pods/a%2Fb");
    }

    #[test]
    fn queries() {
        assert_eq!(
            with_query(&all_pods(), &[("fieldSelector", "spec.nodeName=node1")]),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode1"
        );
        assert_eq!(
            with_query(
                "/api/v1/pods?a=1",
                &[("watch", "1"), ("resourceVersion", "5")]
            ),
            "/api/v1/pods?a=1&watch=1&resourceVersion=5"
        );
    }
}
