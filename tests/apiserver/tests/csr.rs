//! CertificateSigningRequests and bootstrap tokens over HTTP, as a kubelet's
//! TLS bootstrap and `kubectl certificate approve|deny` use them.

mod support;

use base64::Engine;
use rustls_pki_types::pem::PemObject;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::*;

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

fn request_pem(cn: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    p.distinguished_name.push(rcgen::DnType::CommonName, cn);
    p.serialize_request(&key).unwrap().pem().unwrap()
}

fn csr(name: &str, pem: &str) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem),
                 "signerName": SIGNER, "usages": ["digital signature", "client auth"]}})
}

fn wait_issued(c: &Client, name: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = c.get(&format!("{CSRS}/{name}"));
        if v["status"]["certificate"].is_string() || Instant::now() > until {
            return v;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn bootstrap_token_creates_csr_that_is_approved_and_signed() {
    let d = spawn("csr-auto", &[]);
    let boot = Client::token(&d, "bootstrap-token");
    let admin = Client::admin(&d);

    // RBAC of a bootstrap token: CSRs only.
    assert_eq!(boot.get("/api/v1/nodes").0, 403);
    let mut bad = Client::token(&d, "bootstrap-token");
    bad.token = Some("abcdef.0123456789abcdef".into());
    assert_eq!(bad.get(CSRS).0, 401);

    let name = "node-csr-Ab_c-1";
    let (code, created) = boot.post(CSRS, csr(name, &request_pem("system:node:n1")));
    assert_eq!(code, 201, "{created}");
    let user = created["spec"]["username"].as_str().unwrap();
    assert!(user.starts_with("system:bootstrap:"), "{user}");
    let groups = created["spec"]["groups"].to_string();
    assert!(
        groups.contains("system:bootstrappers:kubeadm:default-node-token"),
        "{groups}"
    );
    assert_eq!(created["status"], json!({}));
    assert_eq!(
        boot.post(CSRS, csr(name, &request_pem("system:node:n1"))).0,
        409
    );

    let issued = wait_issued(&boot, name);
    let approved = &issued["status"]["conditions"][0];
    assert_eq!(approved["type"], "Approved", "{issued}");
    assert_eq!(approved["reason"], "AutoApproved");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(issued["status"]["certificate"].as_str().unwrap())
        .unwrap();
    let pem = String::from_utf8(pem).unwrap();
    let der = rustls_pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap();
    let (cn, orgs) = apiserver_double::certs::subject_identity(&der).unwrap();
    assert_eq!(
        (cn.as_str(), orgs),
        ("system:node:n1", vec!["system:nodes".to_string()])
    );

    // The watch a kubelet waits with.
    let evs = admin.watch(
        &format!("{CSRS}?watch=1&fieldSelector=metadata.name%3D{name}&resourceVersion=0"),
        1,
    );
    assert_eq!(evs[0]["object"]["metadata"]["name"], name);
}

#[test]
fn approval_subresource_approves_or_denies_only() {
    let d = spawn("csr-manual", &[]);
    let admin = Client::admin(&d);
    let (code, v) = admin.post("/__double/csr", json!({"autoApprove": false}));
    assert_eq!((code, &v["autoApprove"]), (200, &json!(false)));
    let boot = Client::token(&d, "bootstrap-token");

    // A request that is not PKCS#10 is invalid.
    let (code, v) = boot.post(CSRS, csr("junk", "not a request"));
    assert_eq!(code, 422, "{v}");

    let (code, c1) = boot.post(CSRS, csr("c1", &request_pem("system:node:n1")));
    assert_eq!(code, 201, "{c1}");
    std::thread::sleep(Duration::from_millis(1200));
    let (_, still) = admin.get(&format!("{CSRS}/c1"));
    assert!(still["status"].get("conditions").is_none(), "{still}");

    // Approved and Denied together are refused; spec changes are ignored.
    let mut both = still.clone();
    both["status"]["conditions"] = json!([{"type": "Approved", "status": "True"},
                                         {"type": "Denied", "status": "True"}]);
    assert_eq!(admin.put(&format!("{CSRS}/c1/approval"), both).0, 422);
    let mut deny = still.clone();
    deny["spec"]["signerName"] = json!("example.com/other");
    deny["status"]["conditions"] =
        json!([{"type": "Denied", "status": "True", "reason": "No", "message": "not ours"}]);
    let (code, denied) = admin.put(&format!("{CSRS}/c1/approval"), deny);
    assert_eq!(code, 200, "{denied}");
    assert_eq!(denied["spec"]["signerName"], SIGNER);
    assert_eq!(denied["status"]["conditions"][0]["reason"], "No");
    assert!(denied["status"]["conditions"][0]["lastUpdateTime"].is_string());
    std::thread::sleep(Duration::from_millis(1200));
    assert!(admin.get(&format!("{CSRS}/c1")).1["status"]["certificate"].is_null());

    // `/status` cannot approve.
    let (_, c3) = boot.post(CSRS, csr("c3", &request_pem("system:node:n1")));
    let mut sneak = c3.clone();
    sneak["status"]["conditions"] = json!([{"type": "Approved", "status": "True"}]);
    let (code, v) = admin.put(&format!("{CSRS}/c3/status"), sneak);
    assert_eq!(
        (code, &v["status"]["conditions"]),
        (200, &Value::Null),
        "{v}"
    );

    // Approved by hand: the signer issues it.
    let (_, c2) = boot.post(CSRS, csr("c2", &request_pem("system:node:n1")));
    let mut approve = c2.clone();
    approve["status"]["conditions"] = json!([{"type": "Approved", "status": "True",
        "reason": "KubectlApprove", "message": "ok"}]);
    assert_eq!(admin.put(&format!("{CSRS}/c2/approval"), approve).0, 200);
    assert!(wait_issued(&admin, "c2")["status"]["certificate"].is_string());
}
