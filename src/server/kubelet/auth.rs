//! Authentication and authorization of kubelet API requests (upstream
//! pkg/kubelet/server/auth.go and the delegating authn/authz the kubelet
//! builds in cmd/kubelet/app/auth.go).
//!
//! AuthN, in order: a verified x509 client certificate (user = CN, groups =
//! O); a bearer token (Authorization header or WebSocket protocol) checked
//! with a TokenReview when webhook authn is on; else anonymous when enabled.
//! A token that fails review is a 401 even with anonymous on. Authenticated
//! users get the `system:authenticated` group.
//!
//! AuthZ: AlwaysAllow, or SubjectAccessReviews on `nodes/<subresource>` for
//! the node, tried in upstream's (fine-grained) order until one is allowed.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use rkubelet_util::lock;
use serde::{Deserialize, Serialize};

use crate::client::Client;
use crate::server::ServerError;

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const SUBJECT_ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const WEBSOCKET_TOKEN_PREFIX: &str = "base64url.bearer.authorization.k8s.io.";
const CACHE_CAP: usize = 4096;

pub const ANONYMOUS_USER: &str = "system:anonymous";
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// The user a request was authenticated as (user.Info).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    fn anonymous() -> UserInfo {
        UserInfo {
            name: ANONYMOUS_USER.into(),
            groups: vec![UNAUTHENTICATED_GROUP.into()],
            ..Default::default()
        }
    }

    fn with_authenticated_group(mut self) -> UserInfo {
        if !self.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.into());
        }
        self
    }
}

/// How requests are authorized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthzMode {
    AlwaysAllow,
    Webhook,
}

/// A small map whose entries expire; bounded, cleared when full of live entries.
pub(crate) struct TtlCache<V: Clone> {
    entries: Mutex<HashMap<String, (Instant, V)>>,
}

impl<V: Clone> TtlCache<V> {
    pub fn new() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }

    pub fn get(&self, key: &str) -> Option<V> {
        let mut map = lock(&self.entries);
        match map.get(key) {
            Some((expiry, v)) if *expiry > Instant::now() => Some(v.clone()),
            Some(_) => {
                map.remove(key);
                None
            }
            None => None,
        }
    }

    pub fn insert(&self, key: String, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let mut map = lock(&self.entries);
        if map.len() >= CACHE_CAP {
            let now = Instant::now();
            map.retain(|_, (expiry, _)| *expiry > now);
            if map.len() >= CACHE_CAP {
                map.clear();
            }
        }
        map.insert(key, (Instant::now() + ttl, value));
    }
}

/// A TokenReview's answer: the user, or None when not authenticated.
type TokenResult = Option<UserInfo>;

struct TokenWebhook {
    client: Client,
    ttl: Duration,
    cache: TtlCache<TokenResult>,
}

impl TokenWebhook {
    fn review(&self, token: &str) -> Result<TokenResult, String> {
        if let Some(hit) = self.cache.get(token) {
            return Ok(hit);
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let resp = self
            .client
            .create(TOKEN_REVIEWS, &review)
            .map_err(|e| format!("token review: {e}"))?;
        let status = resp.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            if let Some(err) = status.error.filter(|e| !e.is_empty()) {
                return Err(format!("token review: {err}"));
            }
            self.cache.insert(token.to_string(), None, self.ttl);
            return Ok(None);
        }
        let u = status.user.unwrap_or_default();
        let user = UserInfo {
            name: u.username.unwrap_or_default(),
            uid: u.uid.unwrap_or_default(),
            groups: u.groups.unwrap_or_default(),
            extra: u.extra.unwrap_or_default(),
        };
        self.cache
            .insert(token.to_string(), Some(user.clone()), self.ttl);
        Ok(Some(user))
    }
}

struct SarWebhook {
    client: Client,
    authorized_ttl: Duration,
    unauthorized_ttl: Duration,
    cache: TtlCache<bool>,
}

impl SarWebhook {
    fn allowed(&self, spec: SubjectAccessReviewSpec) -> Result<bool, String> {
        let key = serde_json::to_string(&spec).map_err(|e| e.to_string())?;
        if let Some(hit) = self.cache.get(&key) {
            return Ok(hit);
        }
        let review = SubjectAccessReview {
            spec,
            ..Default::default()
        };
        let resp: SarAnswer = self
            .client
            .create_as(SUBJECT_ACCESS_REVIEWS, &review)
            .map_err(|e| format!("subject access review: {e}"))?;
        let allowed = resp.status.is_some_and(|s| s.allowed);
        let ttl = if allowed {
            self.authorized_ttl
        } else {
            self.unauthorized_ttl
        };
        self.cache.insert(key, allowed, ttl);
        Ok(allowed)
    }
}

/// The part of a SubjectAccessReview's answer the kubelet reads.
#[derive(Deserialize)]
struct SarAnswer {
    #[serde(default)]
    status: Option<SarVerdict>,
}

#[derive(Deserialize)]
struct SarVerdict {
    #[serde(default)]
    allowed: bool,
}

/// What the server needs to authenticate and authorize.
pub(crate) struct AuthSettings {
    pub node_name: String,
    pub anonymous: bool,
    /// TokenReview cache TTL when webhook authentication is on.
    pub webhook_authn: Option<Duration>,
    pub authz_mode: AuthzMode,
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
}

/// The outcome of authorizing a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    Allow,
    /// 403 with this body.
    Forbidden(String),
    /// 500 with this body.
    Error(String),
}

pub(crate) struct Auth {
    node_name: String,
    anonymous: bool,
    tokens: Option<TokenWebhook>,
    sar: Option<SarWebhook>,
}

impl Auth {
    /// Fails, as upstream does, when a webhook is configured without an API client.
    pub fn new(s: AuthSettings, client: Option<Client>) -> Result<Auth, ServerError> {
        let tokens = match s.webhook_authn {
            None => None,
            Some(ttl) => Some(TokenWebhook {
                client: client
                    .clone()
                    .ok_or(ServerError::NoClient("authentication"))?,
                ttl,
                cache: TtlCache::new(),
            }),
        };
        let sar = match s.authz_mode {
            AuthzMode::AlwaysAllow => None,
            AuthzMode::Webhook => Some(SarWebhook {
                client: client.ok_or(ServerError::NoClient("authorization"))?,
                authorized_ttl: s.authorized_ttl,
                unauthorized_ttl: s.unauthorized_ttl,
                cache: TtlCache::new(),
            }),
        };
        Ok(Auth {
            node_name: s.node_name,
            anonymous: s.anonymous,
            tokens,
            sar,
        })
    }

    /// The request's user; Ok(None) means 401, as does Err (logged).
    pub fn authenticate(
        &self,
        cert_user: Option<&UserInfo>,
        headers: &[(String, String)],
    ) -> Result<Option<UserInfo>, String> {
        if let Some(u) = cert_user {
            return Ok(Some(u.clone().with_authenticated_group()));
        }
        if let Some(tokens) = &self.tokens {
            if let Some(token) = bearer_token(headers).or_else(|| websocket_token(headers)) {
                return match tokens.review(&token)? {
                    Some(u) => Ok(Some(u.with_authenticated_group())),
                    None => Err("invalid bearer token".into()),
                };
            }
        }
        Ok(self.anonymous.then(UserInfo::anonymous))
    }

    /// Authorizes `user` for `method path` on this node.
    pub fn authorize(&self, user: &UserInfo, method: &str, path: &str) -> Decision {
        let verb = api_verb(method);
        let subresources = subresources(path);
        let Some(sar) = &self.sar else {
            return Decision::Allow;
        };
        for sub in &subresources {
            let spec = self.review_spec(user, verb, sub);
            match sar.allowed(spec) {
                Ok(true) => return Decision::Allow,
                Ok(false) => {}
                Err(e) => {
                    log::error!(
                        "authorization error for {} {verb} nodes/{sub}: {e}",
                        user.name
                    );
                    return Decision::Error(format!(
                        "Authorization error (user={}, verb={verb}, resource=nodes, subresource={sub})",
                        user.name
                    ));
                }
            }
        }
        log::debug!(
            "forbidden: user={} verb={verb} subresources={subresources:?}",
            user.name
        );
        Decision::Forbidden(format!(
            "Forbidden (user={}, verb={verb}, resource=nodes, subresource(s)=[{}])\n",
            user.name,
            subresources.join(" ")
        ))
    }

    fn review_spec(
        &self,
        user: &UserInfo,
        verb: &str,
        subresource: &str,
    ) -> SubjectAccessReviewSpec {
        SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: (!user.uid.is_empty()).then(|| user.uid.clone()),
            groups: Some(user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_string()),
                version: Some("v1".into()),
                resource: Some("nodes".into()),
                subresource: Some(subresource.to_string()),
                name: Some(self.node_name.clone()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// The API verb for an HTTP method, as upstream maps it (others, HEAD
/// included, map to the empty verb).
pub(crate) fn api_verb(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "GET" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// upstream isSubpath: `path` or anything below `prefix/`.
fn is_subpath(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The `nodes` subresources to try, in order (KubeletFineGrainedAuthz on:
/// the specific one first, then `proxy`).
pub(crate) fn subresources(path: &str) -> Vec<&'static str> {
    const SINGLE: [(&str, &str); 4] = [
        ("/stats/", "stats"),
        ("/metrics", "metrics"),
        ("/logs/", "log"),
        ("/checkpoint/", "checkpoint"),
    ];
    const WITH_PROXY: [(&str, &str); 4] = [
        ("/pods", "pods"),
        ("/runningpods/", "pods"),
        ("/healthz", "healthz"),
        ("/configz", "configz"),
    ];
    if let Some((_, sub)) = SINGLE.iter().find(|(p, _)| is_subpath(path, p)) {
        return vec![sub];
    }
    match WITH_PROXY.iter().find(|(p, _)| is_subpath(path, p)) {
        Some((_, sub)) => vec![sub, "proxy"],
        None => vec!["proxy"],
    }
}

/// `Authorization: Bearer <token>` (scheme case-insensitive, token non-empty).
fn bearer_token(headers: &[(String, String)]) -> Option<String> {
    let value = headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .map(|(_, v)| v)?;
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

/// A token in `Sec-WebSocket-Protocol: base64url.bearer.authorization.k8s.io.<b64>`.
fn websocket_token(headers: &[(String, String)]) -> Option<String> {
    let is_ws = headers
        .iter()
        .any(|(k, v)| k == "upgrade" && v.eq_ignore_ascii_case("websocket"));
    if !is_ws {
        return None;
    }
    headers
        .iter()
        .filter(|(k, _)| k == "sec-websocket-protocol")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .find_map(|p| p.strip_prefix(WEBSOCKET_TOKEN_PREFIX))
        .and_then(|b64| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(b64)
                .ok()
        })
        .and_then(|raw| String::from_utf8(raw).ok())
        .filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_paths_to_subresources() {
        assert_eq!(subresources("/stats/summary"), vec!["stats"]);
        assert_eq!(subresources("/stats"), vec!["stats"]);
        assert_eq!(subresources("/metrics"), vec!["metrics"]);
        assert_eq!(subresources("/metrics/resource"), vec!["metrics"]);
        assert_eq!(subresources("/metricsx"), vec!["proxy"]);
        assert_eq!(subresources("/logs/syslog"), vec!["log"]);
        assert_eq!(subresources("/checkpoint/ns/p/c"), vec!["checkpoint"]);
        assert_eq!(subresources("/pods"), vec!["pods", "proxy"]);
        assert_eq!(subresources("/runningpods/"), vec!["pods", "proxy"]);
        assert_eq!(subresources("/healthz"), vec!["healthz", "proxy"]);
        assert_eq!(subresources("/configz"), vec!["configz", "proxy"]);
        assert_eq!(subresources("/exec/ns/p/c"), vec!["proxy"]);
        assert_eq!(subresources("/containerLogs/ns/p/c"), vec!["proxy"]);
        assert_eq!(api_verb("GET"), "get");
        assert_eq!(api_verb("POST"), "create");
        assert_eq!(api_verb("HEAD"), "");
    }

    #[test]
    fn extracts_tokens() {
        let h = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            bearer_token(&[h("authorization", "Bearer abc")]),
            Some("abc".into())
        );
        assert_eq!(
            bearer_token(&[h("authorization", "bearer abc")]),
            Some("abc".into())
        );
        assert_eq!(bearer_token(&[h("authorization", "Basic abc")]), None);
        assert_eq!(bearer_token(&[h("authorization", "Bearer ")]), None);
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("tok");
        let ws = [
            h("upgrade", "websocket"),
            h(
                "sec-websocket-protocol",
                &format!("v5.channel.k8s.io, {WEBSOCKET_TOKEN_PREFIX}{b64}"),
            ),
        ];
        assert_eq!(websocket_token(&ws), Some("tok".into()));
    }

    #[test]
    fn cache_expires() {
        let c = TtlCache::new();
        c.insert("a".into(), 1, Duration::from_millis(30));
        c.insert("z".into(), 2, Duration::ZERO);
        assert_eq!(c.get("a"), Some(1));
        assert_eq!(c.get("z"), None);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.get("a"), None);
    }

    #[test]
    fn anonymous_and_always_allow() {
        let settings = |anonymous| AuthSettings {
            node_name: "n1".into(),
            anonymous,
            webhook_authn: None,
            authz_mode: AuthzMode::AlwaysAllow,
            authorized_ttl: Duration::ZERO,
            unauthorized_ttl: Duration::ZERO,
        };
        let auth = Auth::new(settings(true), None).unwrap();
        let user = auth.authenticate(None, &[]).unwrap().unwrap();
        assert_eq!(user.name, ANONYMOUS_USER);
        assert_eq!(auth.authorize(&user, "GET", "/pods"), Decision::Allow);
        let closed = Auth::new(settings(false), None).unwrap();
        assert_eq!(closed.authenticate(None, &[]).unwrap(), None);
        let webhook = AuthSettings {
            authz_mode: AuthzMode::Webhook,
            ..settings(false)
        };
        assert!(Auth::new(webhook, None).is_err());
    }
}
