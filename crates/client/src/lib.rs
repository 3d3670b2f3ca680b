//! The kube-apiserver client: client-go's tools/clientcmd ([`kubeconfig`]),
//! rest ([`Client`]), util/flowcontrol ([`flowcontrol`]) and the tools/cache
//! reflector ([`reflector`]). Synchronous: ureq 2 over rustls (ring), one
//! thread per reflector.

mod auth;
mod error;
pub mod flowcontrol;
pub mod kubeconfig;
pub mod multiwatch;
pub mod paths;
pub mod reflector;
mod rest;
pub mod tls;
pub mod version;
mod watch;

/// The fuzz targets' way in (fuzz/): one line of a watch stream.
#[cfg(feature = "fuzzing")]
pub fn fuzz_watch_event(line: &[u8]) {
    if let Ok(ev) = watch::parse_event(line, "fuzz") {
        let _ = ev.resource_version();
    }
}

#[cfg(any(test, feature = "test-util"))]
pub mod testing;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use error::ApiError;
pub use kubeconfig::KubeconfigError;
pub use reflector::{start_reflector, ReflectorEvent};
pub use rest::{Client, InvalidServer, NO_CERT_YET};
pub use watch::{WatchEvent, WatchEventType, WatchStream};

/// Told of every API request a [`Client`] sends (client-go's metrics
/// adapter; the kubelet records `rest_client_requests_total` and
/// `rest_client_request_duration_seconds` from it): the HTTP status as a
/// string, or "<error>" when no response came back; the verb; the server's
/// `host[:port]`; how long it took.
pub trait Observer: Send + Sync {
    fn request(&self, code: &str, verb: &str, host: &str, took: Duration);
}

/// Records nothing (tools and tests that keep no metrics).
impl Observer for () {
    fn request(&self, _code: &str, _verb: &str, _host: &str, _took: Duration) {}
}

/// client-go's defaults when a config leaves QPS/burst at 0.
pub const DEFAULT_QPS: f32 = 5.0;
pub const DEFAULT_BURST: u32 = 10;
/// The per-request timeout used when a config leaves it at zero.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How to reach and authenticate to one apiserver (client-go's rest.Config).
#[derive(Clone)]
pub struct RestConfig {
    /// `https://host:port`, optionally with a path prefix; no trailing slash needed.
    pub server: String,
    pub tls: Arc<rustls::ClientConfig>,
    /// The client certificate `tls` presents, when there is one: swapping
    /// it changes the identity of every new connection.
    pub client_cert: Option<Arc<tls::CertSlot>>,
    pub auth: Auth,
    /// Requests per second; 0 means [`DEFAULT_QPS`], negative means unlimited.
    pub qps: f32,
    /// Token bucket size; 0 means [`DEFAULT_BURST`].
    pub burst: u32,
    /// Per-request timeout (connect to end of body); zero means [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    pub user_agent: String,
}

impl RestConfig {
    /// A config with client-go's defaults and Mozilla's roots for TLS.
    pub fn new(server: impl Into<String>) -> RestConfig {
        RestConfig {
            server: server.into(),
            tls: tls::default_config(),
            client_cert: None,
            auth: Auth::None,
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
            timeout: DEFAULT_TIMEOUT,
            user_agent: default_user_agent(),
        }
    }
}

/// `rkubelet/VERSION (OS/ARCH)`, in client-go's `kubelet/v1.x (linux/amd64)` shape.
pub fn default_user_agent() -> String {
    format!(
        "rkubelet/{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

impl fmt::Debug for RestConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestConfig")
            .field("server", &self.server)
            .field("auth", &self.auth)
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .field("timeout", &self.timeout)
            .field("user_agent", &self.user_agent)
            .finish_non_exhaustive()
    }
}

/// Request authentication besides a TLS client certificate (which lives in `tls`).
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    None,
    Bearer(String),
    /// Re-read every minute, keeping the last good token if a read fails (client-go).
    TokenFile(PathBuf),
}

impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Auth::None => f.write_str("None"),
            Auth::Bearer(_) => f.write_str("Bearer(<redacted>)"),
            Auth::TokenFile(p) => f.debug_tuple("TokenFile").field(p).finish(),
        }
    }
}

/// The patch flavours the apiserver accepts, by Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 7386 `application/merge-patch+json`.
    Merge,
    /// Kubernetes `application/strategic-merge-patch+json`.
    StrategicMerge,
    /// RFC 6902 `application/json-patch+json`.
    Json,
}

impl PatchType {
    pub fn content_type(self) -> &'static str {
        match self {
            PatchType::Merge => "application/merge-patch+json",
            PatchType::StrategicMerge => "application/strategic-merge-patch+json",
            PatchType::Json => "application/json-patch+json",
        }
    }
}
