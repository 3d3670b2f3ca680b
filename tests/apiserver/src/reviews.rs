//! authentication.k8s.io/v1 TokenReview and authorization.k8s.io/v1
//! SubjectAccessReview, as a kubelet with webhook authn/authz uses them.
//!
//! TokenReview looks the token up in the double's token table (tokens.csv
//! plus tokens issued at run time by `POST /__double/tokens`). A
//! SubjectAccessReview is allowed for every user except those on the deny
//! list (`POST /__double/authz {"deny": [...]}`); every review is recorded
//! for `GET /__double/authz/reviews`.

use crate::certs::User;
use crate::status::ApiError;
use rkubelet_util::lock;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::Mutex;

pub const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
pub const SUBJECT_ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// Bounded so a long benchmark cannot grow the record without limit.
const MAX_RECORDED: usize = 10_000;

#[derive(Default)]
pub struct Authz {
    inner: Mutex<AuthzInner>,
}

#[derive(Default)]
struct AuthzInner {
    deny: Vec<String>,
    reviews: Vec<Value>,
    token_reviews: u64,
}

impl Authz {
    pub fn set_deny(&self, users: Vec<String>) {
        lock(&self.inner).deny = users;
    }

    pub fn to_json(&self) -> Value {
        let g = lock(&self.inner);
        json!({"deny": g.deny, "reviewCount": g.reviews.len(), "tokenReviewCount": g.token_reviews})
    }

    pub fn reviews_json(&self) -> Value {
        json!({"items": lock(&self.inner).reviews})
    }

    pub fn clear_reviews(&self) {
        let mut g = lock(&self.inner);
        g.reviews.clear();
        g.token_reviews = 0;
    }
}

fn decode(body: &[u8], kind: &str, api_version: &str) -> Result<Value, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body of the request was in an unknown format: {}",
            e
        ))
    })?;
    if !v.is_object() {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    }
    if let Some(k) = v.get("kind").and_then(|x| x.as_str()) {
        if !k.is_empty() && k != kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the body ({}) does not match the endpoint ({})",
                k, kind
            )));
        }
    }
    if let Some(a) = v.get("apiVersion").and_then(|x| x.as_str()) {
        if !a.is_empty() && a != api_version {
            return Err(ApiError::bad_request(format!(
                "the apiVersion in the body ({}) does not match the endpoint ({})",
                a, api_version
            )));
        }
    }
    Ok(v)
}

/// The created review: the request's spec echoed back with a status, 201.
fn answer(kind: &str, api_version: &str, req: &Value, status: Value) -> Value {
    let mut meta = req
        .get("metadata")
        .and_then(|m| m.as_object())
        .cloned()
        .unwrap_or_default();
    meta.insert("creationTimestamp".into(), Value::Null);
    json!({
        "kind": kind,
        "apiVersion": api_version,
        "metadata": meta,
        "spec": req.get("spec").cloned().unwrap_or_else(|| json!({})),
        "status": status,
    })
}

/// POST tokenreviews.
pub fn token_review(
    authz: &Authz,
    tokens: &HashMap<String, User>,
    body: &[u8],
) -> Result<(u16, Value), ApiError> {
    let (kind, av) = ("TokenReview", "authentication.k8s.io/v1");
    let v = decode(body, kind, av)?;
    let token = v
        .pointer("/spec/token")
        .and_then(|t| t.as_str())
        .unwrap_or("");
    if token.is_empty() {
        return Err(ApiError::invalid(
            "TokenReview",
            "authentication.k8s.io",
            "",
            &[(
                "spec.token".into(),
                "FieldValueRequired",
                "Required value".into(),
            )],
        ));
    }
    lock(&authz.inner).token_reviews += 1;
    let audiences = v.pointer("/spec/audiences").cloned();
    let status = match tokens.get(token) {
        Some(u) => {
            let mut groups = u.groups.clone();
            if !groups.iter().any(|g| g == "system:authenticated") {
                groups.push("system:authenticated".into());
            }
            let mut s = json!({
                "authenticated": true,
                "user": {"username": u.name, "uid": u.name, "groups": groups},
            });
            if let Some(a) = audiences.filter(|a| a.as_array().is_some_and(|x| !x.is_empty())) {
                s["audiences"] = a;
            }
            s
        }
        None => json!({"authenticated": false, "user": {}, "error": "invalid bearer token"}),
    };
    Ok((201, answer(kind, av, &v, status)))
}

/// POST subjectaccessreviews.
pub fn subject_access_review(authz: &Authz, body: &[u8]) -> Result<(u16, Value), ApiError> {
    let (kind, av) = ("SubjectAccessReview", "authorization.k8s.io/v1");
    let v = decode(body, kind, av)?;
    let spec = v.get("spec").cloned().unwrap_or_else(|| json!({}));
    let user = spec.get("user").and_then(|u| u.as_str()).unwrap_or("");
    let ra = spec.get("resourceAttributes");
    let nra = spec.get("nonResourceAttributes");
    if user.is_empty()
        && spec
            .get("groups")
            .is_none_or(|g| g.as_array().is_none_or(|a| a.is_empty()))
    {
        return Err(ApiError::invalid(
            kind,
            "authorization.k8s.io",
            "",
            &[(
                "spec.user".into(),
                "FieldValueInvalid",
                "at least one of user or group must be specified".into(),
            )],
        ));
    }
    if ra.is_some() == nra.is_some() {
        return Err(ApiError::invalid(
            kind,
            "authorization.k8s.io",
            "",
            &[(
                "spec.resourceAttributes".into(),
                "FieldValueInvalid",
                "exactly one of nonResourceAttributes or resourceAttributes must be specified"
                    .into(),
            )],
        ));
    }
    let mut g = lock(&authz.inner);
    let allowed = !g.deny.iter().any(|d| d == user);
    let s = |k: &str| -> Value {
        ra.and_then(|r| r.get(k))
            .cloned()
            .unwrap_or_else(|| json!(""))
    };
    let mut rec = Map::new();
    rec.insert("user".into(), json!(user));
    rec.insert(
        "groups".into(),
        spec.get("groups").cloned().unwrap_or_else(|| json!([])),
    );
    if ra.is_some() {
        for k in [
            "verb",
            "resource",
            "subresource",
            "name",
            "namespace",
            "group",
            "version",
        ] {
            rec.insert(k.into(), s(k));
        }
    } else {
        let n = nra.unwrap();
        rec.insert("verb".into(), n.get("verb").cloned().unwrap_or(json!("")));
        rec.insert("path".into(), n.get("path").cloned().unwrap_or(json!("")));
    }
    rec.insert("allowed".into(), json!(allowed));
    rec.insert("spec".into(), spec.clone());
    if g.reviews.len() >= MAX_RECORDED {
        g.reviews.remove(0);
    }
    g.reviews.push(Value::Object(rec));
    drop(g);
    let status = if allowed {
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"double-allow-all\" of ClusterRole \"cluster-admin\""})
    } else {
        json!({"allowed": false})
    };
    Ok((201, answer(kind, av, &v, status)))
}
