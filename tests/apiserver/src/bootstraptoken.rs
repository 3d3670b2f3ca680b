//! Bootstrap token authentication (kube-apiserver's
//! plugin/pkg/auth/authenticator/token/bootstrap, on with kubeadm's
//! --enable-bootstrap-token-auth): a bearer token `<id>.<secret>` matches the
//! Secret `kube-system/bootstrap-token-<id>` of type
//! `bootstrap.kubernetes.io/token` with `usage-bootstrap-authentication:
//! true` and no past `expiration`, and authenticates as
//! `system:bootstrap:<id>` in `system:bootstrappers` plus its
//! `auth-extra-groups`. At start the double creates one such token, as
//! `kubeadm init` does, and writes `bootstrap-kubelet.kubeconfig` (kubeadm's
//! `bootstrap-kubelet.conf`) with it.

use crate::certs::User;
use crate::handlers::Api;
use crate::util::{get, get_str, random_bytes};
use base64::Engine;
use serde_json::{json, Value};
use std::path::Path;

const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// kubeadm's default extra group for its join tokens.
const KUBEADM_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";

fn data_field(secret: &Value, key: &str) -> Option<String> {
    let b64 = get_str(secret, &["data", key])?;
    let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
    String::from_utf8(raw).ok()
}

/// `Some(user)` when `token` is a valid bootstrap token.
pub fn authenticate(api: &Api, token: &str) -> Option<User> {
    let (id, secret) = token.split_once('.')?;
    let well_formed = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    if !well_formed(id, 6) || !well_formed(secret, 16) {
        return None;
    }
    let g = api.store.lock();
    let s = g.get("secrets", "kube-system", &format!("bootstrap-token-{id}"))?;
    let valid = get_str(&s, &["type"]) == Some(SECRET_TYPE)
        && data_field(&s, "token-id").as_deref() == Some(id)
        && data_field(&s, "token-secret").as_deref() == Some(secret)
        && data_field(&s, "usage-bootstrap-authentication").as_deref() == Some("true")
        && get(&s, &["metadata", "deletionTimestamp"]).is_none()
        && !expired(&s);
    if !valid {
        return None;
    }
    let mut groups = vec!["system:bootstrappers".to_string()];
    if let Some(extra) = data_field(&s, "auth-extra-groups") {
        groups.extend(extra.split(',').map(|x| x.trim().to_string()));
    }
    Some(User {
        name: format!("system:bootstrap:{id}"),
        groups,
    })
}

fn expired(secret: &Value) -> bool {
    data_field(secret, "expiration")
        .and_then(|t| crate::util::parse_rfc3339(&t))
        .is_some_and(|t| t < crate::util::unix_now())
}

fn random_lower(n: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    random_bytes(n)
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// The Secret for `token`, as `kubeadm token create` writes it.
pub fn secret(token: &str) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let (id, sec) = token.split_once('.').unwrap_or((token, ""));
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system",
            "uid": crate::util::uuid4(), "creationTimestamp": crate::util::now_rfc3339()},
        "data": {"token-id": b64(id), "token-secret": b64(sec),
            "usage-bootstrap-authentication": b64("true"),
            "usage-bootstrap-signing": b64("true"),
            "auth-extra-groups": b64(KUBEADM_GROUP)}
    })
}

/// Reuses DIR/bootstrap-token or makes one, makes sure its Secret exists,
/// and writes DIR/bootstrap-kubelet.kubeconfig for it.
pub fn ensure(api: &Api, dir: &Path, server: &str, ca_pem: &str) -> Result<(), String> {
    let path = dir.join("bootstrap-token");
    let token = match std::fs::read_to_string(&path) {
        Ok(t) if t.trim().contains('.') => t.trim().to_string(),
        _ => {
            let t = format!("{}.{}", random_lower(6), random_lower(16));
            std::fs::write(&path, &t).map_err(|e| format!("{}: {e}", path.display()))?;
            t
        }
    };
    let s = secret(&token);
    {
        let mut g = api.store.lock();
        if g.get("secrets", "kube-system", crate::util::name_of(&s))
            .is_none()
        {
            g.put("secrets", s);
        }
    }
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let text = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: {server}\n  name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n    user: tls-bootstrap-token-user\n  name: tls-bootstrap-token-user@kubernetes\ncurrent-context: tls-bootstrap-token-user@kubernetes\nkind: Config\npreferences: {{}}\nusers:\n- name: tls-bootstrap-token-user\n  user:\n    token: {token}\n"
    );
    let out = dir.join("bootstrap-kubelet.kubeconfig");
    std::fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))
}
