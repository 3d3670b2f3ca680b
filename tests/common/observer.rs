//! The observer: what the kubelet created, read from containerd's CRI
//! plugin state and `ctr`, independently of the kubelet's own reports.

use std::collections::{BTreeMap, HashSet};

/// The CRI plugin's persisted status of a container
/// (ROOT/io.containerd.grpc.v1.cri/containers/ID/status), times in ns.
#[derive(Debug, Clone, Default)]
pub struct CriStatus {
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i64,
    pub reason: String,
}

/// One containerd container of the k8s.io namespace, as `ctr` shows it.
#[derive(Debug, Clone)]
pub struct Obj {
    pub id: String,
    /// "sandbox" or "container" (label io.cri-containerd.kind).
    pub kind: String,
    pub labels: BTreeMap<String, String>,
    /// CRI annotations of an app container (from the CRI plugin's metadata).
    pub annotations: BTreeMap<String, String>,
    pub created_at: String,
    /// A task in state RUNNING.
    pub running: bool,
    pub status: Option<CriStatus>,
}

impl Obj {
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels.get(k).map(String::as_str)
    }
    pub fn pod_name(&self) -> &str {
        self.label("io.kubernetes.pod.name").unwrap_or("")
    }
    pub fn pod_uid(&self) -> &str {
        self.label("io.kubernetes.pod.uid").unwrap_or("")
    }
    pub fn container_name(&self) -> &str {
        self.label("io.kubernetes.container.name").unwrap_or("")
    }
    pub fn is_sandbox(&self) -> bool {
        self.kind == "sandbox"
    }
    pub fn is_container(&self) -> bool {
        self.kind == "container"
    }
    pub fn restart_count(&self) -> Option<u32> {
        self.annotations
            .get("io.kubernetes.container.restartCount")
            .and_then(|v| v.parse().ok())
    }
}

/// All k8s.io containers at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub objs: Vec<Obj>,
}

impl Snapshot {
    pub fn sandboxes(&self, pod: &str) -> Vec<&Obj> {
        self.objs
            .iter()
            .filter(|o| o.is_sandbox() && o.pod_name() == pod)
            .collect()
    }
    pub fn containers(&self, pod: &str) -> Vec<&Obj> {
        self.objs
            .iter()
            .filter(|o| o.is_container() && o.pod_name() == pod)
            .collect()
    }
    /// Instances of one container of a pod.
    pub fn instances(&self, pod: &str, container: &str) -> Vec<&Obj> {
        self.objs
            .iter()
            .filter(|o| o.is_container() && o.pod_name() == pod && o.container_name() == container)
            .collect()
    }
    /// The one running instance of a container, if any.
    pub fn running(&self, pod: &str, container: &str) -> Option<&Obj> {
        self.instances(pod, container)
            .into_iter()
            .find(|o| o.running)
    }
    pub fn ids(&self) -> HashSet<String> {
        self.objs.iter().map(|o| o.id.clone()).collect()
    }
    pub fn summary(&self) -> String {
        let mut s = String::new();
        for o in &self.objs {
            s.push_str(&format!(
                "  {} {:9} pod={} uid={} ctr={} running={} restartCount={:?} exit={:?}\n",
                &o.id[..12.min(o.id.len())],
                o.kind,
                o.pod_name(),
                o.pod_uid(),
                o.container_name(),
                o.running,
                o.restart_count(),
                o.status.as_ref().map(|s| (s.exit_code, s.finished_at != 0)),
            ));
        }
        s
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (protobuf Any values in ctr's JSON).
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.bytes() {
        if c == b'=' {
            break;
        }
        if c.is_ascii_whitespace() {
            continue;
        }
        let v = B64.iter().position(|&b| b == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

pub(crate) fn str_map(v: &serde_json::Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}
