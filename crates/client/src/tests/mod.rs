//! Client tests against an in-process HTTP(S) server on 127.0.0.1.

mod kubeconfig;
mod reflector;
mod rest;
mod tls;
mod watch;

pub use crate::testing::{client, CA_CRT, CLIENT_CRT, CLIENT_KEY};

pub fn pod_json(name: &str, rv: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": rv, "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "node1"},
    })
}
