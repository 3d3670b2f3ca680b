//! `POST serviceaccounts/NAME/token` (TokenRequest), as upstream's
//! pkg/registry/core/serviceaccount/storage/token.go serves it in 1.34:
//! ServiceAccount lookup, static validation, NodeRestriction (with
//! --node-restriction), the bound object (Pod, with the pod's Node inferred;
//! Node; Secret) and its uid, default audiences, the 3607 s → 1 year
//! extension with `warnafter` for pod-bound tokens, and the claims. Every
//! request is recorded in a [`TokenLog`] for tests (`/__double/tokenrequests`).

use crate::certs::User;
use crate::handlers::{Api, Reply, Route};
use crate::http::Request;
use crate::status::ApiError;
use crate::store::Inner;
use crate::util::{self, get, get_str, meta_mut, uid_of};
use base64::Engine;
use rkubelet_util::lock;
use serde_json::{json, Value};
use std::sync::Mutex;

/// The API audience and issuer, as kubeadm configures them.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// serviceaccount.ExpirationExtensionSeconds: one year.
const EXTENSION_SECONDS: i64 = 24 * 365 * 60 * 60;

/// Every TokenRequest the double answered, in order.
#[derive(Default)]
pub struct TokenLog {
    items: Mutex<Vec<Value>>,
}

impl TokenLog {
    fn push(&self, v: Value) {
        lock(&self.items).push(v);
    }
    pub fn clear(&self) {
        lock(&self.items).clear();
    }
    /// `{count, issued, items: [{namespace, serviceAccount, user, code, audiences,
    /// expirationSeconds, boundObjectRef, expirationTimestamp, ts}]}`.
    pub fn to_json(&self) -> Value {
        let items = lock(&self.items);
        let issued = items.iter().filter(|i| i["code"] == 201).count();
        json!({"count": items.len(), "issued": issued, "items": *items})
    }
}

fn bad_json(e: serde_json::Error) -> ApiError {
    ApiError::bad_request(format!(
        "couldn't get version/kind; json parse error: {}",
        e
    ))
}

fn invalid(name: &str, field: &str, msg: String) -> ApiError {
    ApiError::invalid(
        "TokenRequest",
        "authentication.k8s.io",
        name,
        &[(field.to_string(), "FieldValueInvalid", msg)],
    )
}

/// Serves the request and records it in the API's token log.
pub fn token_request(
    api: &Api,
    route: &Route,
    req: &Request,
    user: &User,
) -> Result<Reply, ApiError> {
    let ns = route.ns.as_deref().unwrap_or("");
    let name = route.name.as_deref().unwrap_or("");
    let body: Option<Value> = serde_json::from_slice(&req.body).ok();
    let r = issue(api, ns, name, req, user);
    let (code, tr) = match &r {
        Ok(Reply::Json(c, v)) => (*c, Some(v)),
        Ok(_) => (200, None),
        Err(e) => (e.code, None),
    };
    let spec = |k: &str| {
        tr.and_then(|t| get(t, &["spec", k]))
            .or_else(|| body.as_ref().and_then(|b| get(b, &["spec", k])))
            .cloned()
            .unwrap_or(Value::Null)
    };
    api.token_log.push(json!({
        "ts": util::now_micro_time(), "namespace": ns, "serviceAccount": name, "user": user.name,
        "code": code, "audiences": spec("audiences"), "expirationSeconds": spec("expirationSeconds"),
        "boundObjectRef": spec("boundObjectRef"),
        "expirationTimestamp": tr.and_then(|t| get(t, &["status", "expirationTimestamp"])).cloned(),
    }));
    r
}

fn issue(api: &Api, ns: &str, name: &str, req: &Request, user: &User) -> Result<Reply, ApiError> {
    let mut tr: Value = serde_json::from_slice(&req.body).map_err(bad_json)?;
    if !tr.is_object() {
        return Err(ApiError::bad_request(
            "couldn't get version/kind; json parse error: expected a JSON object",
        ));
    }
    match get_str(&tr, &["apiVersion"]) {
        Some(av) if !av.is_empty() && av != "authentication.k8s.io/v1" => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({}) does not match the expected API version (authentication.k8s.io/v1)",
                av
            )))
        }
        _ => {}
    }
    if let Some(k) = get_str(&tr, &["kind"]).filter(|k| !k.is_empty() && *k != "TokenRequest") {
        return Err(ApiError::bad_request(format!(
            "{} in version \"v1\" cannot be handled as a TokenRequest: the object kind does not match",
            k
        )));
    }
    tr["kind"] = json!("TokenRequest");
    tr["apiVersion"] = json!("authentication.k8s.io/v1");
    // SetDefaults_TokenRequestSpec
    let spec = util::obj_field_mut(&mut tr, "spec");
    if spec
        .get("expirationSeconds")
        .map(|x| x.is_null())
        .unwrap_or(true)
    {
        spec.insert("expirationSeconds".into(), json!(3600));
    }
    let given_name = get_str(&tr, &["metadata", "name"])
        .unwrap_or("")
        .to_string();
    let given_ns = get_str(&tr, &["metadata", "namespace"])
        .unwrap_or("")
        .to_string();
    if !given_name.is_empty() && given_name != name {
        return Err(invalid(
            name,
            "metadata.name",
            format!(
                "Invalid value: {:?}: must match the service account name if specified",
                given_name
            ),
        ));
    }
    if !given_ns.is_empty() && given_ns != ns {
        return Err(invalid(
            name,
            "metadata.namespace",
            format!(
                "Invalid value: {:?}: must match the service account namespace if specified",
                given_ns
            ),
        ));
    }
    let g = api.store.lock();
    let sa = g
        .get("serviceaccounts", ns, name)
        .ok_or_else(|| ApiError::not_found("serviceaccounts", name))?;
    let auds = match get(&tr, &["spec", "audiences"]).and_then(|a| a.as_array()) {
        Some(a) if !a.is_empty() => a.clone(),
        _ => vec![json!(API_AUDIENCE)],
    };
    util::obj_field_mut(&mut tr, "spec").insert("audiences".into(), json!(auds));
    let now = util::unix_now();
    let m = meta_mut(&mut tr);
    m.insert("name".into(), json!(name));
    m.insert("namespace".into(), json!(ns));
    m.insert("creationTimestamp".into(), json!(util::rfc3339(now)));
    tr.as_object_mut().map(|m| m.remove("status"));
    // ValidateTokenRequest
    let exp_v = get(&tr, &["spec", "expirationSeconds"])
        .cloned()
        .unwrap_or(json!(3600));
    let Some(exp) = exp_v.as_i64() else {
        return Err(ApiError::bad_request(format!(
            "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: json: cannot unmarshal {} into Go struct field TokenRequestSpec.spec.expirationSeconds of type int64",
            exp_v
        )));
    };
    if exp < 600 {
        return Err(invalid(
            "",
            "spec.expirationSeconds",
            format!(
                "Invalid value: {}: may not specify a duration less than 10 minutes",
                exp
            ),
        ));
    }
    if exp > 1 << 32 {
        return Err(invalid(
            "",
            "spec.expirationSeconds",
            format!(
                "Invalid value: {}: may not specify a duration larger than 2^32 seconds",
                exp
            ),
        ));
    }
    if api.node_restriction {
        if let Some(node) = user.node_name() {
            node_restriction(&g, ns, name, node, &tr)?;
        }
    }
    let bound = bound_object(&g, ns, name, &tr)?;
    drop(g);
    // Pod-bound tokens asking for exactly 3607 s with the API audience get a
    // year, warning after 3607 s (--service-account-extend-token-expiration).
    let kube_auds = auds.iter().all(|a| a.as_str() == Some(API_AUDIENCE));
    let (token_exp, warn_after) =
        if bound.pod.is_some() && exp == crate::admission::WARN_ONLY_EXPIRATION && kube_auds {
            (EXTENSION_SECONDS, Some(now + exp))
        } else {
            (exp, None)
        };
    let mut k8s = json!({"namespace": ns, "serviceaccount": {"name": name, "uid": uid_of(&sa)}});
    for (k, v) in [
        ("pod", &bound.pod),
        ("secret", &bound.secret),
        ("node", &bound.node),
    ] {
        if let Some(v) = v {
            k8s[k] = v.clone();
        }
    }
    if let Some(w) = warn_after {
        k8s["warnafter"] = json!(w);
    }
    let claims = json!({"aud": auds, "exp": now + token_exp, "iat": now, "nbf": now, "iss": API_AUDIENCE,
        "jti": util::uuid4(), "sub": format!("system:serviceaccount:{}:{}", ns, name), "kubernetes.io": k8s});
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    let token = format!(
        "{}.{}.{}",
        b64(&json!({"alg": "RS256", "kid": "double"})),
        b64(&claims),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(util::random_bytes(32))
    );
    tr["status"] = json!({"token": token, "expirationTimestamp": util::rfc3339(now + exp)});
    Ok(Reply::Json(201, tr))
}

#[derive(Default)]
struct Bound {
    pod: Option<Value>,
    node: Option<Value>,
    secret: Option<Value>,
}

fn ref_json(o: &Value) -> Value {
    json!({"name": util::name_of(o), "uid": uid_of(o)})
}

/// spec.boundObjectRef: the object must exist (404), a pod must run as this
/// ServiceAccount (400), the uid must match when given (409); a pod's node is
/// added to the claims (name only when the Node is gone).
fn bound_object(g: &Inner, ns: &str, sa: &str, tr: &Value) -> Result<Bound, ApiError> {
    let mut b = Bound::default();
    let Some(r) = get(tr, &["spec", "boundObjectRef"]).filter(|r| !r.is_null()) else {
        return Ok(b);
    };
    let api_version = get_str(r, &["apiVersion"]).unwrap_or("");
    let kind = get_str(r, &["kind"]).unwrap_or("");
    let name = get_str(r, &["name"]).unwrap_or("");
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    let uid = match (group, kind) {
        ("", "Pod") => {
            let pod = g
                .get("pods", ns, name)
                .ok_or_else(|| ApiError::not_found("pods", name))?;
            if get_str(&pod, &["spec", "serviceAccountName"]).unwrap_or("") != sa {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token for serviceaccount {:?} to pod running with different serviceaccount name.",
                    sa
                )));
            }
            let node = get_str(&pod, &["spec", "nodeName"]).unwrap_or("");
            if !node.is_empty() {
                b.node = Some(match g.get("nodes", "", node) {
                    Some(n) => ref_json(&n),
                    None => json!({"name": node}),
                });
            }
            b.pod = Some(ref_json(&pod));
            uid_of(&pod).to_string()
        }
        ("", "Node") => {
            let node = g
                .get("nodes", "", name)
                .ok_or_else(|| ApiError::not_found("nodes", name))?;
            b.node = Some(ref_json(&node));
            uid_of(&node).to_string()
        }
        ("", "Secret") => {
            let s = g
                .get("secrets", ns, name)
                .ok_or_else(|| ApiError::not_found("secrets", name))?;
            b.secret = Some(ref_json(&s));
            uid_of(&s).to_string()
        }
        _ => {
            let gv = if group.is_empty() {
                format!("/{}", version)
            } else {
                format!("{}/{}", group, version)
            };
            return Err(ApiError::bad_request(format!(
                "cannot bind token to object of type {}, Kind={}",
                gv, kind
            )));
        }
    };
    let want = get_str(r, &["uid"]).unwrap_or("");
    if !want.is_empty() && want != uid {
        let res = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{}.{}", kind, group)
        };
        return Err(ApiError::conflict(&res, name, &format!(
            "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated", want)));
    }
    Ok(b)
}

/// NodeRestriction's admitServiceAccount: a node may only request tokens
/// bound to a pod (with uid) scheduled on it.
fn node_restriction(g: &Inner, ns: &str, sa: &str, node: &str, tr: &Value) -> Result<(), ApiError> {
    let forbidden = |why: &str| ApiError::forbidden("serviceaccounts", sa, why);
    let r = get(tr, &["spec", "boundObjectRef"]).filter(|r| !r.is_null());
    let s = |k: &str| r.and_then(|r| get_str(r, &[k])).unwrap_or("");
    if r.is_none() || s("apiVersion") != "v1" || s("kind") != "Pod" || s("name").is_empty() {
        return Err(forbidden("node requested token not bound to a pod"));
    }
    if s("uid").is_empty() {
        return Err(forbidden(
            "node requested token with a pod binding without a uid",
        ));
    }
    let pod = g
        .get("pods", ns, s("name"))
        .ok_or_else(|| ApiError::not_found("pods", s("name")))?;
    if uid_of(&pod) != s("uid") {
        return Err(forbidden(&format!("the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated", s("uid"))));
    }
    if get_str(&pod, &["spec", "nodeName"]).unwrap_or("") != node {
        return Err(forbidden(
            "node requested token bound to a pod scheduled on a different node",
        ));
    }
    Ok(())
}
