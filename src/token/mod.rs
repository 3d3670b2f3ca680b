//! The token manager (upstream `pkg/kubelet/token`): service-account tokens
//! for projected volumes, requested through the TokenRequest API and bound
//! to the pod, cached per (service account, audience, lifetime, pod) and
//! renewed at 80 % of their lifetime or after 24 hours.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use rkubelet_util::lock;

use crate::client::{paths, Client};

/// Upstream maxTTL: a token is renewed after a day whatever its lifetime.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// Upstream's jitter on the refresh point, so pods do not renew together.
const MAX_JITTER: Duration = Duration::from_secs(10);

/// Which token: everything that makes two requests differ.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenKey {
    pub namespace: String,
    pub service_account: String,
    pub audience: String,
    pub expiration_seconds: i64,
    pub pod_name: String,
    pub pod_uid: String,
}

#[derive(Debug, Clone)]
struct Cached {
    token: String,
    expires: SystemTime,
    issued: SystemTime,
    /// Per-token jitter, fixed at issue so the refresh point is stable.
    jitter: Duration,
}

impl Cached {
    /// Upstream requiresRefresh: past 24 h since issue, or within 20 % of
    /// the lifetime of expiry.
    fn requires_refresh(&self, now: SystemTime) -> bool {
        let ttl = self.expires.duration_since(self.issued).unwrap_or_default();
        if now >= self.issued + MAX_TTL.saturating_sub(self.jitter) {
            return true;
        }
        let early = ttl / 5 + self.jitter;
        now + early >= self.expires
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    /// The API refused or failed the request; the message names why.
    Request(String),
    /// The answer carried no usable token.
    Invalid(String),
}

impl std::fmt::Display for TokenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenError::Request(m) | TokenError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for TokenError {}

/// Where tokens come from; the API in production, a fake in tests.
pub trait TokenRequester: Send + Sync {
    /// Returns the token and its expiry.
    fn request(&self, key: &TokenKey) -> Result<(String, SystemTime), TokenError>;
}

pub struct TokenManager {
    requester: Box<dyn TokenRequester>,
    cache: Mutex<HashMap<TokenKey, Cached>>,
}

impl TokenManager {
    pub fn new(requester: Box<dyn TokenRequester>) -> Self {
        TokenManager {
            requester,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// A valid token for `key`: the cached one unless it is due for renewal.
    /// When renewal fails, a cached token that has not expired is still
    /// returned (upstream), so an API outage does not empty token files.
    pub fn get_service_account_token(&self, key: &TokenKey) -> Result<String, TokenError> {
        self.get_at(key, SystemTime::now())
    }

    fn get_at(&self, key: &TokenKey, now: SystemTime) -> Result<String, TokenError> {
        let cached = lock(&self.cache).get(key).cloned();
        if let Some(c) = cached.as_ref().filter(|c| !c.requires_refresh(now)) {
            return Ok(c.token.clone());
        }
        match self.requester.request(key) {
            Ok((token, expires)) => {
                let entry = Cached {
                    token: token.clone(),
                    expires,
                    issued: now,
                    jitter: jitter(key),
                };
                lock(&self.cache).insert(key.clone(), entry);
                Ok(token)
            }
            Err(e) => match cached.filter(|c| c.expires > now) {
                Some(c) => {
                    log::warn!(
                        "renewing the token of {}/{} for pod {}: {e}; keeping the current one",
                        key.namespace,
                        key.service_account,
                        key.pod_name
                    );
                    Ok(c.token)
                }
                None => Err(e),
            },
        }
    }

    /// Forgets the tokens of a pod that is gone (upstream
    /// DeleteServiceAccountToken).
    pub fn delete_service_account_tokens(&self, pod_uid: &str) {
        lock(&self.cache).retain(|k, _| k.pod_uid != pod_uid);
    }

    /// Drops expired tokens (upstream's periodic cleanup).
    pub fn cleanup(&self) {
        let now = SystemTime::now();
        lock(&self.cache).retain(|_, c| c.expires > now);
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        lock(&self.cache).len()
    }
}

/// A stable pseudo-random jitter in [0, MAX_JITTER) per token.
fn jitter(key: &TokenKey) -> Duration {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    Duration::from_millis(h.finish() % MAX_JITTER.as_millis() as u64)
}

/// TokenRequest through the API server, bound to the pod.
pub struct ApiTokenRequester {
    client: Client,
}

impl ApiTokenRequester {
    pub fn new(client: Client) -> Self {
        ApiTokenRequester { client }
    }
}

impl TokenRequester for ApiTokenRequester {
    fn request(&self, key: &TokenKey) -> Result<(String, SystemTime), TokenError> {
        let tr = TokenRequest {
            spec: TokenRequestSpec {
                // An empty audience means the API server's own audiences.
                audiences: if key.audience.is_empty() {
                    vec![]
                } else {
                    vec![key.audience.clone()]
                },
                expiration_seconds: Some(key.expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: Some(key.pod_name.clone()),
                    uid: Some(key.pod_uid.clone()),
                }),
            },
            ..Default::default()
        };
        let path = paths::service_account_token(&key.namespace, &key.service_account);
        let out: TokenRequest = self.client.create(&path, &tr).map_err(|e| {
            TokenError::Request(format!(
                "failed to fetch token for service account {}/{}: {e}",
                key.namespace, key.service_account
            ))
        })?;
        let status = out
            .status
            .ok_or_else(|| TokenError::Invalid("TokenRequest answer has no status".into()))?;
        if status.token.is_empty() {
            return Err(TokenError::Invalid(
                "TokenRequest answer has an empty token".into(),
            ));
        }
        Ok((
            status.token,
            SystemTime::from(status.expiration_timestamp.0),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Fake {
        calls: Arc<AtomicUsize>,
        ttl: Duration,
        fail: Arc<Mutex<bool>>,
    }

    impl TokenRequester for Fake {
        fn request(&self, _: &TokenKey) -> Result<(String, SystemTime), TokenError> {
            if *self.fail.lock().unwrap() {
                return Err(TokenError::Request("forbidden".into()));
            }
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            Ok((format!("t{n}"), SystemTime::now() + self.ttl))
        }
    }

    fn key(uid: &str) -> TokenKey {
        TokenKey {
            namespace: "ns".into(),
            service_account: "default".into(),
            audience: String::new(),
            expiration_seconds: 3607,
            pod_name: "p".into(),
            pod_uid: uid.into(),
        }
    }

    #[test]
    fn cached_until_eighty_percent_then_renewed() {
        let calls = Arc::new(AtomicUsize::new(0));
        let fail = Arc::new(Mutex::new(false));
        let m = TokenManager::new(Box::new(Fake {
            calls: calls.clone(),
            ttl: Duration::from_secs(3600),
            fail: fail.clone(),
        }));
        let now = SystemTime::now();
        assert_eq!(m.get_at(&key("a"), now).unwrap(), "t0");
        assert_eq!(
            m.get_at(&key("a"), now + Duration::from_secs(2000))
                .unwrap(),
            "t0"
        );
        assert_eq!(m.get_at(&key("b"), now).unwrap(), "t1", "per pod");
        // Past 80 % of the lifetime: renewed.
        assert_eq!(
            m.get_at(&key("a"), now + Duration::from_secs(2900))
                .unwrap(),
            "t2"
        );
        // Renewal fails: the unexpired token is kept; an expired one is not.
        *fail.lock().unwrap() = true;
        let later = SystemTime::now() + Duration::from_secs(3000);
        assert_eq!(m.get_at(&key("b"), later).unwrap(), "t1");
        let expired = SystemTime::now() + Duration::from_secs(4000);
        assert!(m.get_at(&key("b"), expired).is_err());
        m.delete_service_account_tokens("a");
        assert_eq!(m.len(), 1);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn renewed_after_a_day_even_when_longer_lived() {
        let c = Cached {
            token: "x".into(),
            issued: SystemTime::UNIX_EPOCH,
            expires: SystemTime::UNIX_EPOCH + Duration::from_secs(30 * 24 * 3600),
            jitter: Duration::ZERO,
        };
        assert!(!c.requires_refresh(SystemTime::UNIX_EPOCH + Duration::from_secs(23 * 3600)));
        assert!(c.requires_refresh(SystemTime::UNIX_EPOCH + Duration::from_secs(24 * 3600)));
    }
}
