//! `--emulate-version`: the double answers as control-plane release 1.22,
//! a release between (1.28) and 1.34 do, for what a kubelet can observe:
//! `/version`, the kubelet CSR approval and signing rules, the fields a
//! pod or node write keeps, and the ephemeral containers subresource.

mod support;

use base64::Engine;
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

const SMP: &str = "application/strategic-merge-patch+json";
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const PODS: &str = "/api/v1/namespaces/default/pods";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// What an ECDSA kubelet sends (no "key encipherment").
const CLIENT_NO_KE: &[&str] = &["digital signature", "client auth"];
const CLIENT_RSA: &[&str] = &["digital signature", "key encipherment", "client auth"];

fn at(minor: u32, name: &str) -> Double {
    spawn(
        &format!("v{minor}-{name}"),
        &["--emulate-version", &format!("1.{minor}")],
    )
}

#[test]
fn version_endpoint_answers_as_the_release() {
    for minor in [22, 28, 34] {
        let d = at(minor, "version");
        let (code, v) = Client::admin(&d).get("/version");
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["major"], "1");
        assert_eq!(v["minor"], minor.to_string());
        assert_eq!(v["gitVersion"], format!("v1.{minor}.0"));
        for k in [
            "gitCommit",
            "gitTreeState",
            "buildDate",
            "goVersion",
            "compiler",
            "platform",
        ] {
            assert!(v[k].is_string(), "1.{minor}: {k} in {v}");
        }
        // The compatibility-version fields came in 1.33.
        assert_eq!(v.get("emulationMinor").is_some(), minor >= 33, "{v}");
    }
    // Without the flag: the newest.
    let d = spawn("v-default", &[]);
    assert_eq!(Client::admin(&d).get("/version").1["minor"], "34");
}

#[test]
fn bad_emulate_version_exits_naming_the_flag_and_range() {
    for bad in ["1.21", "1.35", "abc"] {
        let out = Command::new(env!("CARGO_BIN_EXE_apiserver-double"))
            .arg("--dir")
            .arg(tmpdir("v-bad").path())
            .args(["--emulate-version", bad])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .expect("run apiserver-double");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--emulate-version"), "{bad}: {err}");
        assert!(err.contains("1.22 to 1.34"), "{bad}: {err}");
        assert!(out.stdout.is_empty(), "{bad}: did not start");
    }
}

// ---------------------------------------------------------------- CSRs

fn request_pem(cn: &str, sans: &[&str]) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let names: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut p = rcgen::CertificateParams::new(names).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.serialize_request(&key).unwrap().pem().unwrap()
}

fn csr(name: &str, pem: &str, signer: &str, usages: &[&str]) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                 "signerName": signer, "usages": usages}})
}

/// The CSR once it is issued or has failed, or as it is after 10 s.
fn settled(c: &Client, name: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = c.get(&format!("{CSRS}/{name}"));
        let failed = v["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Failed"));
        if v["status"]["certificate"].is_string() || failed || Instant::now() > until {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn condition_types(v: &Value) -> Vec<String> {
    v["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["type"].as_str().map(String::from))
        .collect()
}

/// The two usage sets of a bootstrapping kubelet's client CSR: (conditions
/// of the one without key encipherment, of the RSA-style one).
fn client_csr_outcomes(minor: u32) -> (Vec<String>, Vec<String>) {
    let d = at(minor, "csr");
    let boot = Client::token(&d, "bootstrap-token");
    let pem = request_pem("system:node:n1", &[]);
    for (name, usages) in [("no-ke", CLIENT_NO_KE), ("rsa", CLIENT_RSA)] {
        let (code, v) = boot.post(CSRS, csr(name, &pem, CLIENT_SIGNER, usages));
        assert_eq!(code, 201, "{v}");
    }
    let rsa = settled(&boot, "rsa");
    assert!(rsa["status"]["certificate"].is_string(), "1.{minor}: {rsa}");
    // The controllers have run several times since the RSA-style one was
    // approved: the other is as it will stay.
    std::thread::sleep(Duration::from_millis(1200));
    let no_ke = boot.get(&format!("{CSRS}/no-ke")).1;
    let issued = no_ke["status"]["certificate"].is_string();
    assert_eq!(
        issued,
        condition_types(&no_ke) == ["Approved"],
        "1.{minor}: {no_ke}"
    );
    (condition_types(&no_ke), condition_types(&rsa))
}

#[test]
fn client_csr_without_key_encipherment_is_approved_from_1_25() {
    let approved = vec!["Approved".to_string()];
    assert_eq!(client_csr_outcomes(22), (vec![], approved.clone()));
    assert_eq!(
        client_csr_outcomes(28),
        (approved.clone(), approved.clone())
    );
    assert_eq!(client_csr_outcomes(34), (approved.clone(), approved));
}

/// A node's serving CSR without key encipherment, approved by hand: the
/// kubelet-serving signer's verdict.
fn serving_csr_outcome(minor: u32) -> Value {
    let d = at(minor, "serving");
    let node = Client::kubelet(&d);
    let admin = Client::admin(&d);
    let pem = request_pem("system:node:node-a", &["node-a", "10.0.0.7"]);
    let usages = ["digital signature", "server auth"];
    let (code, v) = node.post(CSRS, csr("serving", &pem, SERVING_SIGNER, &usages));
    assert_eq!(code, 201, "{v}");
    let mut approve = v.clone();
    approve["status"]["conditions"] =
        json!([{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}]);
    let (code, v) = admin.put(&format!("{CSRS}/serving/approval"), approve);
    assert_eq!(code, 200, "{v}");
    settled(&admin, "serving")
}

#[test]
fn serving_csr_without_key_encipherment_is_signed_from_1_25() {
    let old = serving_csr_outcome(22);
    assert_eq!(condition_types(&old), ["Approved", "Failed"], "{old}");
    let failed = &old["status"]["conditions"][1];
    assert_eq!(failed["reason"], "SignerValidationFailure");
    assert_eq!(
        failed["message"],
        "usages did not match [digital signature key encipherment server auth]"
    );
    assert!(old["status"]["certificate"].is_null());
    for minor in [28, 34] {
        let v = serving_csr_outcome(minor);
        assert!(v["status"]["certificate"].is_string(), "1.{minor}: {v}");
    }
}

// ---------------------------------------------------------------- fields

/// A pod with a sidecar, bound to node-a, after a kubelet's status patch
/// carrying every version-dependent field: (created pod, patched pod).
fn pod_after_status_patch(minor: u32) -> (Value, Value) {
    let d = at(minor, "fields");
    let admin = Client::admin(&d);
    let mut p = pod("p", Some("node-a"));
    p["spec"]["initContainers"] =
        json!([{"name": "side", "image": "busybox", "restartPolicy": "Always"}]);
    let (code, created) = admin.post(PODS, p);
    assert_eq!(code, 201, "{created}");
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": "10.0.0.7",
        "hostIPs": [{"ip": "10.0.0.7"}],
        "observedGeneration": 1,
        "resize": "InProgress",
        "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}],
        "containerStatuses": [{
            "name": "c", "ready": true, "restartCount": 0, "image": "busybox:1.36", "imageID": "",
            "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}},
            "volumeMounts": [{"name": "v", "mountPath": "/v", "readOnly": true, "recursiveReadOnly": "Disabled"}],
            "user": {"linux": {"uid": 0, "gid": 0}},
            "allocatedResources": {"cpu": "100m"},
            "resources": {"requests": {"cpu": "100m"}}
        }]
    }});
    let kubelet = Client::kubelet(&d);
    let (code, patched) = kubelet.patch(&format!("{PODS}/p/status"), SMP, status);
    assert_eq!(code, 200, "{patched}");
    // What is stored is what was answered.
    assert_eq!(
        admin.get(&format!("{PODS}/p")).1["status"],
        patched["status"]
    );
    (created, patched)
}

fn has(v: &Value, path: &[&str]) -> bool {
    let mut cur = v;
    for k in path {
        match cur.get(*k) {
            Some(x) => cur = x,
            None => return false,
        }
    }
    true
}

#[test]
fn status_patch_keeps_only_the_fields_the_release_keeps() {
    let cs = |p: &Value| p["status"]["containerStatuses"][0].clone();
    let (created, old) = pod_after_status_patch(22);
    assert!(!has(
        &created["spec"]["initContainers"][0],
        &["restartPolicy"]
    ));
    assert!(!has(&old, &["status", "hostIPs"]));
    assert!(!has(&old, &["status", "observedGeneration"]));
    assert!(!has(&old, &["status", "resize"]));
    assert!(!has(
        &old["status"]["conditions"][0],
        &["observedGeneration"]
    ));
    for k in ["volumeMounts", "user", "allocatedResources", "resources"] {
        assert!(!has(&cs(&old), &[k]), "1.22 keeps {k}: {old}");
    }
    assert_eq!(old["status"]["hostIP"], "10.0.0.7", "{old}");

    // 1.28: hostIPs and sidecars exist but their gates are off; in-place
    // resize (1.27) is alpha; volumeMounts (1.30) and user (1.31) are unknown.
    let (created, mid) = pod_after_status_patch(28);
    assert!(!has(
        &created["spec"]["initContainers"][0],
        &["restartPolicy"]
    ));
    assert!(!has(&mid, &["status", "hostIPs"]));
    assert!(!has(&mid, &["status", "resize"]));
    for k in ["volumeMounts", "user", "allocatedResources", "resources"] {
        assert!(!has(&cs(&mid), &[k]), "1.28 keeps {k}: {mid}");
    }

    let (created, new) = pod_after_status_patch(34);
    assert_eq!(
        created["spec"]["initContainers"][0]["restartPolicy"],
        "Always"
    );
    assert_eq!(new["status"]["hostIPs"], json!([{"ip": "10.0.0.7"}]));
    assert_eq!(new["status"]["observedGeneration"], 1);
    assert_eq!(new["status"]["conditions"][0]["observedGeneration"], 1);
    assert_eq!(new["status"]["resize"], "InProgress");
    assert_eq!(cs(&new)["volumeMounts"][0]["recursiveReadOnly"], "Disabled");
    for k in ["user", "allocatedResources", "resources"] {
        assert!(has(&cs(&new), &[k]), "1.34 drops {k}: {new}");
    }
}

#[test]
fn node_status_keeps_only_the_fields_the_release_keeps() {
    let run = |minor: u32| {
        let d = at(minor, "node");
        let kubelet = Client::kubelet(&d);
        let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"},
            "status": {"runtimeHandlers": [{"name": "runc"}]}});
        let (code, created) = kubelet.post("/api/v1/nodes", node);
        assert_eq!(code, 201, "{created}");
        let status = json!({"status": {"runtimeHandlers": [{"name": "runc"}],
            "features": {"supplementalGroupsPolicy": true}, "declaredFeatures": ["X"]}});
        let (code, patched) = kubelet.patch("/api/v1/nodes/node-a/status", SMP, status);
        assert_eq!(code, 200, "{patched}");
        (created["status"].clone(), patched["status"].clone())
    };
    let (created, patched) = run(22);
    assert!(!has(&created, &["runtimeHandlers"]) && !has(&patched, &["runtimeHandlers"]));
    assert!(!has(&patched, &["features"]));
    // 1.30: the node strategy drops runtimeHandlers on create only.
    let (created, patched) = run(30);
    assert!(!has(&created, &["runtimeHandlers"]), "{created}");
    assert!(has(&patched, &["runtimeHandlers"]), "{patched}");
    assert!(!has(&patched, &["features"]));
    let (created, patched) = run(34);
    assert!(has(&created, &["runtimeHandlers"]));
    assert!(has(&patched, &["features"]));
    // declaredFeatures is a 1.35 field.
    assert!(!has(&patched, &["declaredFeatures"]), "{patched}");
}

// ---------------------------------------------------------------- subresources

fn discovered(c: &Client, name: &str) -> bool {
    let (_, list) = c.get("/api/v1");
    list["resources"]
        .as_array()
        .is_some_and(|rs| rs.iter().any(|r| r["name"] == name))
}

#[test]
fn ephemeral_containers_subresource_from_1_23() {
    for minor in [22, 28, 34] {
        let d = at(minor, "ephemeral");
        let c = Client::admin(&d);
        let (code, p) = c.post(PODS, pod("p", Some("node-a")));
        assert_eq!(code, 201, "{p}");
        let sub = format!("{PODS}/p/ephemeralcontainers");
        let debugger = json!({"spec": {"ephemeralContainers": [
            {"name": "dbg", "image": "busybox:1.36", "targetContainerName": "c"}]}});
        let (get_code, got) = c.get(&sub);
        let (patch_code, patched) = c.patch(&sub, SMP, debugger.clone());
        assert_eq!(discovered(&c, "pods/ephemeralcontainers"), minor >= 23);
        assert_eq!(discovered(&c, "pods/resize"), minor >= 33);
        if minor < 23 {
            assert_eq!((get_code, patch_code), (404, 404), "{got} {patched}");
            assert_eq!(got["reason"], "NotFound");
            // With the gate off the field itself is dropped on writes.
            let mut with = pod("q", Some("node-a"));
            with["spec"]["ephemeralContainers"] = debugger["spec"]["ephemeralContainers"].clone();
            let (code, q) = c.post(PODS, with);
            assert_eq!(code, 201, "{q}");
            assert!(!has(&q, &["spec", "ephemeralContainers"]), "{q}");
        } else {
            assert_eq!((get_code, got["kind"].as_str()), (200, Some("Pod")));
            assert_eq!(patch_code, 200, "{patched}");
            assert_eq!(patched["spec"]["ephemeralContainers"][0]["name"], "dbg");
        }
    }
}
