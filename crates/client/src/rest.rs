//! The REST client (client-go's rest.RESTClient): JSON verbs over ureq with
//! a shared token-bucket rate limit, retries and per-request timeouts.
//!
//! Retry rule (at most [`MAX_ATTEMPTS`] tries, none started once the next try
//! would begin after `RestConfig::timeout` since the first):
//! - 429, 500, 502, 503, 504: retried for every verb, after `Retry-After`
//!   seconds when the server sent one, else after 100 ms doubling to 5 s.
//!   The server answered, and the apiserver rejects before acting on these
//!   (priority and fairness, unavailable storage, admission errors); a create
//!   that did land shows as AlreadyExists on the retry.
//! - DNS and connect/TLS-handshake failures: retried for every verb, as
//!   nothing was sent.
//! - Any later transport failure (reset, timeout, garbled response): the
//!   request may have been applied, so only GET, PUT (guarded by
//!   resourceVersion) and DELETE are retried; POST and PATCH are not.
//! - Everything else returns at once.

use std::io::Read;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::DeleteOptions;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::auth::TokenSource;
use super::error::is_retryable_code;
use rkubelet_util::backoff::Exponential;

use super::flowcontrol::TokenBucket;
use super::tls::{CapturingConnector, CertSlot, ConnTracker, SocketSlot};
use super::version::{ServerVersion, VersionCache};
use super::watch::WatchStream;
use super::{
    ApiError, Observer, PatchType, RestConfig, DEFAULT_BURST, DEFAULT_QPS, DEFAULT_TIMEOUT,
};

pub const MAX_ATTEMPTS: u32 = 5;
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(100);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);
/// Larger responses are refused rather than buffered.
const MAX_BODY: u64 = 256 << 20;
const MAX_ERROR_BODY: u64 = 1 << 20;
/// Added to a watch's `timeoutSeconds` for the no-data read timeout.
const WATCH_IDLE_SLACK: Duration = Duration::from_secs(30);
/// Without `timeoutSeconds` the apiserver closes a watch within 2 × 30 min.
const WATCH_DEFAULT_IDLE: Duration = Duration::from_secs(3600);
/// Why a request was not sent while the TLS bootstrap is still running.
pub const NO_CERT_YET: &str =
    "waiting for the client certificate: the TLS bootstrap's CSR is not approved and issued yet";
/// Throttling longer than this is logged, as client-go does.
const THROTTLE_LOG: Duration = Duration::from_secs(1);

/// A client for one apiserver. Clones share the connection pool and the
/// rate limiter; [`Client::with_rate_limit`] makes one with its own limiter.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    limiter: Option<Arc<TokenBucket>>,
}

struct Inner {
    base: String,
    /// Replaced by [`Client::close_connections`], dropping the idle pool.
    agent: RwLock<ureq::Agent>,
    tls: Arc<rustls::ClientConfig>,
    client_cert: Option<Arc<CertSlot>>,
    /// Open watch connections, closed with the pool.
    watches: ConnTracker,
    /// Bumped by every [`Client::close_connections`]: loops that keep
    /// connections of their own (`object-watches`) or sleep in a back-off
    /// (the reflectors) compare it to reconnect with the new certificate.
    generation: AtomicU64,
    token: TokenSource,
    timeout: Duration,
    user_agent: String,
    /// The server's release, read again after the connection fails.
    server_version: VersionCache,
    observer: Arc<dyn Observer>,
}

/// A server URL the client cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server {0:?}: must be an http:// or https:// URL")]
pub struct InvalidServer(pub String);

struct Body {
    content_type: &'static str,
    bytes: Vec<u8>,
}

/// One failed try and whether another may follow.
struct Failure {
    err: ApiError,
    retry: Retry,
}

enum Retry {
    Never,
    /// Safe for any verb; after the server's Retry-After when given.
    Always(Option<Duration>),
    /// Only if repeating the request cannot apply it twice.
    IfIdempotent,
}

impl Failure {
    fn never(err: ApiError) -> Failure {
        Failure {
            err,
            retry: Retry::Never,
        }
    }

    /// The wait before the next try, or None when this failure is final.
    fn retry_delay(&self, verb: &str, backoff: Duration) -> Option<Duration> {
        match self.retry {
            Retry::Never => None,
            Retry::Always(Some(after)) => Some(after),
            Retry::Always(None) => Some(backoff),
            Retry::IfIdempotent if matches!(verb, "GET" | "PUT" | "DELETE") => Some(backoff),
            Retry::IfIdempotent => None,
        }
    }
}

impl Client {
    /// A client for `cfg`'s server; `observer` is told of every request.
    pub fn new(cfg: RestConfig, observer: Arc<dyn Observer>) -> Result<Client, InvalidServer> {
        let base = cfg.server.trim_end_matches('/').to_string();
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(InvalidServer(cfg.server));
        }
        let timeout = if cfg.timeout.is_zero() {
            DEFAULT_TIMEOUT
        } else {
            cfg.timeout
        };
        let agent = pool_agent(&cfg.tls, timeout, &cfg.user_agent);
        let inner = Inner {
            base,
            agent: RwLock::new(agent),
            tls: cfg.tls,
            client_cert: cfg.client_cert,
            watches: ConnTracker::default(),
            generation: AtomicU64::new(0),
            token: TokenSource::new(cfg.auth),
            timeout,
            user_agent: cfg.user_agent,
            server_version: VersionCache::default(),
            observer,
        };
        Ok(Client {
            inner: Arc::new(inner),
            limiter: limiter(cfg.qps, cfg.burst),
        })
    }

    /// The same server and credentials behind a separate rate limit (the
    /// kubelet's event recorder uses eventRecordQPS/eventBurst).
    pub fn with_rate_limit(&self, qps: f32, burst: u32) -> Client {
        Client {
            inner: self.inner.clone(),
            limiter: limiter(qps, burst),
        }
    }

    /// The client certificate the connections present, when the kubeconfig
    /// gave one: the certificate manager swaps rotated pairs into it.
    pub fn client_cert(&self) -> Option<&Arc<CertSlot>> {
        self.inner.client_cert.as_ref()
    }

    /// Drops every idle pooled connection and shuts the open watches down,
    /// as upstream's rotating transport does after a rotation: the next
    /// requests and the reflectors' re-watches connect again, presenting
    /// the current client certificate. Requests in flight finish on theirs.
    pub fn close_connections(&self) -> usize {
        let fresh = pool_agent(&self.inner.tls, self.inner.timeout, &self.inner.user_agent);
        *self.inner.agent.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        self.inner.generation.fetch_add(1, Ordering::SeqCst);
        self.inner.watches.close_all()
    }

    /// How many times [`Client::close_connections`] ran: a change means
    /// "reconnect now, with the current client certificate".
    pub fn connection_generation(&self) -> u64 {
        self.inner.generation.load(Ordering::SeqCst)
    }

    /// An error while the client certificate slot is still empty (the TLS
    /// bootstrap waits for its CSR): nothing is sent, since the API server
    /// would only refuse an anonymous request.
    fn check_has_cert(&self, request: &str) -> Result<(), ApiError> {
        match self.waiting_for_cert() {
            true => Err(ApiError::transport(request, NO_CERT_YET)),
            false => Ok(()),
        }
    }

    /// True while the client certificate slot is empty (see [`NO_CERT_YET`]).
    pub fn waiting_for_cert(&self) -> bool {
        self.inner.client_cert.as_ref().is_some_and(|s| !s.is_set())
    }

    fn agent(&self) -> ureq::Agent {
        self.inner
            .agent
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The server URL without a trailing slash.
    pub fn server(&self) -> &str {
        &self.inner.base
    }

    /// The pieces [`super::multiwatch`] needs to speak HTTP itself: TLS
    /// config (with any client certificate), user agent and request timeout.
    pub(crate) fn tls_config(&self) -> Arc<rustls::ClientConfig> {
        self.inner.tls.clone()
    }

    pub(crate) fn user_agent(&self) -> &str {
        &self.inner.user_agent
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.inner.timeout
    }

    /// The `Authorization` header value, if any (token files re-read as for every request).
    pub(crate) fn auth_header(&self) -> Result<Option<String>, String> {
        self.inner.token.header()
    }

    /// Takes a rate-limiter token without sleeping; the request may start
    /// after the returned delay (zero when unlimited).
    pub(crate) fn reserve_token(&self) -> Duration {
        self.limiter
            .as_ref()
            .map_or(Duration::ZERO, |l| l.reserve())
    }

    /// `host[:port]` of the server, client-go's `host` metric label.
    fn host(&self) -> &str {
        url_authority(&self.inner.base)
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        self.json("GET", path, None)
    }

    /// GET `path` once, without retries, for the answer's `Date` header
    /// (`rkubelet check` compares it with the local clock).
    pub fn get_date(&self, path: &str) -> Result<Option<String>, ApiError> {
        let request = label("GET", path);
        let resp = self
            .send(&self.agent(), "GET", path, None, &[], &request)
            .map_err(|f| f.err)?;
        Ok(resp.header("Date").map(String::from))
    }

    /// GET returning the body as is (e.g. `/healthz`, which answers text).
    pub fn get_raw(&self, path: &str) -> Result<Vec<u8>, ApiError> {
        self.execute("GET", path, None)
    }

    pub fn list<T: DeserializeOwned>(&self, path_and_query: &str) -> Result<T, ApiError> {
        self.json("GET", path_and_query, None)
    }

    pub fn create<T: Serialize + DeserializeOwned>(
        &self,
        path: &str,
        obj: &T,
    ) -> Result<T, ApiError> {
        self.create_as(path, obj)
    }

    /// POST `obj` and decode the answer as `R`: a view of the few fields
    /// the caller reads (a review's verdict), so that the full type's
    /// decoder is not built into the binary for them.
    pub fn create_as<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        obj: &B,
    ) -> Result<R, ApiError> {
        let body = json_body("POST", path, "application/json", obj)?;
        self.json("POST", path, Some(body))
    }

    /// PUT: replaces the object (optimistic concurrency on its resourceVersion).
    pub fn replace<T: Serialize + DeserializeOwned>(
        &self,
        path: &str,
        obj: &T,
    ) -> Result<T, ApiError> {
        let body = json_body("PUT", path, "application/json", obj)?;
        self.json("PUT", path, Some(body))
    }

    pub fn patch<T: DeserializeOwned>(
        &self,
        path: &str,
        kind: PatchType,
        patch: &serde_json::Value,
    ) -> Result<T, ApiError> {
        let body = json_body("PATCH", path, kind.content_type(), patch)?;
        self.json("PATCH", path, Some(body))
    }

    /// DELETE with the options as the body; the response object is ignored.
    pub fn delete(&self, path: &str, opts: &DeleteOptions) -> Result<(), ApiError> {
        let body = json_body("DELETE", path, "application/json", opts)?;
        self.execute("DELETE", path, Some(&body)).map(drop)
    }

    /// Starts a watch; the caller's query sets `watch=1`, `resourceVersion`,
    /// `allowWatchBookmarks` and `timeoutSeconds`. No total timeout applies:
    /// the stream fails after `timeoutSeconds` + 30 s without data.
    pub fn watch(&self, path_and_query: &str) -> Result<WatchStream, ApiError> {
        self.watch_with_idle_timeout(path_and_query, watch_idle_timeout(path_and_query))
    }

    /// [`Client::watch`] with an explicit no-data timeout.
    pub(crate) fn watch_with_idle_timeout(
        &self,
        path_and_query: &str,
        idle: Duration,
    ) -> Result<WatchStream, ApiError> {
        let request = label("GET", path_and_query);
        let slot = SocketSlot::default();
        self.inner.watches.track(&slot);
        let agent = self.watch_agent(idle, slot.clone());
        let resp = self.with_retries("GET", &request, || {
            // Uncompressed, so each event can be read as soon as it arrives.
            let identity = [("Accept-Encoding", "identity")];
            self.send(&agent, "GET", path_and_query, None, &identity, &request)
        })?;
        WatchStream::start(resp, slot, request)
    }

    fn json<T: DeserializeOwned>(
        &self,
        verb: &str,
        path: &str,
        body: Option<Body>,
    ) -> Result<T, ApiError> {
        let bytes = self.execute(verb, path, body.as_ref())?;
        // Through a Value, as the watch and reflector decode: each API type's
        // Deserialize is then instantiated once, for Value, rather than once
        // more for a byte slice (344 KB of the static binary).
        serde_json::from_slice::<serde_json::Value>(&bytes)
            .and_then(serde_json::from_value)
            .map_err(|e| ApiError::decode(&label(verb, path), format!("decoding response: {e}")))
    }

    /// Sends with retries and returns the 2xx response body.
    fn execute(&self, verb: &str, path: &str, body: Option<&Body>) -> Result<Vec<u8>, ApiError> {
        let request = label(verb, path);
        self.with_retries(verb, &request, || {
            let resp = self.send(&self.agent(), verb, path, body, &[], &request)?;
            read_body(resp, MAX_BODY).map_err(|e| Failure {
                err: ApiError::transport(&request, format!("reading response: {e}")),
                retry: Retry::IfIdempotent,
            })
        })
    }

    fn with_retries<R>(
        &self,
        verb: &str,
        request: &str,
        mut attempt: impl FnMut() -> Result<R, Failure>,
    ) -> Result<R, ApiError> {
        let start = Instant::now();
        let mut backoff = Exponential::new(FIRST_RETRY_DELAY, MAX_RETRY_DELAY).jitter(0.2);
        let mut tries = 0;
        loop {
            tries += 1;
            self.throttle(request)?;
            let failure = match attempt() {
                Ok(r) => return Ok(r),
                Err(f) => f,
            };
            let wait = match failure.retry_delay(verb, backoff.next_delay()) {
                Some(w) if tries < MAX_ATTEMPTS && start.elapsed() + w <= self.inner.timeout => w,
                _ => return Err(failure.err),
            };
            log::debug!(
                "{}; retrying in {wait:?} (try {tries} of {MAX_ATTEMPTS})",
                failure.err
            );
            std::thread::sleep(wait);
        }
    }

    /// Waits for the rate limiter, refusing waits longer than the request timeout.
    fn throttle(&self, request: &str) -> Result<(), ApiError> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        match limiter.wait(self.inner.timeout) {
            Ok(waited) if waited > THROTTLE_LOG => {
                log::info!("Waited {waited:?} due to client-side throttling, request: {request}");
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(due) => Err(ApiError::transport(
                request,
                format!(
                    "client-side rate limiter would wait {due:?}, more than the request timeout"
                ),
            )),
        }
    }

    /// One try: a 2xx response, or a classified failure.
    fn send(
        &self,
        agent: &ureq::Agent,
        verb: &str,
        path: &str,
        body: Option<&Body>,
        headers: &[(&str, &str)],
        request: &str,
    ) -> Result<ureq::Response, Failure> {
        if !path.starts_with('/') {
            let msg = "path must begin with '/'";
            return Err(Failure::never(ApiError::transport(request, msg)));
        }
        self.check_has_cert(request).map_err(Failure::never)?;
        let mut req = agent
            .request(verb, &format!("{}{}", self.inner.base, path))
            .set("Accept", "application/json");
        for (name, value) in headers {
            req = req.set(name, value);
        }
        if let Some(auth) = self
            .inner
            .token
            .header()
            .map_err(|e| Failure::never(ApiError::transport(request, e)))?
        {
            req = req.set("Authorization", &auth);
        }
        let started = Instant::now();
        let result = match body {
            Some(b) => req.set("Content-Type", b.content_type).send_bytes(&b.bytes),
            None => req.call(),
        };
        let code = match &result {
            Ok(resp) | Err(ureq::Error::Status(_, resp)) => resp.status().to_string(),
            Err(ureq::Error::Transport(_)) => "<error>".to_string(),
        };
        self.inner
            .observer
            .request(&code, verb, self.host(), started.elapsed());
        match result {
            Ok(resp) if (200..300).contains(&resp.status()) => Ok(resp),
            Ok(resp) | Err(ureq::Error::Status(_, resp)) => Err(status_failure(resp, request)),
            Err(ureq::Error::Transport(t)) => {
                // Whatever answers next may be another release (an upgrade).
                self.inner.server_version.forget();
                Err(transport_failure(&t, request))
            }
        }
    }

    /// The server's release (`GET /version`), read once and again after a
    /// connection failure; the newest release while it cannot be read.
    pub fn server_version(&self) -> ServerVersion {
        self.inner.server_version.get_or_fetch(self)
    }

    /// A one-connection agent for a watch: no total timeout, a no-data read
    /// timeout, and the TLS socket captured so the stream can close it.
    fn watch_agent(&self, idle: Duration, slot: SocketSlot) -> ureq::Agent {
        let connector = CapturingConnector {
            tls: self.inner.tls.clone(),
            slot,
        };
        ureq::AgentBuilder::new()
            .tls_connector(Arc::new(connector))
            .timeout_connect(self.inner.timeout)
            .timeout_write(self.inner.timeout)
            .timeout_read(idle)
            .redirects(0)
            .max_idle_connections(0)
            .user_agent(&self.inner.user_agent)
            .build()
    }
}

/// The pooled agent of ordinary requests.
fn pool_agent(tls: &Arc<rustls::ClientConfig>, timeout: Duration, user_agent: &str) -> ureq::Agent {
    ureq::AgentBuilder::new()
        .tls_config(tls.clone())
        .timeout(timeout)
        .redirects(0)
        .user_agent(user_agent)
        .build()
}

/// client-go's rest.Config defaults: 0 → 5 qps / 10 burst, negative → unlimited.
fn limiter(qps: f32, burst: u32) -> Option<Arc<TokenBucket>> {
    if qps < 0.0 || qps.is_nan() {
        return None;
    }
    let qps = if qps == 0.0 { DEFAULT_QPS } else { qps };
    let burst = if burst == 0 { DEFAULT_BURST } else { burst };
    Some(Arc::new(TokenBucket::new(qps, burst)))
}

/// `"VERB path"`, the request named in errors.
fn label(verb: &str, path: &str) -> String {
    format!("{verb} {path}")
}

fn json_body<B: Serialize + ?Sized>(
    verb: &str,
    path: &str,
    content_type: &'static str,
    obj: &B,
) -> Result<Body, ApiError> {
    let bytes = serde_json::to_vec(obj)
        .map_err(|e| ApiError::decode(&label(verb, path), format!("encoding request: {e}")))?;
    Ok(Body {
        content_type,
        bytes,
    })
}

fn read_body(resp: ureq::Response, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    resp.into_reader().take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        let msg = format!("response body larger than {limit} bytes");
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, msg));
    }
    Ok(buf)
}

fn status_failure(resp: ureq::Response, request: &str) -> Failure {
    let code = resp.status();
    let retry_after = resp.header("Retry-After").and_then(parse_retry_after);
    // The status line and code decide; a body that fails to read just loses detail.
    let body = read_body(resp, MAX_ERROR_BODY).unwrap_or_default();
    let err = ApiError::from_response(code, &body, request);
    let retry = if is_retryable_code(code) {
        Retry::Always(retry_after)
    } else {
        Retry::Never
    };
    Failure { err, retry }
}

/// Retry-After in seconds (the apiserver never sends an HTTP date).
fn parse_retry_after(value: &str) -> Option<Duration> {
    value.trim().parse::<u64>().ok().map(Duration::from_secs)
}

fn transport_failure(t: &ureq::Transport, request: &str) -> Failure {
    use ureq::ErrorKind as K;
    let retry = match t.kind() {
        // Nothing reached the server.
        K::Dns | K::ConnectionFailed => Retry::Always(None),
        // Configuration errors: another try fails the same way.
        K::InvalidUrl
        | K::UnknownScheme
        | K::InsecureRequestHttpsOnly
        | K::InvalidProxyUrl
        | K::ProxyUnauthorized => Retry::Never,
        // Io, BadStatus, BadHeader, ...: the request may have been applied.
        _ => Retry::IfIdempotent,
    };
    Failure {
        err: ApiError::transport(request, t),
        retry,
    }
}

/// What stands between a URL's `scheme://` and its path: `host[:port]`,
/// with any userinfo.
pub(crate) fn url_authority(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// `timeoutSeconds` from the query plus slack; the default when absent.
fn watch_idle_timeout(path_and_query: &str) -> Duration {
    let query = path_and_query.split_once('?').map_or("", |(_, q)| q);
    let secs = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == "timeoutSeconds")
        .and_then(|(_, v)| v.parse::<u64>().ok());
    secs.map_or(WATCH_DEFAULT_IDLE, Duration::from_secs) + WATCH_IDLE_SLACK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_timeout_from_query() {
        assert_eq!(
            watch_idle_timeout("/api/v1/pods?watch=1&timeoutSeconds=400"),
            Duration::from_secs(430)
        );
        assert_eq!(
            watch_idle_timeout("/api/v1/pods?watch=1"),
            Duration::from_secs(3630)
        );
    }

    #[test]
    fn retry_after_seconds() {
        assert_eq!(parse_retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn post_and_patch_are_not_retried_after_send() {
        let f = Failure {
            err: ApiError::Transport("x".into()),
            retry: Retry::IfIdempotent,
        };
        let d = Duration::from_millis(1);
        assert_eq!(f.retry_delay("POST", d), None);
        assert_eq!(f.retry_delay("PATCH", d), None);
        assert_eq!(f.retry_delay("GET", d), Some(d));
        assert_eq!(f.retry_delay("PUT", d), Some(d));
    }

    #[test]
    fn new_rejects_non_http_server() {
        let err = Client::new(RestConfig::new("ftp://x"), Arc::new(()))
            .err()
            .expect("error");
        assert!(err.to_string().contains("ftp://x"), "{err}");
    }
}
