//! The kubelet API server (upstream pkg/kubelet/server/server.go, auth.go):
//! HTTPS on `port` (10250) with authentication and authorization, and the
//! plain-HTTP read-only port. Synchronous: one acceptor thread per port
//! ("kubelet-server", "readonly-server") and one thread per connection, at
//! most [`Limits::max_connections`] at a time: rkubelet-http's server, with
//! [`service`] deciding what each request gets.
//!
//! # Starting
//!
//! ```ignore
//! let cfg = ServerConfig::from_kubelet_config(&config, &flags.cert_dir)?;
//! let handles = kubelet::start(cfg, host, healthz, client, extra_routes, shutdown)?;
//! ```
//!
//! # Endpoints
//!
//! Both ports: `/healthz[/<check>]`, `/pods`, and the `/stats…` and
//! `/metrics…` extra routes. Port 10250 only, with
//! enableDebuggingHandlers: `/containerLogs/{ns}/{pod}/{container}`,
//! `/runningpods/`, `/configz`, `/logs/` and the streaming extra routes;
//! without it (and always on the read-only port) the debug paths answer 405
//! "Debug endpoints are disabled.". Unknown paths are 404. On port 10250
//! every request, /healthz included, is authenticated (401) and authorized
//! (403) first, as upstream's container-wide filter does.
//!
//! # Extension points (stats, metrics, exec/attach/portForward)
//!
//! Pass `(pattern, handler)` pairs as `extra_routes`. Patterns follow Go's
//! ServeMux: one ending in `/` serves its subtree (`"/stats/"`, `"/exec/"`),
//! others the exact path (`"/metrics"`, `"/metrics/resource"`); the longest
//! match wins and an extra route replaces a built-in of the same pattern.
//! `/stats…` and `/metrics…` patterns are served on the read-only port too;
//! `/exec/`, `/attach/`, `/portForward/`, `/run/`, `/checkpoint/`, `/debug/`
//! only when debugging handlers are enabled.
//!
//! ```ignore
//! pub trait Handler: Send + Sync {
//!     fn handle(&self, req: &mut Request, resp: &mut ResponseWriter<'_>) -> io::Result<()>;
//! }
//! // or from a closure:
//! let h: Arc<dyn Handler> = kubelet::handler(|req, resp| resp.send_text(200, "ok"));
//! ```
//!
//! [`Request`] and [`ResponseWriter`] are rkubelet-http's (its crate docs
//! list what they offer: query, headers, body, chunked streaming, upgrades
//! to a [`RawStream`], a [`CancelToken`]). On port 10250 `req.user()` is
//! the authenticated [`UserInfo`]; on the read-only port it is None.
//!
//! # Host
//!
//! The kubelet implements [`KubeletHost`] for pods, config and log files.

mod auth;
mod containerlogs;
/// Also read by kuberuntime for termination messages from logs.
pub(crate) mod crilog;
mod nodelogs;
mod routes;
mod service;
mod tls;
pub mod tls_options;

/// The fuzz targets' way in (fuzz/): an HTTP request head, its target, and
/// the authorization attributes (verb, subresources) its path maps to.
#[cfg(feature = "fuzzing")]
pub fn fuzz_request(data: &[u8]) {
    if let Some(path) = rkubelet_http::fuzz_head(data) {
        let _ = auth::subresources(&path);
    }
}

/// The fuzz targets' way in (fuzz/): the user and groups a verified
/// client certificate authenticates as.
#[cfg(feature = "fuzzing")]
pub fn fuzz_client_cert(der: &[u8]) -> Option<(String, Vec<String>)> {
    let user = tls::subject_user(der).ok()??;
    Some((user.name, user.groups))
}

#[cfg(test)]
mod tests;

use crate::util::worker::{ShutdownStage, Worker};
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::server::ServerError;
use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::shutdown::Shutdown;

use crate::client::Client;
use crate::kubeletconfig::{
    KubeletConfiguration, AUTHORIZATION_MODE_ALWAYS_ALLOW, AUTHORIZATION_MODE_WEBHOOK,
};
use crate::server::healthz::Healthz;

pub use auth::{AuthzMode, UserInfo};
pub use rkubelet_http::{CancelToken, Limits, RawStream, ResponseWriter};
pub use routes::handler;

/// A request on the kubelet's ports: `user()` is who authenticated (None
/// on the read-only port).
pub type Request = rkubelet_http::Request<UserInfo>;

/// A route's request handler (see the module docs).
pub trait Handler: Send + Sync {
    fn handle(&self, req: &mut Request, resp: &mut ResponseWriter<'_>) -> io::Result<()>;
}

/// Why the host could not resolve something.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostError {
    /// Unknown pod or container: 404 with this message.
    NotFound(String),
    /// Anything else (no previous instance, container still waiting): 400.
    Invalid(String),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::NotFound(m) | HostError::Invalid(m) => f.write_str(m),
        }
    }
}

/// What the server needs from the kubelet.
pub trait KubeletHost: Send + Sync {
    fn node_name(&self) -> String;
    /// The pod manager's pods, with the status manager's status.
    fn pods(&self) -> Vec<Pod>;
    /// Pods as the container runtime sees them.
    fn running_pods(&self) -> Vec<Pod>;
    /// The KubeletConfiguration, served as `{"kubeletconfig": ...}`.
    fn config_json(&self) -> serde_json::Value;
    /// The log file of a container's current (or previous) instance and
    /// whether it is still running. See [`container_log_path`].
    fn container_log(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<(PathBuf, bool), HostError>;
}

/// `<podLogsDir>/<ns>_<pod>_<uid>/<container>/<restartCount>.log`.
pub fn container_log_path(
    pod_logs_dir: &Path,
    namespace: &str,
    pod: &str,
    uid: &str,
    container: &str,
    restart_count: u32,
) -> PathBuf {
    pod_logs_dir
        .join(format!("{namespace}_{pod}_{uid}"))
        .join(container)
        .join(format!("{restart_count}.log"))
}

/// The server's settings (from the KubeletConfiguration and flags).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub address: IpAddr,
    /// The HTTPS port; 0 picks a free one.
    pub port: u16,
    /// The read-only port: None disables it, Some(0) picks a free one.
    pub read_only_port: Option<u16>,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// Where a self-signed kubelet.crt/kubelet.key live without the above.
    pub cert_dir: PathBuf,
    /// The serving certificate manager's slot (`serverTLSBootstrap`).
    pub serving_cert: Option<Arc<crate::client::tls::CertSlot>>,
    /// tlsMinVersion, tlsCipherSuites (Go's names).
    pub tls_min_version: String,
    pub tls_cipher_suites: Vec<String>,
    /// Verifies client certificates (x509 authentication) when set.
    pub client_ca_file: Option<PathBuf>,
    pub anonymous: bool,
    pub webhook_authn: bool,
    pub webhook_authn_ttl: Duration,
    pub authz_mode: AuthzMode,
    pub authz_authorized_ttl: Duration,
    pub authz_unauthorized_ttl: Duration,
    /// Served under /logs/ (default /var/log).
    pub node_logs_dir: PathBuf,
    /// Ends an idle `follow` log stream.
    pub streaming_idle_timeout: Duration,
    pub enable_debugging_handlers: bool,
    pub enable_system_log_handler: bool,
    pub limits: Limits,
}

fn optional_path(s: &str) -> Option<PathBuf> {
    (!s.is_empty()).then(|| PathBuf::from(s))
}

impl ServerConfig {
    pub fn from_kubelet_config(
        c: &KubeletConfiguration,
        cert_dir: &Path,
    ) -> Result<ServerConfig, ServerError> {
        let address: IpAddr = c.address.parse().map_err(|error| ServerError::Address {
            value: c.address.clone(),
            error,
        })?;
        let port_field = |field, value: i32| {
            u16::try_from(value).map_err(|error| ServerError::Port {
                field,
                value,
                error,
            })
        };
        let port = port_field("port", c.port)?;
        let read_only = port_field("readOnlyPort", c.read_only_port)?;
        let authz_mode = match c.authorization.mode.as_str() {
            AUTHORIZATION_MODE_ALWAYS_ALLOW => AuthzMode::AlwaysAllow,
            AUTHORIZATION_MODE_WEBHOOK => AuthzMode::Webhook,
            other => return Err(ServerError::AuthorizationMode(other.to_string())),
        };
        let authn = &c.authentication;
        Ok(ServerConfig {
            address,
            port,
            read_only_port: (read_only != 0).then_some(read_only),
            tls_cert_file: optional_path(&c.tls_cert_file),
            tls_private_key_file: optional_path(&c.tls_private_key_file),
            cert_dir: cert_dir.to_path_buf(),
            serving_cert: None,
            tls_min_version: c.tls_min_version.clone(),
            tls_cipher_suites: c.tls_cipher_suites.clone(),
            client_ca_file: optional_path(&authn.x509.client_ca_file),
            anonymous: authn.anonymous.enabled,
            webhook_authn: authn.webhook.enabled,
            webhook_authn_ttl: authn.webhook.cache_ttl.std(),
            authz_mode,
            authz_authorized_ttl: c.authorization.webhook.cache_authorized_ttl.std(),
            authz_unauthorized_ttl: c.authorization.webhook.cache_unauthorized_ttl.std(),
            node_logs_dir: PathBuf::from("/var/log"),
            streaming_idle_timeout: c.streaming_connection_idle_timeout.std(),
            enable_debugging_handlers: c.enable_debugging_handlers,
            enable_system_log_handler: c.enable_system_log_handler,
            limits: Limits::default(),
        })
    }
}

/// Servers started; the tests also look at where they listen (port 0 picks
/// one) and at their open connections.
pub(crate) struct Started {
    pub handles: Vec<Worker>,
    #[cfg(test)]
    pub secure: SocketAddr,
    #[cfg(test)]
    pub read_only: Option<SocketAddr>,
    /// The secure server first.
    #[cfg(test)]
    pub servers: Vec<Arc<rkubelet_http::Server<service::KubeletService>>>,
}

/// Starts the HTTPS server (and the read-only one when configured); they
/// stop accepting when `shutdown` comes.
pub fn start(
    cfg: ServerConfig,
    host: Arc<dyn KubeletHost>,
    healthz: Arc<Healthz>,
    client: Option<Client>,
    extra_routes: Vec<(String, Arc<dyn Handler>)>,
    shutdown: Shutdown,
) -> Result<Vec<Worker>, ServerError> {
    spawn_servers(cfg, host, healthz, client, extra_routes, shutdown).map(|s| s.handles)
}

pub(crate) fn spawn_servers(
    cfg: ServerConfig,
    host: Arc<dyn KubeletHost>,
    healthz: Arc<Healthz>,
    client: Option<Client>,
    extra_routes: Vec<(String, Arc<dyn Handler>)>,
    shutdown: Shutdown,
) -> Result<Started, ServerError> {
    let node = host.node_name();
    let src = tls::CertSource {
        cert_file: cfg.tls_cert_file.as_deref(),
        key_file: cfg.tls_private_key_file.as_deref(),
        cert_dir: &cfg.cert_dir,
        host: &node,
        slot: cfg.serving_cert.clone(),
        min_version: &cfg.tls_min_version,
        cipher_suites: &cfg.tls_cipher_suites,
    };
    let tls = tls::server_config(&src, cfg.client_ca_file.as_deref())?;
    let settings = auth::AuthSettings {
        node_name: node,
        anonymous: cfg.anonymous,
        webhook_authn: cfg.webhook_authn.then_some(cfg.webhook_authn_ttl),
        authz_mode: cfg.authz_mode,
        authorized_ttl: cfg.authz_authorized_ttl,
        unauthorized_ttl: cfg.authz_unauthorized_ttl,
    };
    let auth = Arc::new(auth::Auth::new(settings, client)?);
    let server = |name, tls, auth, router| {
        let settings = rkubelet_http::Settings {
            name,
            conn_thread: "kubelet-conn",
            reject_thread: "kubelet-reject",
            tls,
            limits: cfg.limits.clone(),
        };
        rkubelet_http::Server::new(settings, service::KubeletService { auth, router })
    };

    let secure_router = routes::secure(&cfg, &host, &healthz, &extra_routes);
    let (l, secure) = bind(cfg.address, cfg.port)?;
    log::info!("kubelet server listening on https://{secure}");
    let secure_server = server("kubelet-server", Some(tls), Some(auth), secure_router);
    let mut started = Started {
        handles: vec![Worker::adopt(
            secure_server
                .spawn(l, shutdown.clone())
                .map_err(ServerError::io("spawn kubelet-server"))?,
            ShutdownStage::Servers,
        )],
        #[cfg(test)]
        secure,
        #[cfg(test)]
        read_only: None,
        #[cfg(test)]
        servers: vec![secure_server],
    };

    if let Some(port) = cfg.read_only_port {
        let router = routes::read_only(&host, &healthz, &extra_routes);
        let (l, addr) = bind(cfg.address, port)?;
        log::info!("kubelet read-only server listening on http://{addr}");
        let ro = server("readonly-server", None, None, router);
        let handle = ro
            .spawn(l, shutdown)
            .map_err(ServerError::io("spawn readonly-server"))?;
        started
            .handles
            .push(Worker::adopt(handle, ShutdownStage::Servers));
        #[cfg(test)]
        {
            started.read_only = Some(addr);
            started.servers.push(ro);
        }
    }
    Ok(started)
}

fn bind(address: IpAddr, port: u16) -> Result<(TcpListener, SocketAddr), ServerError> {
    let l = TcpListener::bind((address, port))
        .map_err(ServerError::io(format!("listen on {address}:{port}")))?;
    let addr = l.local_addr().map_err(ServerError::io("local address"))?;
    Ok((l, addr))
}
