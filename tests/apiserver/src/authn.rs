//! Authentication, as the real API server's chain does it: a client
//! certificate (x509), a bearer token (static or bootstrap token), or
//! anonymous when enabled; and what RBAC leaves an anonymous user.

use crate::certs::User;
use crate::handlers::Info;
use crate::http::Request;
use crate::server::Server;
use crate::status::ApiError;
use rkubelet_util::lock;
use serde_json::json;

/// A connection's client certificate: its user, and the credential ID the
/// apiserver's x509 authenticator adds to the user's extra
/// (`authentication.kubernetes.io/credential-id`), which the audit log
/// records per request as `credentialId`.
pub struct CertAuth {
    pub user: User,
    pub credential_id: String,
}

/// `X509SHA256=` and the lowercase hex SHA-256 of the certificate's DER.
pub fn credential_id(der: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("X509SHA256={hex}")
}

pub fn authenticate(
    srv: &Server,
    req: &Request,
    cert_user: Option<&User>,
) -> Result<User, ApiError> {
    let with_auth = |mut u: User| {
        if !u.groups.iter().any(|g| g == "system:authenticated") {
            u.groups.push("system:authenticated".into());
        }
        u
    };
    if let Some(u) = cert_user {
        return Ok(with_auth(u.clone()));
    }
    if let Some(h) = req.header("authorization") {
        let tok = h
            .strip_prefix("Bearer ")
            .or_else(|| h.strip_prefix("bearer "))
            .map(str::trim);
        let known = {
            let pki = lock(&srv.pki);
            tok.and_then(|t| pki.tokens.get(t)).cloned()
        };
        let user =
            known.or_else(|| tok.and_then(|t| crate::bootstraptoken::authenticate(&srv.api, t)));
        return user.map(with_auth).ok_or_else(ApiError::unauthorized);
    }
    if srv.cfg.anonymous_auth {
        Ok(User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        })
    } else {
        Err(ApiError::unauthorized())
    }
}

/// RBAC's view of an anonymous user: only the public info endpoints.
pub fn anonymous_forbidden(info: &Info, req: &Request) -> Option<ApiError> {
    let p = req.path.as_str();
    let public = ["/healthz", "/livez", "/readyz", "/version"]
        .iter()
        .any(|x| p == *x || p.starts_with(&format!("{}/", x)));
    if public {
        return None;
    }
    let msg = if info.is_resource {
        let scope = if info.ns.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {:?}", info.ns)
        };
        let group = info.resource.split_once('.').map(|x| x.1).unwrap_or("");
        let res = info.resource.split('.').next().unwrap_or("");
        let res = if info.sub.is_empty() {
            res.to_string()
        } else {
            format!("{}/{}", res, info.sub)
        };
        format!(
            "User \"system:anonymous\" cannot {} resource {:?} in API group {:?} {}",
            info.verb, res, group, scope
        )
    } else {
        format!(
            "User \"system:anonymous\" cannot {} path {:?}",
            info.verb, p
        )
    };
    let what = if info.is_resource {
        info.resource.split('.').next().unwrap_or("").to_string()
    } else {
        String::new()
    };
    let mut e = ApiError::forbidden(&what, &info.name, &msg);
    if what.is_empty() {
        e.message = format!("forbidden: {}", msg);
        e.details = Some(json!({}));
    }
    Some(e)
}
