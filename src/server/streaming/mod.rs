//! `/exec`, `/attach` and `/portForward` (upstream server.go getExec /
//! getAttach / getPortForward with the CRI streaming runtime).
//!
//! The kubelet resolves the pod and container, asks the runtime (CRI Exec /
//! Attach / PortForward) for a one-time URL on its stream server, and then
//! proxies the client's upgraded connection there byte for byte (see
//! [`proxy`]). Routes, as upstream:
//!   GET|POST /exec/{ns}/{pod}[/{uid}]/{container}?command=..&stdin=1&stdout=1&stderr=1&tty=1
//!   GET|POST /attach/{ns}/{pod}[/{uid}]/{container}?stdin=1&stdout=1&stderr=1
//!   GET|POST /portForward/{ns}/{pod}[/{uid}][?port=N (WebSocket only)]
//!
//! Streams are bounded: at most `max_streams` at once (then 429), each ending
//! after streamingConnectionIdleTimeout without traffic.

pub mod conn;
pub mod proxy;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::cri::{api, CriError, RemoteRuntime};
use crate::kuberuntime::labels::{CONTAINER_NAME_LABEL, POD_UID_LABEL};

pub use conn::ClientStream;

const TEXT_PLAIN: &str = "text/plain; charset=utf-8";
/// Upstream streaming CacheTTL, sent as Retry-After with a 429.
const RETRY_AFTER_SECS: u64 = 60;

#[derive(Clone, Debug)]
pub struct StreamingConfig {
    /// streamingConnectionIdleTimeout (4h by default).
    pub idle_timeout: Duration,
    /// Concurrent streams; each holds two threads.
    pub max_streams: usize,
    /// Connecting to the runtime's stream server and getting its answer.
    pub connect_timeout: Duration,
}

impl Default for StreamingConfig {
    fn default() -> Self {
        StreamingConfig {
            idle_timeout: Duration::from_secs(4 * 3600),
            max_streams: 64,
            connect_timeout: Duration::from_secs(30),
        }
    }
}

/// The kubelet's pod manager, as far as streaming needs it.
pub trait StreamingHost: Send + Sync {
    /// The pod the kubelet runs under this namespace/name.
    fn pod_by_name(&self, namespace: &str, name: &str) -> Option<Pod>;
}

impl<F> StreamingHost for F
where
    F: Fn(&str, &str) -> Option<Pod> + Send + Sync,
{
    fn pod_by_name(&self, namespace: &str, name: &str) -> Option<Pod> {
        self(namespace, name)
    }
}

/// The runtime calls streaming needs; a seam for tests.
pub trait StreamingRuntime: Send + Sync {
    /// The running container `name` of pod `pod_uid`, if any.
    fn running_container_id(&self, pod_uid: &str, name: &str) -> Result<Option<String>, CriError>;
    /// The pod's newest sandbox, if any.
    fn sandbox_id(&self, pod_uid: &str) -> Result<Option<String>, CriError>;
    fn exec(&self, req: api::ExecRequest) -> Result<String, CriError>;
    fn attach(&self, req: api::AttachRequest) -> Result<String, CriError>;
    fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String, CriError>;
}

impl StreamingRuntime for RemoteRuntime {
    fn running_container_id(&self, pod_uid: &str, name: &str) -> Result<Option<String>, CriError> {
        let filter = api::ContainerFilter {
            state: Some(api::ContainerStateValue {
                state: api::ContainerState::CONTAINER_RUNNING.into(),
                ..Default::default()
            })
            .into(),
            label_selector: HashMap::from([
                (POD_UID_LABEL.to_string(), pod_uid.to_string()),
                (CONTAINER_NAME_LABEL.to_string(), name.to_string()),
            ]),
            ..Default::default()
        };
        let mut list = self.list_containers(Some(filter))?;
        list.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        Ok(list.into_iter().next().map(|c| c.id))
    }

    fn sandbox_id(&self, pod_uid: &str) -> Result<Option<String>, CriError> {
        let filter = api::PodSandboxFilter {
            label_selector: HashMap::from([(POD_UID_LABEL.to_string(), pod_uid.to_string())]),
            ..Default::default()
        };
        let mut list = self.list_pod_sandbox(Some(filter))?;
        list.sort_by_key(|s| std::cmp::Reverse(s.created_at));
        Ok(list.into_iter().next().map(|s| s.id))
    }

    fn exec(&self, req: api::ExecRequest) -> Result<String, CriError> {
        RemoteRuntime::exec(self, req)
    }

    fn attach(&self, req: api::AttachRequest) -> Result<String, CriError> {
        RemoteRuntime::attach(self, req)
    }

    fn port_forward(&self, sandbox_id: &str, ports: Vec<i32>) -> Result<String, CriError> {
        RemoteRuntime::port_forward(self, sandbox_id, ports)
    }
}

/// One request, as the API server framework parsed it.
pub struct StreamRequest<'a> {
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The raw query string, without '?'.
    pub query: &'a str,
    pub headers: &'a [(String, String)],
    pub remote_addr: Option<SocketAddr>,
}

impl StreamRequest<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `Connection: upgrade` (a token of the list) and an Upgrade header.
    fn is_upgrade(&self) -> bool {
        let connection_upgrade = self.headers.iter().any(|(k, v)| {
            k.eq_ignore_ascii_case("connection")
                && v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        });
        connection_upgrade && self.header("upgrade").is_some_and(|v| !v.trim().is_empty())
    }

    fn is_websocket(&self) -> bool {
        self.is_upgrade()
            && self
                .header("upgrade")
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
    }
}

/// What to do with the request.
pub enum Reply {
    /// An ordinary response; the connection stays with the framework.
    /// `headers` are extra ones (Retry-After).
    Respond {
        status: u16,
        content_type: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// The runtime accepted the upgrade: hand the raw client connection to
    /// [`Upgrade::run`] (which writes the 101 itself) and forget it.
    Upgrade(Upgrade),
}

impl Reply {
    fn error(status: u16, msg: impl Into<String>) -> Reply {
        Reply::Respond {
            status,
            content_type: TEXT_PLAIN.into(),
            headers: Vec::new(),
            body: msg.into().into_bytes(),
        }
    }
}

/// An active-stream slot, released on drop.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connected, upgraded runtime stream waiting for the client connection.
pub struct Upgrade {
    backend: std::net::TcpStream,
    head: Vec<u8>,
    idle: Duration,
    _slot: Slot,
}

impl Upgrade {
    /// Relays until either side closes or the stream idles out. Blocks the
    /// calling (connection) thread; spawns one more. `client_buffered` is
    /// whatever the framework read past the request head (usually empty).
    pub fn run(self, client: Box<dyn ClientStream>, client_buffered: &[u8]) {
        if let Err(e) = proxy::relay(client, client_buffered, self.backend, &self.head, self.idle) {
            log::debug!("stream ended: {e}");
        }
    }
}

#[derive(Debug, PartialEq)]
enum Kind {
    Exec,
    Attach,
    PortForward,
}

/// Parsed route: kind, namespace, pod, optional uid, container.
struct Route {
    kind: Kind,
    namespace: String,
    pod: String,
    uid: Option<String>,
    container: Option<String>,
}

fn parse_route(path: &str) -> Option<Route> {
    let segs: Vec<String> = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .split('/')
        .map(percent_decode)
        .collect();
    let kind = match segs.first()?.as_str() {
        "exec" => Kind::Exec,
        "attach" => Kind::Attach,
        "portForward" => Kind::PortForward,
        _ => return None,
    };
    if segs[1..].iter().any(|s| s.is_empty()) {
        return None;
    }
    let (uid, container) = match (&kind, segs.len()) {
        (Kind::PortForward, 3) => (None, None),
        (Kind::PortForward, 4) => (Some(segs[3].clone()), None),
        (Kind::Exec | Kind::Attach, 4) => (None, Some(segs[3].clone())),
        (Kind::Exec | Kind::Attach, 5) => (Some(segs[3].clone()), Some(segs[4].clone())),
        _ => return None,
    };
    Some(Route {
        kind,
        namespace: segs[1].clone(),
        pod: segs[2].clone(),
        uid,
        container,
    })
}

fn percent_decode(s: &str) -> String {
    fn hex(c: u8) -> Option<u8> {
        (c as char).to_digit(16).map(|d| d as u8)
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `a=1&b=x%20y&a=2` -> [(a,1),(b,"x y"),(a,2)] ('+' is a space, as Go's
/// url.ParseQuery).
fn parse_query(q: &str) -> Vec<(String, String)> {
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (
                percent_decode(&k.replace('+', " ")),
                percent_decode(&v.replace('+', " ")),
            )
        })
        .collect()
}

fn query_all<'a>(q: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    q.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Upstream FormValue(...) == "1" (also "true", which clients hand-write).
/// The API server sends `input`/`output`/`error`/`tty` (core/v1 Exec*Param);
/// `stdin`/`stdout`/`stderr` (PodExecOptions' names) are accepted too.
fn flag(q: &[(String, String)], key: &str) -> bool {
    q.iter()
        .find(|(k, _)| k == key)
        .is_some_and(|(_, v)| v == "1" || v.eq_ignore_ascii_case("true"))
}

/// Stream options (upstream remotecommand NewOptions).
#[derive(Debug, PartialEq, Eq)]
struct Options {
    stdin: bool,
    stdout: bool,
    stderr: bool,
    tty: bool,
}

fn stream_options(q: &[(String, String)]) -> Result<Options, String> {
    let tty = flag(q, "tty");
    let stdin = flag(q, "input") || flag(q, "stdin");
    let stdout = flag(q, "output") || flag(q, "stdout");
    let mut stderr = flag(q, "error") || flag(q, "stderr");
    if tty && stderr {
        // Upstream: stderr is folded into the tty.
        stderr = false;
    }
    if !stdin && !stdout && !stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    Ok(Options {
        stdin,
        stdout,
        stderr,
        tty,
    })
}

/// Upstream portforward.NewV4Options: ports come from the query only for
/// WebSocket clients (SPDY clients name them per stream).
fn port_forward_ports(q: &[(String, String)], websocket: bool) -> Result<Vec<i32>, String> {
    if !websocket {
        return Ok(Vec::new());
    }
    let values = query_all(q, "port");
    if values.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut ports = Vec::new();
    for v in values {
        if v.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        for p in v.split(',') {
            let port: u16 = p
                .parse()
                .map_err(|_| format!("unable to parse {v:?} as a port"))?;
            if port == 0 {
                return Err(format!("port {v:?} must be > 0"));
            }
            ports.push(i32::from(port));
        }
    }
    Ok(ports)
}

/// upstream streaming.WriteError: NotFound -> 404, ResourceExhausted -> 429,
/// anything else 500.
fn cri_error_reply(e: &CriError) -> Reply {
    use grpcio::RpcStatusCode;
    match e.code {
        Some(RpcStatusCode::NOT_FOUND) => Reply::error(404, e.to_string()),
        Some(RpcStatusCode::RESOURCE_EXHAUSTED) => Reply::Respond {
            status: 429,
            content_type: TEXT_PLAIN.into(),
            headers: vec![("Retry-After".into(), RETRY_AFTER_SECS.to_string())],
            body: e.to_string().into_bytes(),
        },
        _ => Reply::error(500, e.to_string()),
    }
}

fn container_tty(pod: &Pod, name: &str) -> Option<bool> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .map(|c| c.tty.unwrap_or(false))
        .or_else(|| {
            spec.ephemeral_containers
                .iter()
                .flatten()
                .find(|c| c.name == name)
                .map(|c| c.tty.unwrap_or(false))
        })
}

pub struct StreamingServer {
    host: Arc<dyn StreamingHost>,
    runtime: Arc<dyn StreamingRuntime>,
    cfg: StreamingConfig,
    active: Arc<AtomicUsize>,
}

impl StreamingServer {
    /// `runtime` is usually `Arc<RemoteRuntime>`; `host` may be a closure
    /// `|ns, name| pod_manager.get_by_full_name(&format!("{name}_{ns}"))`.
    pub fn new(
        host: Arc<dyn StreamingHost>,
        runtime: Arc<dyn StreamingRuntime>,
        cfg: StreamingConfig,
    ) -> Arc<Self> {
        Arc::new(StreamingServer {
            host,
            runtime,
            cfg,
            active: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Streams in progress (the tests check that none leak).
    #[cfg(test)]
    pub fn active_streams(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// True for the paths this module serves (`/exec/`, `/attach/`, `/portForward/`).
    pub fn matches(path: &str) -> bool {
        ["/exec/", "/attach/", "/portForward/"]
            .iter()
            .any(|p| path.starts_with(p))
    }

    fn acquire(&self) -> Option<Slot> {
        let mut cur = self.active.load(Ordering::SeqCst);
        loop {
            if cur >= self.cfg.max_streams {
                return None;
            }
            match self
                .active
                .compare_exchange(cur, cur + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return Some(Slot(Arc::clone(&self.active))),
                Err(now) => cur = now,
            }
        }
    }

    /// Serves one request; None when the path is not a streaming path.
    pub fn handle(&self, req: &StreamRequest<'_>) -> Option<Reply> {
        if !Self::matches(req.path) {
            return None;
        }
        let Some(route) = parse_route(req.path) else {
            return Some(Reply::error(404, "404 page not found\n"));
        };
        if req.method != "GET" && req.method != "POST" {
            return Some(Reply::error(405, "405: Method Not Allowed"));
        }
        Some(self.serve(req, &route))
    }

    fn serve(&self, req: &StreamRequest<'_>, route: &Route) -> Reply {
        let q = parse_query(req.query);
        // Validate the request before asking the runtime for anything.
        let mut opts = None;
        let mut ports = Vec::new();
        match route.kind {
            Kind::Exec | Kind::Attach => match stream_options(&q) {
                Ok(o) => opts = Some(o),
                Err(e) => return Reply::error(400, e),
            },
            Kind::PortForward => match port_forward_ports(&q, req.is_websocket()) {
                Ok(p) => ports = p,
                Err(e) => return Reply::error(400, e),
            },
        }
        let cmd: Vec<String> = query_all(&q, "command")
            .iter()
            .map(|s| s.to_string())
            .collect();
        if route.kind == Kind::Exec && (cmd.is_empty() || cmd[0].is_empty()) {
            return Reply::error(
                400,
                "missing command: at least one \"command\" parameter is required",
            );
        }
        if !req.is_upgrade() {
            return Reply::error(400, "Upgrade request required");
        }

        let Some(pod) = self.host.pod_by_name(&route.namespace, &route.pod) else {
            return Reply::error(404, "pod does not exist");
        };
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        if route.uid.as_ref().is_some_and(|u| *u != pod_uid) {
            return Reply::error(404, "pod not found");
        }

        let Some(slot) = self.acquire() else {
            return Reply::Respond {
                status: 429,
                content_type: TEXT_PLAIN.into(),
                headers: vec![("Retry-After".into(), RETRY_AFTER_SECS.to_string())],
                body: format!(
                    "too many active streams (max {}); try again later",
                    self.cfg.max_streams
                )
                .into_bytes(),
            };
        };

        let url = match self.runtime_url(route, &pod, &pod_uid, opts, cmd, ports) {
            Ok(u) => u,
            Err(reply) => return reply,
        };
        let url = match proxy::StreamUrl::parse(&url) {
            Ok(u) => u,
            Err(e) => return Reply::error(500, e),
        };
        let client = proxy::ClientRequest {
            method: req.method,
            headers: req.headers,
            remote_addr: req.remote_addr,
        };
        match proxy::dial_backend(&url, &client, self.cfg.connect_timeout) {
            Ok(proxy::BackendReply::Upgraded { backend, head }) => Reply::Upgrade(Upgrade {
                backend,
                head,
                idle: self.cfg.idle_timeout,
                _slot: slot,
            }),
            Ok(proxy::BackendReply::Response {
                status,
                content_type,
                body,
            }) => Reply::Respond {
                status,
                content_type,
                headers: Vec::new(),
                body,
            },
            Err(e) => Reply::error(
                502,
                format!("error dialing the container runtime's stream server: {e}"),
            ),
        }
    }

    /// Resolves the container/sandbox and asks the runtime for the URL.
    fn runtime_url(
        &self,
        route: &Route,
        pod: &Pod,
        pod_uid: &str,
        opts: Option<Options>,
        cmd: Vec<String>,
        ports: Vec<i32>,
    ) -> Result<String, Reply> {
        let pod_desc = format!("{}/{}", route.namespace, route.pod);
        if route.kind == Kind::PortForward {
            let sandbox = self
                .runtime
                .sandbox_id(pod_uid)
                .map_err(|e| cri_error_reply(&e))?
                .ok_or_else(|| {
                    Reply::error(404, format!("failed to find sandboxID for pod {pod_desc}"))
                })?;
            return self
                .runtime
                .port_forward(&sandbox, ports)
                .map_err(|e| cri_error_reply(&e));
        }
        let name = route.container.as_deref().unwrap_or_default();
        let opts = opts.unwrap_or(Options {
            stdin: false,
            stdout: true,
            stderr: false,
            tty: false,
        });
        // Attach must match the container's own TTY setting.
        let spec_tty = container_tty(pod, name);
        if route.kind == Kind::Attach && spec_tty.is_none() {
            return Err(Reply::error(
                404,
                format!("container {name} not found in pod {pod_desc}"),
            ));
        }
        let id = self
            .runtime
            .running_container_id(pod_uid, name)
            .map_err(|e| cri_error_reply(&e))?
            .ok_or_else(|| Reply::error(404, format!("container not found ({name:?})")))?;
        match route.kind {
            Kind::Exec => self.runtime.exec(api::ExecRequest {
                container_id: id,
                cmd,
                tty: opts.tty,
                stdin: opts.stdin,
                stdout: opts.stdout,
                stderr: opts.stderr,
                ..Default::default()
            }),
            _ => {
                let tty = spec_tty.unwrap_or(false);
                self.runtime.attach(api::AttachRequest {
                    container_id: id,
                    stdin: opts.stdin,
                    tty,
                    stdout: opts.stdout,
                    // As upstream: with a TTY there is no separate stderr.
                    stderr: opts.stderr && !tty,
                    ..Default::default()
                })
            }
        }
        .map_err(|e| cri_error_reply(&e))
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod cri_it;
