//! certificates.k8s.io/v1 CertificateSigningRequests: the apiserver's
//! strategy (pkg/registry/certificates/certificates: spec.username/groups/uid
//! from the requester on create, the PKCS#10 request parsed and its signature
//! checked, status reset; `/approval` changes only the Approved/Denied/Failed
//! conditions) and kube-controller-manager's csrapproving (kubelet client
//! CSRs from a bootstrapper or the node itself; kubelet-serving CSRs are
//! never auto-approved, as kube-controller-manager has no approver for
//! them) and csrsigning (the cluster CA, SANs copied from the request)
//! controllers. Only ECDSA P-256 requests can be verified and signed,
//! which is what rkubelet and upstream's kubelet (since 1.x, ECDSA keys)
//! send; anything else is rejected at create as an unparseable request.
//! Which usage sets the controllers accept depends on the emulated release
//! (`version::Version::kubelet_csr_key_encipherment_optional`).

use crate::certs::{name_identity, tlv, User};
use crate::handlers::Api;
use crate::kinds::FieldErrs;
use crate::util::{get, get_str, now_rfc3339, obj_field_mut};
use crate::version::Version;
use base64::Engine;
use rkubelet_util::lock;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

pub const GROUP: &str = "certificates.k8s.io";
pub const PLURAL: &str = "certificatesigningrequests";
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// kube-controller-manager's --cluster-signing-duration default.
const DEFAULT_DURATION: Duration = Duration::from_secs(365 * 86_400);
/// The signer backdates certificates by 5 minutes for clock skew.
const BACKDATE: Duration = Duration::from_secs(300);

/// Whether the approving controller runs (`POST /__double/csr
/// {"autoApprove": false}` turns it off so a test can approve or deny).
pub struct Controllers {
    pub auto_approve: AtomicBool,
    /// TEST-ONLY, no real API has it: `{"certTTLSeconds": n}` makes the
    /// signer issue certificates valid from now for n seconds (no backdate,
    /// no 600 s minimum), so a test can watch rotations; 0 = the real rules.
    pub test_ttl_seconds: AtomicU64,
}

impl Default for Controllers {
    fn default() -> Self {
        Controllers {
            auto_approve: AtomicBool::new(true),
            test_ttl_seconds: AtomicU64::new(0),
        }
    }
}

/// A parsed PKCS#10 request: subject, the raw EC point and the SANs of its
/// extensionRequest.
pub struct Request {
    pub cn: String,
    pub orgs: Vec<String>,
    pub public_key: Vec<u8>,
    pub sans: Vec<rcgen::SanType>,
}

impl rcgen::PublicKeyData for Request {
    fn der_bytes(&self) -> &[u8] {
        &self.public_key
    }
    fn algorithm(&self) -> &rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];

/// Parses a PEM CERTIFICATE REQUEST and checks its self-signature.
pub fn parse_request(pem: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(pem).map_err(|_| "not PEM".to_string())?;
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN CERTIFICATE REQUEST-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    if body.is_empty() {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .map_err(|e| format!("invalid PEM: {e}"))?;
    parse_der(&der).ok_or_else(|| "asn1: structure error".to_string())?
}

fn parse_der(der: &[u8]) -> Option<Result<Request, String>> {
    let (_, c0, _) = tlv(der, 0)?;
    let (_, i0, i1) = tlv(der, c0)?; // certificationRequestInfo
    let info = &der[c0..i1];
    let version = tlv(der, i0)?;
    let (_, s0, s1) = tlv(der, version.2)?; // subject
    let (cn, orgs) = name_identity(der, s0, s1)?;
    let (_, k0, k1) = tlv(der, s1)?; // subjectPKInfo
    let sans = match tlv(der, k1) {
        Some((0xa0, a0, a1)) if a1 <= i1 => request_sans(&der[a0..a1])?,
        _ => Vec::new(),
    };
    let (_, a0, a1) = tlv(der, k0)?;
    let (_, o0, o1) = tlv(der, a0)?;
    let (_, b0, b1) = tlv(der, a1)?; // subjectPublicKey BIT STRING
    if &der[o0..o1] != OID_EC_PUBLIC_KEY {
        return Some(Err("only ECDSA P-256 requests are supported".into()));
    }
    let public_key = der.get(b0 + 1..b1)?.to_vec();
    let (_, _, alg_end) = tlv(der, i1)?; // signatureAlgorithm
    let (_, g0, g1) = tlv(der, alg_end)?; // signature BIT STRING
    let sig = der.get(g0 + 1..g1)?;
    let key = ring::signature::UnparsedPublicKey::new(
        &ring::signature::ECDSA_P256_SHA256_ASN1,
        &public_key,
    );
    if key.verify(info, sig).is_err() {
        return Some(Err("x509: ECDSA verification failure".into()));
    }
    Some(Ok(Request {
        cn,
        orgs,
        public_key,
        sans,
    }))
}

const OID_SAN: &[u8] = &[0x06, 0x03, 0x55, 0x1d, 0x11];

/// The DNS and IP SANs of a subjectAltName extension in the request's
/// attributes (found by its OID; a critical flag may precede the value).
fn request_sans(attrs: &[u8]) -> Option<Vec<rcgen::SanType>> {
    let Some(at) = attrs.windows(OID_SAN.len()).position(|w| w == OID_SAN) else {
        return Some(Vec::new());
    };
    let mut pos = at + OID_SAN.len();
    if attrs.get(pos) == Some(&0x01) {
        pos = tlv(attrs, pos)?.2; // critical
    }
    let (tag, o0, _) = tlv(attrs, pos)?;
    if tag != 0x04 {
        return None;
    }
    let (_, mut p, end) = tlv(attrs, o0)?; // GeneralNames
    let mut out = Vec::new();
    while p < end {
        let (tag, v0, v1) = tlv(attrs, p)?;
        let v = &attrs[v0..v1];
        match tag {
            0x82 => out.push(rcgen::SanType::DnsName(
                String::from_utf8_lossy(v).into_owned().try_into().ok()?,
            )),
            0x87 if v.len() == 4 => out.push(rcgen::SanType::IpAddress(std::net::IpAddr::from(
                <[u8; 4]>::try_from(v).ok()?,
            ))),
            0x87 if v.len() == 16 => out.push(rcgen::SanType::IpAddress(std::net::IpAddr::from(
                <[u8; 16]>::try_from(v).ok()?,
            ))),
            _ => {}
        }
        p = v1;
    }
    Some(out)
}

fn request_pem(csr: &Value) -> Result<Vec<u8>, String> {
    let b64 = get_str(csr, &["spec", "request"]).unwrap_or("");
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| format!("illegal base64 data: {e}"))
}

/// The create strategy: who asked, status reset, then validation.
pub fn prepare_create(obj: &mut Value, user: &User) -> FieldErrs {
    let spec = obj_field_mut(obj, "spec");
    spec.insert("username".into(), json!(user.name));
    spec.insert("groups".into(), json!(user.groups));
    spec.remove("uid");
    spec.remove("extra");
    obj["status"] = json!({});
    let mut errs: FieldErrs = vec![];
    let field = |f: &str| format!("spec.{f}");
    match request_pem(obj).and_then(|p| parse_request(&p)) {
        Ok(_) => {}
        Err(e) => errs.push((field("request"), "FieldValueInvalid", e)),
    }
    if get_str(obj, &["spec", "signerName"])
        .unwrap_or("")
        .is_empty()
    {
        errs.push((
            field("signerName"),
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    let usages = get(obj, &["spec", "usages"]).and_then(|u| u.as_array());
    if usages.is_none_or(|u| u.is_empty()) {
        errs.push((
            field("usages"),
            "FieldValueRequired",
            "Required value".into(),
        ));
    }
    errs
}

fn conditions(csr: &Value) -> Vec<Value> {
    get(csr, &["status", "conditions"])
        .and_then(|c| c.as_array())
        .cloned()
        .unwrap_or_default()
}

fn has_condition(csr: &Value, t: &str) -> bool {
    conditions(csr)
        .iter()
        .any(|c| get_str(c, &["type"]) == Some(t) && get_str(c, &["status"]) == Some("True"))
}

/// `/approval`: only the Approved/Denied conditions come from the request;
/// the rest of the object stays as stored.
pub fn prepare_approval(old: &Value, new: &Value) -> Value {
    let mut out = old.clone();
    let now = now_rfc3339();
    let conds: Vec<Value> = conditions(new)
        .into_iter()
        .map(|mut c| {
            for k in ["lastUpdateTime", "lastTransitionTime"] {
                if get_str(&c, &[k]).unwrap_or("").is_empty() {
                    c[k] = json!(now);
                }
            }
            c
        })
        .collect();
    obj_field_mut(&mut out, "status").insert("conditions".into(), json!(conds));
    if let Some(rv) = get(new, &["metadata", "resourceVersion"]) {
        out["metadata"]["resourceVersion"] = rv.clone();
    }
    out
}

/// `/status` (the signer's path): Approved and Denied stay as they were;
/// only `/approval` changes them.
pub fn prepare_status(old: &Value, new: &mut Value) {
    let approval = |c: &Value| matches!(get_str(c, &["type"]), Some("Approved" | "Denied"));
    let mut conds: Vec<Value> = conditions(old).into_iter().filter(approval).collect();
    conds.extend(conditions(new).into_iter().filter(|c| !approval(c)));
    let status = obj_field_mut(new, "status");
    // omitempty, as the real server serialises it.
    if conds.is_empty() {
        status.remove("conditions");
    } else {
        status.insert("conditions".into(), json!(conds));
    }
}

/// Approval validation: Approved and Denied exclude each other.
pub fn validate_conditions(csr: &Value) -> FieldErrs {
    if has_condition(csr, "Approved") && has_condition(csr, "Denied") {
        return vec![(
            "status.conditions".into(),
            "FieldValueInvalid",
            "Approved and Denied conditions are mutually exclusive".into(),
        )];
    }
    vec![]
}

fn add_condition(csr: &mut Value, t: &str, reason: &str, message: &str) {
    let now = now_rfc3339();
    let mut conds = conditions(csr);
    conds.push(
        json!({"type": t, "status": "True", "reason": reason, "message": message,
        "lastUpdateTime": now, "lastTransitionTime": now}),
    );
    obj_field_mut(csr, "status").insert("conditions".into(), json!(conds));
}

fn usages(csr: &Value) -> Vec<String> {
    get(csr, &["spec", "usages"])
        .and_then(|u| u.as_array())
        .map(|u| {
            u.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a kubelet CSR's usages are, as a set, exactly `with_ke` ("key
/// encipherment" among them) or, where the release accepts it, the same
/// without "key encipherment" (pkg/apis/certificates helpers.go
/// kubeletClientRequiredUsages / …NoRSA; see [`Version`]).
fn kubelet_usages_match(csr: &Value, with_ke: &[&str], v: Version) -> bool {
    let mut got: Vec<String> = usages(csr);
    got.sort();
    got.dedup();
    let set = |u: &[&str]| {
        let mut u: Vec<String> = u.iter().map(|s| s.to_string()).collect();
        u.sort();
        u
    };
    let without: Vec<&str> = with_ke
        .iter()
        .copied()
        .filter(|u| *u != "key encipherment")
        .collect();
    got == set(with_ke) || (v.kubelet_csr_key_encipherment_optional() && got == set(&without))
}

/// Upstream's error for usages that match neither set: the RSA set, sorted
/// (sets.String.List()), as `%v` prints a []string.
fn usages_mismatch(with_ke: &[&str]) -> String {
    let mut u = with_ke.to_vec();
    u.sort();
    format!("usages did not match [{}]", u.join(" "))
}

/// ValidateKubeletClientCSR (pkg/apis/certificates/helpers.go), as the
/// approver and the kube-apiserver-client-kubelet signer run it: the
/// node's subject, no SANs, the client usages.
fn kubelet_client_ok(csr: &Value, req: &Request, v: Version) -> Result<(), String> {
    if req.orgs != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if req
        .sans
        .iter()
        .any(|s| matches!(s, rcgen::SanType::DnsName(_)))
    {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if req
        .sans
        .iter()
        .any(|s| matches!(s, rcgen::SanType::IpAddress(_)))
    {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if !req.cn.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    if !kubelet_usages_match(csr, &KUBELET_CLIENT_USAGES, v) {
        return Err(usages_mismatch(&KUBELET_CLIENT_USAGES));
    }
    Ok(())
}

const KUBELET_CLIENT_USAGES: [&str; 3] = ["digital signature", "key encipherment", "client auth"];
const KUBELET_SERVING_USAGES: [&str; 3] = ["digital signature", "key encipherment", "server auth"];

/// csrapproving's isNodeClientCert plus its requester check: a kubelet client
/// CSR from a bootstrapper (nodeclient) or from that node (selfnodeclient).
fn approvable(csr: &Value, req: &Request, v: Version) -> bool {
    let groups: Vec<&str> = get(csr, &["spec", "groups"])
        .and_then(|g| g.as_array())
        .map(|g| g.iter().filter_map(|x| x.as_str()).collect())
        .unwrap_or_default();
    let user = get_str(csr, &["spec", "username"]).unwrap_or("");
    let node_cert = kubelet_client_ok(csr, req, v).is_ok();
    node_cert && (groups.contains(&"system:bootstrappers") || user == req.cn)
}

/// The signer's certificate for an approved request: the subject and
/// usages asked for, valid from 5 minutes ago for expirationSeconds (at
/// least 10 minutes) or the default duration.
fn certificate_params(csr: &Value, req: &Request, test_ttl: u64) -> rcgen::CertificateParams {
    use rcgen::{DnType, ExtendedKeyUsagePurpose as E, KeyUsagePurpose as K};
    let mut p = rcgen::CertificateParams::default();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, req.cn.clone());
    for o in &req.orgs {
        p.distinguished_name
            .push(DnType::OrganizationName, o.clone());
    }
    for u in usages(csr) {
        match u.as_str() {
            "digital signature" => p.key_usages.push(K::DigitalSignature),
            "key encipherment" => p.key_usages.push(K::KeyEncipherment),
            "client auth" => p.extended_key_usages.push(E::ClientAuth),
            "server auth" => p.extended_key_usages.push(E::ServerAuth),
            _ => {}
        }
    }
    p.subject_alt_names = req.sans.clone();
    let secs = get(csr, &["spec", "expirationSeconds"]).and_then(|x| x.as_u64());
    let life = secs.map_or(DEFAULT_DURATION, |s| Duration::from_secs(s.max(600)));
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - BACKDATE;
    p.not_after = now + life;
    if test_ttl > 0 {
        p.not_before = now;
        p.not_after = now + Duration::from_secs(test_ttl);
    }
    p.use_authority_key_identifier_extension = true;
    p
}

/// The kubelet-serving signer's checks (csrsigning isKubeletServing →
/// ValidateKubeletServingCSR, in upstream's order): a node's organization,
/// DNS or IP SANs, the serving usages, a node's common name.
fn serving_ok(csr: &Value, req: &Request, v: Version) -> Result<(), String> {
    if req.orgs != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if req.sans.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !kubelet_usages_match(csr, &KUBELET_SERVING_USAGES, v) {
        return Err(usages_mismatch(&KUBELET_SERVING_USAGES));
    }
    if !req.cn.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// One pass of the approving and signing controllers over kubelet client
/// CSRs; each step is its own write, as the two controllers make them.
pub fn controller_tick(api: &Api, pki: &std::sync::Mutex<crate::certs::Pki>, c: &Controllers) {
    let mut g = api.store.lock();
    for csr in g.list(PLURAL_KEY, None) {
        let signer = get_str(&csr, &["spec", "signerName"]);
        if !matches!(signer, Some(KUBELET_CLIENT_SIGNER | KUBELET_SERVING_SIGNER))
            || has_condition(&csr, "Denied")
            || has_condition(&csr, "Failed")
            || !get_str(&csr, &["status", "certificate"])
                .unwrap_or("")
                .is_empty()
        {
            continue;
        }
        let Ok(req) = request_pem(&csr).and_then(|p| parse_request(&p)) else {
            continue;
        };
        let mut n = (*csr).clone();
        if !has_condition(&csr, "Approved") {
            let client = signer == Some(KUBELET_CLIENT_SIGNER);
            let auto = c.auto_approve.load(Ordering::Relaxed);
            if !client || !auto || !approvable(&csr, &req, api.version) {
                continue;
            }
            let msg = "Auto approving kubelet client certificate after SubjectAccessReview.";
            add_condition(&mut n, "Approved", "AutoApproved", msg);
            g.put(PLURAL_KEY, n);
            continue;
        }
        let ttl = c.test_ttl_seconds.load(Ordering::Relaxed);
        let signed = match signer {
            Some(KUBELET_SERVING_SIGNER) => serving_ok(&csr, &req, api.version),
            _ => kubelet_client_ok(&csr, &req, api.version),
        }
        .and_then(|()| lock(pki).sign_with_ca(certificate_params(&csr, &req, ttl), &req));
        match signed {
            Ok(pem) => {
                let b64 = base64::engine::general_purpose::STANDARD.encode(pem);
                obj_field_mut(&mut n, "status").insert("certificate".into(), json!(b64));
            }
            Err(e) => add_condition(&mut n, "Failed", "SignerValidationFailure", &e),
        }
        g.put(PLURAL_KEY, n);
    }
}

/// The store key of CSRs (resources.rs).
pub const PLURAL_KEY: &str = "certificatesigningrequests.certificates.k8s.io";

/// kubeadm's RBAC for bootstrap tokens (system:node-bootstrapper and the
/// auto-approve binding): CSRs only (create, get, list, watch), plus the
/// public discovery a client reads.
pub fn bootstrapper_allowed(user: &User, group: &str, plural: &str, verb: &str) -> bool {
    if !user.groups.iter().any(|g| g == "system:bootstrappers") {
        return true;
    }
    group == GROUP && plural == PLURAL && matches!(verb, "create" | "get" | "list" | "watch")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem_for(cn: &str, orgs: &[&str]) -> String {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::default();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        for o in orgs {
            p.distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        p.serialize_request(&key).expect("csr").pem().expect("pem")
    }

    #[test]
    fn parses_subject_and_verifies_signature() {
        let pem = pem_for("system:node:n1", &["system:nodes"]);
        let r = parse_request(pem.as_bytes()).expect("parse");
        assert_eq!(r.cn, "system:node:n1");
        assert_eq!(r.orgs, vec!["system:nodes"]);
        assert_eq!(r.public_key.len(), 65);
        // A flipped bit in the signed info fails verification.
        let der_b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let mut der = base64::engine::general_purpose::STANDARD
            .decode(der_b64)
            .expect("b64");
        let at = der.windows(2).position(|w| w == b"n1").expect("CN in DER");
        der[at + 1] = b'2';
        let bad = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64::engine::general_purpose::STANDARD.encode(der)
        );
        assert!(parse_request(bad.as_bytes()).is_err());
    }

    #[test]
    fn serving_requests_carry_their_sans_and_are_checked() {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p =
            rcgen::CertificateParams::new(vec!["node1".to_string(), "10.0.0.7".to_string()])
                .expect("sans");
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:node1");
        let pem = p.serialize_request(&key).expect("csr").pem().expect("pem");
        let r = parse_request(pem.as_bytes()).expect("parse");
        assert_eq!(r.sans.len(), 2);
        assert!(
            matches!(&r.sans[1], rcgen::SanType::IpAddress(ip) if ip.to_string() == "10.0.0.7")
        );
        let (v22, v34) = (Version::new(22), Version::new(34));
        let csr = json!({"spec": {"usages": ["digital signature", "server auth"]}});
        assert_eq!(serving_ok(&csr, &r, v34), Ok(()));
        assert_eq!(
            serving_ok(&csr, &r, v22),
            Err("usages did not match [digital signature key encipherment server auth]".into())
        );
        let rsa =
            json!({"spec": {"usages": ["server auth", "key encipherment", "digital signature"]}});
        assert_eq!(serving_ok(&rsa, &r, v22), Ok(()));
        let client = json!({"spec": {"usages": ["digital signature", "client auth"]}});
        assert!(serving_ok(&client, &r, v34).is_err());
        let no_sans = parse_request(pem_for("system:node:node1", &["system:nodes"]).as_bytes())
            .expect("parse");
        assert_eq!(
            serving_ok(&csr, &no_sans, v34),
            Err("DNS or IP subjectAltName is required".into())
        );
        // A client CSR may carry no SANs.
        let client_ok = |c: &Value| kubelet_client_ok(c, &r, v34);
        assert_eq!(
            client_ok(&client),
            Err("DNS subjectAltNames are not allowed".into())
        );
    }

    #[test]
    fn approves_bootstrapper_node_client_csrs_only() {
        let pem = pem_for("system:node:n1", &["system:nodes"]);
        let req = parse_request(pem.as_bytes()).expect("parse");
        let csr = |user: &str, groups: &[&str], usages: &[&str]| json!({"spec": {"username": user, "groups": groups, "usages": usages}});
        let v = Version::default();
        let u = ["digital signature", "client auth"];
        let boot = |u: &[&str]| csr("system:bootstrap:abcdef", &["system:bootstrappers"], u);
        assert!(approvable(&boot(&u), &req, v));
        assert!(approvable(
            &csr("system:node:n1", &["system:nodes"], &u),
            &req,
            v
        ));
        assert!(!approvable(
            &csr("system:node:n2", &["system:nodes"], &u),
            &req,
            v
        ));
        let server = ["digital signature", "server auth"];
        assert!(!approvable(&boot(&server), &req, v));
        // Exactly one of the two sets: no subset, no extra usage.
        assert!(!approvable(&boot(&["client auth"]), &req, v));
        let extra = ["digital signature", "client auth", "server auth"];
        assert!(!approvable(&boot(&extra), &req, v));
        // Before 1.25 only the set with key encipherment.
        let rsa = ["key encipherment", "digital signature", "client auth"];
        for (minor, no_ke) in [(22, false), (24, false), (25, true), (34, true)] {
            let v = Version::new(minor);
            assert_eq!(approvable(&boot(&u), &req, v), no_ke, "1.{minor}");
            assert!(approvable(&boot(&rsa), &req, v), "1.{minor}");
        }
    }
}
