//! The node's CertificateSigningRequest: the key and PKCS#10 request
//! (upstream bootstrap.go's requestNodeCertificate and digestedName), and
//! creating it and waiting for it (client-go `util/certificate/csr`'s
//! RequestCertificate and WaitForCertificate), every wait bounded by a
//! deadline and interrupted by shutdown.

use std::time::{Duration, Instant};

use base64::Engine;
use crossbeam_channel::{after, select, Receiver};
use serde_json::{json, Value};

use super::CertError;
use crate::client::{paths, ApiError, Client, WatchEventType};

/// certificatesv1.KubeAPIServerClientKubeletSignerName.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const NODES_GROUP: &str = "system:nodes";
/// Longest single watch: client-go's informer timeout range.
const WATCH_SECONDS: u64 = 300;

/// The node's subject CN.
pub fn node_cn(node: &str) -> String {
    format!("system:node:{node}")
}

/// A new ECDSA P-256 key (upstream generates ECDSA P-256 too).
pub fn generate_key() -> Result<rcgen::KeyPair, CertError> {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(generate("generate ECDSA P-256 key"))
}

/// The PEM request for `O=system:nodes, CN=system:node:<node>`, no SANs.
pub fn make_csr_pem(key: &rcgen::KeyPair, node: &str) -> Result<String, CertError> {
    make_csr_pem_with_sans(key, node, &[])
}

/// As [`make_csr_pem`], with subject alternative names (DNS names and IP
/// addresses, as the serving certificate's request carries).
pub fn make_csr_pem_with_sans(
    key: &rcgen::KeyPair,
    node: &str,
    sans: &[String],
) -> Result<String, CertError> {
    let mut p = rcgen::CertificateParams::new(sans.to_vec())
        .map_err(generate("subject alternative names"))?;
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(rcgen::DnType::OrganizationName, NODES_GROUP);
    p.distinguished_name
        .push(rcgen::DnType::CommonName, node_cn(node));
    let csr = p
        .serialize_request(key)
        .map_err(generate("build certificate request"))?;
    csr.pem().map_err(generate("encode certificate request"))
}

fn generate(what: &'static str) -> impl FnOnce(rcgen::Error) -> CertError {
    move |error| CertError::Generate { what, error }
}

/// `node-csr-<base64url(SHA-512/256(...))>` over the public key, subject and
/// usages, each base64url-encoded and `|`-terminated (upstream digestedName):
/// the same key asks under the same name after a restart.
pub fn digested_name(key: &rcgen::KeyPair, node: &str, usages: &[&str]) -> String {
    let encode = |d: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(d);
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA512_256);
    let mut write = |d: &[u8]| {
        ctx.update(encode(d).as_bytes());
        ctx.update(b"|");
    };
    write(&key.public_key_der());
    write(node_cn(node).as_bytes());
    write(NODES_GROUP.as_bytes());
    for u in usages {
        write(u.as_bytes());
    }
    format!("node-csr-{}", encode(ctx.finish().as_ref()))
}

/// A CSR named by the server (`generateName: csr-`), as the certificate
/// manager creates for rotations and the serving certificate.
pub fn generated_csr_object(pem: &str, signer: &str, usages: &[&str]) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": signer,
            "usages": usages,
        },
    })
}

/// The CertificateSigningRequest object to create.
pub fn csr_object(name: &str, pem: &str, usages: &[&str]) -> Value {
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": KUBELET_CLIENT_SIGNER,
            "usages": usages,
        },
    })
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Creates the CSR, or reuses one of that name when it asks for the same
/// signer and usages (upstream ensureCompatible). Returns (name, uid).
pub fn request_certificate(client: &Client, obj: &Value) -> Result<(String, String), CsrError> {
    let name = str_at(obj, &["metadata", "name"]).to_string();
    let created = match client.create(&paths::certificate_signing_requests(), obj) {
        Ok(v) => v,
        Err(e) if e.is_already_exists() => {
            let existing: Value = client
                .get(&paths::certificate_signing_request(&name))
                .map_err(CsrError::Api)?;
            let same = |p: &[&str]| obj.pointer(&ptr(p)) == existing.pointer(&ptr(p));
            if !same(&["spec", "signerName"]) || !same(&["spec", "usages"]) {
                return Err(CsrError::Fatal(CertError::Incompatible(name)));
            }
            existing
        }
        Err(e) => return Err(CsrError::Api(e)),
    };
    let name = match str_at(&created, &["metadata", "name"]) {
        "" => name,
        n => n.to_string(),
    };
    Ok((name, str_at(&created, &["metadata", "uid"]).to_string()))
}

fn ptr(path: &[&str]) -> String {
    path.iter().map(|p| format!("/{p}")).collect()
}

/// Why a request or wait failed: the API (retry with back-off) or the CSR
/// itself (denied, failed, replaced: stop, as upstream exits).
#[derive(Debug)]
pub enum CsrError {
    Api(ApiError),
    Fatal(CertError),
}

/// What a CSR's status says.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Issued(String),
    Pending,
}

/// Reads a CSR object: issued (Approved and a certificate), pending, or an
/// error for Denied, Failed, or another object under the same name.
pub fn outcome(obj: &Value, name: &str, uid: &str) -> Result<Outcome, CertError> {
    let got = str_at(obj, &["metadata", "uid"]);
    if !uid.is_empty() && got != uid {
        return Err(CertError::UidChanged {
            name: name.to_string(),
            was: uid.to_string(),
            now: got.to_string(),
        });
    }
    let empty = vec![];
    let conds = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let mut approved = false;
    for c in conds {
        let (t, reason, msg) = (
            str_at(c, &["type"]),
            str_at(c, &["reason"]),
            str_at(c, &["message"]),
        );
        match t {
            "Denied" => {
                return Err(CertError::Denied {
                    name: name.to_string(),
                    reason: reason.to_string(),
                    message: msg.to_string(),
                })
            }
            "Failed" => {
                return Err(CertError::Failed {
                    name: name.to_string(),
                    reason: reason.to_string(),
                    message: msg.to_string(),
                })
            }
            "Approved" => approved = true,
            _ => {}
        }
    }
    let cert = str_at(obj, &["status", "certificate"]);
    if !approved || cert.is_empty() {
        return Ok(Outcome::Pending);
    }
    let pem = base64::engine::general_purpose::STANDARD
        .decode(cert)
        .map_err(|error| CertError::NotBase64 {
            name: name.to_string(),
            error,
        })?;
    let pem = String::from_utf8(pem).map_err(|error| CertError::NotUtf8 {
        name: name.to_string(),
        error,
    })?;
    Ok(Outcome::Issued(pem))
}

/// Waits until `deadline` for the CSR to be issued: a GET, then a watch
/// (fieldSelector metadata.name) resumed from the last resourceVersion.
/// API errors are returned for the caller's back-off; shutdown and the
/// deadline end it.
pub fn wait_for_certificate(
    client: &Client,
    name: &str,
    uid: &str,
    deadline: Instant,
    shutdown: &Receiver<()>,
) -> Result<String, CsrError> {
    let obj: Value = client
        .get(&paths::certificate_signing_request(name))
        .map_err(CsrError::Api)?;
    if let Outcome::Issued(pem) = outcome(&obj, name, uid).map_err(CsrError::Fatal)? {
        return Ok(pem);
    }
    let mut rv = str_at(&obj, &["metadata", "resourceVersion"]).to_string();
    log::info!("waiting for client certificate to be issued (CSR {name})");
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let secs = left.as_secs().clamp(1, WATCH_SECONDS).to_string();
        let selector = format!("metadata.name={name}");
        let query = [
            ("watch", "1"),
            ("fieldSelector", selector.as_str()),
            ("resourceVersion", rv.as_str()),
            ("timeoutSeconds", secs.as_str()),
        ];
        let stream = client
            .watch(&paths::with_query(
                &paths::certificate_signing_requests(),
                &query,
            ))
            .map_err(CsrError::Api)?;
        loop {
            select! {
                recv(stream.events()) -> ev => match ev {
                    Ok(Ok(ev)) if ev.kind == WatchEventType::Bookmark => {
                        rv = ev.resource_version().unwrap_or(&rv).to_string();
                    }
                    Ok(Ok(ev)) if ev.kind == WatchEventType::Deleted => {
                        return Err(CsrError::Fatal(CertError::Deleted(name.to_string())));
                    }
                    Ok(Ok(ev)) => {
                        rv = ev.resource_version().unwrap_or(&rv).to_string();
                        if let Outcome::Issued(pem) = outcome(&ev.object, name, uid).map_err(CsrError::Fatal)? {
                            return Ok(pem);
                        }
                    }
                    Ok(Err(e)) => return Err(CsrError::Api(e)),
                    // The server ended the watch: start another.
                    Err(_) => break,
                },
                recv(shutdown) -> _ => return Err(CsrError::Fatal(CertError::ShutdownWaiting(name.to_string()))),
                recv(after(deadline.saturating_duration_since(Instant::now()))) -> _ => {
                    return Err(CsrError::Fatal(CertError::Timeout(name.to_string())));
                }
            }
        }
    }
}

/// Sleeps `d` unless shutdown comes first (then an error).
pub fn sleep_or_shutdown(d: Duration, shutdown: &Receiver<()>) -> Result<(), CertError> {
    select! {
        recv(shutdown) -> _ => Err(CertError::Shutdown),
        recv(after(d)) -> _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csr_pem_has_node_subject_and_p256_key() {
        let key = generate_key().expect("key");
        let pem = make_csr_pem(&key, "n1").expect("csr");
        // rcgen parses requests only with its x509-parser feature: read the DER.
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("b64");
        let has = |needle: &[u8]| der.windows(needle.len()).any(|w| w == needle);
        assert!(pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"));
        assert!(has(b"system:node:n1"));
        assert!(has(b"system:nodes"));
        // id-ecPublicKey and prime256v1.
        assert!(has(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01]));
        assert!(has(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]));
    }

    #[test]
    fn csr_object_names_signer_usages_and_is_stable_per_key() {
        let key = generate_key().expect("key");
        let usages = ["digital signature", "client auth"];
        let name = digested_name(&key, "n1", &usages);
        assert!(name.starts_with("node-csr-"));
        assert_eq!(name.len(), "node-csr-".len() + 43);
        assert_eq!(name, digested_name(&key, "n1", &usages));
        assert_ne!(name, digested_name(&key, "n2", &usages));
        // Other usages are another request, under another name.
        assert_ne!(name, digested_name(&key, "n1", &usages[..1]));
        let obj = csr_object(&name, "PEM", &usages);
        assert_eq!(obj["spec"]["signerName"], KUBELET_CLIENT_SIGNER);
        assert_eq!(
            obj["spec"]["usages"],
            json!(["digital signature", "client auth"])
        );
        assert_eq!(obj["spec"]["request"], "UEVN");
    }

    #[test]
    fn outcome_reads_conditions() {
        let b64 = base64::engine::general_purpose::STANDARD.encode("CERT");
        let csr = |conds: Value, cert: &str| json!({"metadata": {"uid": "u1"}, "status": {"conditions": conds, "certificate": cert}});
        let approved = json!([{"type": "Approved", "status": "True"}]);
        assert_eq!(
            outcome(&csr(approved.clone(), ""), "c", "u1").expect("ok"),
            Outcome::Pending
        );
        assert_eq!(
            outcome(&csr(approved.clone(), &b64), "c", "u1").expect("ok"),
            Outcome::Issued("CERT".into())
        );
        let denied =
            json!([{"type": "Denied", "status": "True", "reason": "NotOurs", "message": "no"}]);
        let err = outcome(&csr(denied, ""), "node-csr-x", "u1").expect_err("denied");
        assert!(
            err.to_string()
                .contains("node-csr-x is denied, reason: NotOurs"),
            "{err}"
        );
        assert!(outcome(&csr(approved, &b64), "c", "other").is_err());
    }
}
