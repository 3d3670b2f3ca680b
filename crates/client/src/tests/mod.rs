//! Client tests against an in-process HTTP(S) server on 127.0.0.1.

mod kubeconfig;
mod reflector;
mod rest;
mod tls;
mod watch;

use std::time::Duration;

use super::{Client, RestConfig};

pub use crate::testing::{CA_CRT, CLIENT_CRT, CLIENT_KEY};

/// A client for a plain-http test server: fast timeouts, no rate limit.
pub fn client(url: &str) -> Client {
    let mut cfg = RestConfig::new(url);
    cfg.qps = -1.0;
    cfg.timeout = Duration::from_secs(5);
    Client::new(cfg, std::sync::Arc::new(())).expect("client")
}

pub fn pod_json(name: &str, rv: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "resourceVersion": rv, "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], "nodeName": "node1"},
    })
}
