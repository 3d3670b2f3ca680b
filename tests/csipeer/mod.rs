//! The CSI driver peer (tests/plugins/csidriver.py) and what the CSI
//! tests do with it: start it, read its calls, play the attach-detach
//! controller, make PVs, claims and pods. Shared by tests/csi.rs and
//! tests/csi_block.rs.

#![allow(dead_code)]

use std::ffi::OsString;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

use super::common::cluster::*;
use super::common::peer::Peer;
use super::common::*;

pub const DRIVER: &str = "csi.example.com";

/// One run of the driver peer; killed when dropped.
pub struct Driver {
    pub peer: Peer,
    pub data: PathBuf,
}

impl Driver {
    pub fn start(cl: &Cluster, name: &str, args: &[&str]) -> Driver {
        let sock_dir = cl.env.root.join("plugins").join(name);
        fs::create_dir_all(&sock_dir).unwrap();
        let dir = cl.env.dir.join(format!("driver-{name}"));
        let data = dir.join("data");
        let mut all: Vec<OsString> = vec![
            "--name".into(),
            name.into(),
            "--csi-address".into(),
            sock_dir.join("csi.sock").into(),
            "--registry".into(),
            cl.env.root.join("plugins_registry").into(),
            "--data".into(),
            data.clone().into(),
        ];
        all.extend(args.iter().map(OsString::from));
        Driver {
            peer: Peer::spawn(dir, "csidriver.py", &all),
            data,
        }
    }

    /// The calls the driver answered, by RPC name.
    pub fn calls(&self, rpc: &str) -> Vec<Value> {
        self.peer.calls(rpc)
    }

    pub fn ok_calls(&self, rpc: &str, volume_id: &str) -> Vec<Value> {
        self.calls(rpc)
            .into_iter()
            .filter(|c| c["code"] == "OK" && c["request"]["volume_id"] == volume_id)
            .collect()
    }

    pub fn heal(&self) {
        self.peer.set_control(json!({"fail": {}, "delay": {}}));
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.peer.kill();
        // The loop devices that showed its block volumes (a volume that
        // was unstaged has released its own).
        for vol in fs::read_dir(&self.data).into_iter().flatten().flatten() {
            if let Ok(dev) = fs::read_to_string(vol.path().join("loop")) {
                let _ = Command::new("losetup").args(["-d", dev.trim()]).status();
            }
        }
    }
}

pub fn create(cl: &Cluster, path: &str, obj: Value) -> Value {
    cl.api.must("POST", path, Some(&obj), &[201])
}

pub fn csi_driver_object(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": name}, "spec": spec})
}

/// A PV of `driver` with `handle`, and a claim bound to it.
pub fn csi_pv_and_claim(
    cl: &Cluster,
    pv: &str,
    claim: &str,
    driver: &str,
    handle: &str,
    owner: Option<Value>,
) {
    create(
        cl,
        "/api/v1/persistentvolumes",
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
               "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                        "csi": {"driver": driver, "volumeHandle": handle, "fsType": "ext4",
                                "volumeAttributes": {"tier": "gold"}}}}),
    );
    bound_claim(
        &cl.api,
        claim,
        pv,
        owner.map_or(json!({}), |o| json!({"ownerReferences": o})),
    );
}

pub fn sha256_hex(s: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Plays the attach-detach controller: the VolumeAttachment upstream
/// names `csi-<sha256(handle + driver + node)>`, attached or failed.
pub fn attach(cl: &Cluster, driver: &str, handle: &str, pv: &str, status: Value) {
    let node = NODE.to_string();
    let name = format!("csi-{}", sha256_hex(&format!("{handle}{driver}{node}")));
    create(
        cl,
        "/apis/storage.k8s.io/v1/volumeattachments",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
               "spec": {"attacher": driver, "nodeName": node, "source": {"persistentVolumeName": pv}}}),
    );
    let attached = status["attached"] == true;
    cl.api.must(
        "PATCH",
        &format!("/apis/storage.k8s.io/v1/volumeattachments/{name}/status"),
        Some(&json!({ "status": status })),
        &[200],
    );
    if attached {
        // and lists it in the node's volumesAttached
        let node = cl.api.node().unwrap();
        let mut list = node["status"]["volumesAttached"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        list.push(
            json!({"name": format!("kubernetes.io/csi/{driver}^{handle}"), "devicePath": ""}),
        );
        cl.api.must(
            "PATCH",
            &format!("/api/v1/nodes/{NODE}/status"),
            Some(&json!({"status": {"volumesAttached": list}})),
            &[200],
        );
    }
}

pub fn pod_with(name: &str, script: &str, volumes: Value) -> Value {
    let mut p = api_pod(name, script);
    p["spec"]["volumes"] = volumes;
    p["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    p
}

/// Writes a file named after the pod into its volume, then sleeps.
pub fn writer(name: &str) -> String {
    format!("echo {name} > /data/{name}; exec sleep 3600")
}

pub fn event_with(cl: &mut Cluster, pod: &str, reason: &str, text: &str) -> String {
    let ev = cl.eventually(
        secs(40),
        &format!("a {reason} event of {pod} with {text:?}"),
        |api| {
            api.events_for("default", pod).into_iter().find(|e| {
                e["reason"] == reason && e["message"].as_str().unwrap_or("").contains(text)
            })
        },
    );
    ev["message"].as_str().unwrap_or("").to_string()
}

pub fn delete_now(cl: &Cluster, name: &str) {
    cl.api.must(
        "DELETE",
        &pod_path(name),
        Some(&json!({"gracePeriodSeconds": 0})),
        &[200],
    );
}

pub fn csinode(api: &Api) -> Option<Value> {
    api.get(&format!("/apis/storage.k8s.io/v1/csinodes/{}", NODE))
}
