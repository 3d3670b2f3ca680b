//! What the tests against the fidelity capture share (tests/fidelity.rs,
//! tests/fidelity_writes.rs): the capture's files, the pods of its
//! `statuses.yaml`, the images they name, and a cluster that runs them as
//! the capture did.
//!
//! Fixtures: `<repo>/../shared/fidelity`, or `$RKUBELET_FIDELITY_DIR`.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use super::cluster::Cluster;
use super::*;

/// The capture's namespace, kept as it is.
pub const NS: &str = "fidelity";
/// The image `statuses.yaml` runs: the harness's busybox, tagged so.
pub const E2E_BUSYBOX: &str = "k8s.gcr.io/e2e-test-images/busybox:1.29-1";
/// The image that must stay absent (imagePullPolicy: Never).
pub const NEVER_PULLED: &str = "example.invalid/none:1";

/// `$RKUBELET_FIDELITY_DIR`, or `<repo>/../shared/fidelity`.
pub fn fidelity_dir() -> PathBuf {
    match std::env::var_os("RKUBELET_FIDELITY_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo_dir().join("../shared/fidelity"),
    }
}

/// A fixture file; a missing one fails the test, saying what it needs.
pub fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| {
        panic!(
            "the fidelity fixtures are missing: read {}: {e} (the capture of a real control \
             plane: statuses.yaml and upstream-v1.22/; set RKUBELET_FIDELITY_DIR to the \
             directory that holds them)",
            p.display()
        )
    })
}

pub fn json_file(p: &Path) -> Value {
    serde_json::from_str(&read(p)).unwrap_or_else(|e| panic!("{}: bad JSON: {e}", p.display()))
}

pub fn name_of(obj: &Value) -> String {
    obj["metadata"]["name"].as_str().unwrap_or("").to_string()
}

pub fn spec_containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers"]
        .iter()
        .filter_map(|k| spec[*k].as_array())
        .flatten()
        .collect()
}

/// The pods of statuses.yaml, in its order; each must be in namespace NS
/// and run only images this test can provide offline.
pub fn statuses_pods() -> Vec<Value> {
    let yaml_path = fidelity_dir().join("statuses.yaml");
    let yaml = read(&yaml_path);
    let mut pods = Vec::new();
    for doc in serde_norway::Deserializer::from_str(&yaml) {
        let v = Value::deserialize(doc)
            .unwrap_or_else(|e| panic!("{}: bad YAML: {e}", yaml_path.display()));
        if !v.is_null() {
            pods.push(v);
        }
    }
    assert!(!pods.is_empty(), "{}: no pods", yaml_path.display());
    for p in &pods {
        let name = name_of(p);
        assert_eq!(
            p["metadata"]["namespace"], NS,
            "statuses.yaml: pod {name} is not in namespace {NS}"
        );
        for c in spec_containers(&p["spec"]) {
            let image = c["image"].as_str().unwrap_or("");
            assert!(
                image == E2E_BUSYBOX || image == NEVER_PULLED,
                "statuses.yaml: pod {name} runs image {image:?}, which this test cannot \
                 provide offline (only {E2E_BUSYBOX} and {NEVER_PULLED})"
            );
        }
    }
    pods
}

/// The harness imports its busybox offline; the capture's pods name the
/// e2e image, so it gets that name too. The never-pulled image must be absent.
pub fn provide_images(env: &Env) {
    let list = |env: &Env| -> Vec<String> {
        env.ctr(&["images", "ls", "-q"])
            .unwrap_or_else(|e| panic!("list containerd's images: {e}"))
            .lines()
            .map(|l| l.trim().to_string())
            .collect()
    };
    if !list(env).iter().any(|i| i == E2E_BUSYBOX) {
        env.ctr(&["images", "tag", BUSYBOX, E2E_BUSYBOX])
            .unwrap_or_else(|e| panic!("tag {BUSYBOX} as {E2E_BUSYBOX}: {e}"));
    }
    let have = list(env);
    let (tagged, never) = (
        have.contains(&E2E_BUSYBOX.into()),
        have.contains(&NEVER_PULLED.into()),
    );
    assert!(
        tagged,
        "{E2E_BUSYBOX} missing after tagging; containerd has {have:?}"
    );
    assert!(
        !never,
        "{NEVER_PULLED} must be absent (st-neverpull expects ErrImageNeverPull)"
    );
}

/// A cluster as in the capture: the double emulates its control plane,
/// v1.22 (it drops what a v1.22 server drops, and rkubelet adapts to it as
/// to the real one), the images are provided, and `pods` exist in
/// namespace NS, bound, before the kubelet starts. They were bound to the
/// capture's node; here the node is NODE. The kubelet is not started.
pub fn capture_cluster(name: &str, n: u32, pods: &[Value]) -> Cluster {
    capture_cluster_at(name, n, pods, "1.22")
}

/// As [`capture_cluster`], the double emulating control plane `version`.
pub fn capture_cluster_at(name: &str, n: u32, pods: &[Value], version: &str) -> Cluster {
    let cl = Cluster::with_version(name, n, version);
    provide_images(&cl.env);
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}});
    cl.api.must("POST", "/api/v1/namespaces", Some(&ns), &[201]);
    for p in pods {
        let mut p = p.clone();
        p["spec"]["nodeName"] = json!(NODE);
        let path = format!("/api/v1/namespaces/{NS}/pods");
        cl.api.must("POST", &path, Some(&p), &[201]);
    }
    cl
}
