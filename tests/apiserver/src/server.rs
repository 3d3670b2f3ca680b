//! The listener: TLS accept loop, one bounded OS thread per connection,
//! HTTP/1.1 keep-alive, authentication, fault injection, stats and audit
//! around the REST handlers, and the /__double control endpoints.

use crate::authn::{anonymous_forbidden, authenticate, credential_id, CertAuth};
use crate::certs::{subject_identity, Pki, User};
use crate::control::{Audit, Faults, Stats};
use crate::handlers::{self, Api, Info, Reply, Target};
use crate::http::{self, Conn, ReadError, Request};
use crate::nodeproxy::{self, Dialed, KubeletCall, KubeletClient, LogError, Upgraded};
use crate::reviews::{self, Authz};
use crate::status::ApiError;
use crate::store::Store;
use crate::watch;
use rkubelet_util::lock;
use rustls::{ServerConfig, ServerConnection, StreamOwned};
use serde_json::{json, Value};
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Config {
    pub dir: PathBuf,
    pub bind: String,
    pub port: u16,
    pub node_names: Vec<String>,
    pub bookmark_interval: Duration,
    /// Watches without timeoutSeconds last [min, 2*min) seconds, like --min-request-timeout.
    pub min_request_timeout: u64,
    pub history: usize,
    pub anonymous_auth: bool,
    pub node_restriction: bool,
    /// --node-authorizer: the Node authorizer's rules (kubeadm's
    /// --authorization-mode=Node,RBAC) for volume-related objects.
    pub node_authorizer: bool,
    /// --attach-controller: the attach/detach controller stand-in runs
    /// from the start (attachcontroller.rs; `/__double/attach` toggles it).
    pub attach_controller: bool,
    pub persist: bool,
    pub max_conns: usize,
    pub idle_timeout: Duration,
    /// --kubelet-client-certificate/--kubelet-client-key (default: DIR/
    /// apiserver-kubelet-client.crt/.key, issued by the double's CA) and
    /// --kubelet-certificate-authority (default: none, the kubelet's serving
    /// certificate is not verified, as upstream without a CA).
    pub kubelet_client: crate::nodeproxy::KubeletClientFiles,
    /// --emulate-version: the control-plane release answered as (default
    /// the newest, 1.34).
    pub version: crate::version::Version,
    /// --feature-gates: gates set away from the release's defaults
    /// (features.rs).
    pub feature_gates: crate::features::FeatureGates,
    /// --latency: each request's service time (charges.rs).
    pub latency: crate::charges::Latency,
    /// --client-qps/--client-burst, --event-qps/--event-burst: the client
    /// rate limits requests are checked against (charges.rs).
    pub client_limits: crate::charges::ClientLimits,
}

impl Config {
    pub fn new(dir: impl Into<PathBuf>) -> Config {
        Config {
            dir: dir.into(),
            bind: "127.0.0.1".into(),
            port: 0,
            node_names: vec![],
            bookmark_interval: Duration::from_secs(60),
            min_request_timeout: 1800,
            history: 2000,
            anonymous_auth: false,
            node_restriction: false,
            node_authorizer: false,
            attach_controller: false,
            persist: true,
            max_conns: 256,
            idle_timeout: Duration::from_secs(90),
            kubelet_client: Default::default(),
            version: Default::default(),
            feature_gates: Default::default(),
            latency: Default::default(),
            client_limits: Default::default(),
        }
    }
}

pub struct Server {
    pub(crate) cfg: Config,
    pub api: Api,
    pub(crate) pki: Mutex<Pki>,
    tls: Arc<ServerConfig>,
    faults: Faults,
    stats: Stats,
    budget: crate::charges::ClientBudget,
    audit: Audit,
    authz: Authz,
    conns: AtomicUsize,
    url: String,
    kubelet: KubeletClient,
    csr: crate::csr::Controllers,
}

pub struct Handle {
    pub port: u16,
    pub url: String,
    pub dir: PathBuf,
    pub server: Arc<Server>,
}

/// Binds, writes the credentials and kubeconfigs, and serves in background threads.
pub fn start(cfg: Config) -> Result<Handle, String> {
    cfg.feature_gates.check(cfg.version)?;
    let pki = Pki::load_or_create(&cfg.dir, &cfg.node_names)?;
    let tls = crate::tls::server_config(&pki)?;
    let mut kfiles = cfg.kubelet_client.clone();
    if kfiles.client_certificate.is_none() && kfiles.client_key.is_none() {
        kfiles.client_certificate = Some(cfg.dir.join("apiserver-kubelet-client.crt"));
        kfiles.client_key = Some(cfg.dir.join("apiserver-kubelet-client.key"));
    }
    let kubelet = KubeletClient::new(&kfiles)?;
    let listener = TcpListener::bind((cfg.bind.as_str(), cfg.port))
        .map_err(|e| format!("bind {}:{}: {}", cfg.bind, cfg.port, e))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let host = if cfg.bind == "0.0.0.0" {
        "127.0.0.1".to_string()
    } else {
        cfg.bind.clone()
    };
    let url = format!("https://{}:{}", host, port);
    pki.write_kubeconfigs(&url, &cfg.node_names)?;
    std::fs::write(cfg.dir.join("port"), port.to_string()).map_err(|e| e.to_string())?;
    let wal = cfg.persist.then(|| cfg.dir.join("state.jsonl"));
    let api = Api {
        store: Store::new(cfg.history, wal),
        version: cfg.version,
        gates: cfg.feature_gates,
        bookmark_interval: cfg.bookmark_interval,
        min_request_timeout: cfg.min_request_timeout,
        ca_pem: pki.ca_pem.clone(),
        server_url: Mutex::new(url.clone()),
        node_restriction: cfg.node_restriction,
        node_authorizer: cfg.node_authorizer,
        token_log: Default::default(),
        attach: Default::default(),
    };
    api.attach.set_enabled(cfg.attach_controller);
    handlers::bootstrap(&api);
    crate::bootstraptoken::ensure(&api, &cfg.dir, &url, &pki.ca_pem)?;
    let server = Arc::new(Server {
        audit: Audit::open(&cfg.dir.join("audit.log")),
        cfg: cfg.clone(),
        api,
        pki: Mutex::new(pki),
        tls,
        faults: Faults::default(),
        stats: Stats::default(),
        budget: crate::charges::ClientBudget::new(cfg.client_limits),
        authz: Authz::default(),
        conns: AtomicUsize::new(0),
        url: url.clone(),
        kubelet,
        csr: Default::default(),
    });
    let s = server.clone();
    std::thread::Builder::new()
        .name("accept".into())
        .spawn(move || accept_loop(s, listener))
        .map_err(|e| e.to_string())?;
    let s = server.clone();
    std::thread::Builder::new()
        .name("namespace-controller".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(500));
            handlers::namespace_controller_tick(&s.api);
            crate::pvcontroller::tick(&s.api);
            crate::attachcontroller::tick(&s.api);
            crate::admission::namespace_defaults_tick(&s.api);
            crate::csr::controller_tick(&s.api, &s.pki, &s.csr);
        })
        .map_err(|e| e.to_string())?;
    Ok(Handle {
        port,
        url,
        dir: cfg.dir,
        server,
    })
}

struct ConnGuard<'a>(&'a AtomicUsize);
impl Drop for ConnGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn accept_loop(srv: Arc<Server>, listener: TcpListener) {
    for stream in listener.incoming() {
        let tcp = match stream {
            Ok(t) => t,
            Err(e) => {
                log::warn!("accept: {}", e);
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if srv.conns.fetch_add(1, Ordering::SeqCst) >= srv.cfg.max_conns {
            srv.conns.fetch_sub(1, Ordering::SeqCst);
            log::warn!(
                "connection limit {} reached; closing new connection",
                srv.cfg.max_conns
            );
            drop(tcp);
            continue;
        }
        let s = srv.clone();
        let spawned = std::thread::Builder::new()
            .name("conn".into())
            .spawn(move || {
                let _g = ConnGuard(&s.conns);
                serve_conn(&s, tcp);
            });
        if spawned.is_err() {
            srv.conns.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// True while the peer has neither closed nor sent anything (a watch client
/// sends nothing until it goes away): MSG_PEEK, non-blocking.
fn peer_alive(fd: std::os::fd::RawFd) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: recv into a valid 1-byte buffer on a socket fd we own.
    let r = unsafe {
        libc::recv(
            fd,
            b.as_mut_ptr() as *mut libc::c_void,
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if r < 0 {
        let e = std::io::Error::last_os_error().kind();
        return e == std::io::ErrorKind::WouldBlock || e == std::io::ErrorKind::Interrupted;
    }
    false
}

fn serve_conn(srv: &Server, tcp: TcpStream) {
    use std::os::fd::AsRawFd;
    let fd = tcp.as_raw_fd();
    let _ = tcp.set_nodelay(true);
    let _ = tcp.set_read_timeout(Some(srv.cfg.idle_timeout));
    let _ = tcp.set_write_timeout(Some(Duration::from_secs(30)));
    let conn = match ServerConnection::new(srv.tls.clone()) {
        Ok(c) => c,
        Err(e) => {
            log::warn!("tls: {}", e);
            return;
        }
    };
    let mut tls = StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        if let Err(e) = tls.conn.complete_io(&mut tls.sock) {
            log::debug!("tls handshake: {}", e);
            return;
        }
    }
    let cert_user = tls
        .conn
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| {
            subject_identity(c).map(|(cn, orgs)| CertAuth {
                user: User {
                    name: cn,
                    groups: orgs,
                },
                credential_id: credential_id(c),
            })
        });
    let peer = tls.sock.peer_addr().ok();
    let mut http = Conn::new(tls);
    loop {
        let req = match http.read_request() {
            Ok(r) => r,
            Err(ReadError::Closed) | Err(ReadError::Io(_)) => break,
            Err(ReadError::Bad(m)) => {
                let _ = write_error(&mut http.stream, &ApiError::bad_request(m), true);
                break;
            }
            Err(ReadError::TooLarge) => {
                let _ = write_error(&mut http.stream, &ApiError::too_large(), true);
                break;
            }
        };
        let close = req.wants_close();
        let alive = || peer_alive(fd);
        match process(srv, &mut http.stream, &req, &cert_user, close, peer, &alive) {
            Next::Continue if !close => {}
            Next::Continue | Next::Close => break,
            Next::Upgrade(up) => {
                let (stream, buffered) = http.into_parts();
                match nodeproxy::relay(stream, &buffered, *up) {
                    Ok((up, down)) => log::debug!(
                        "{} {}: upgraded stream ended ({} bytes up, {} down)",
                        req.method,
                        req.path,
                        up,
                        down
                    ),
                    Err(e) => log::info!("{} {}: upgraded stream: {}", req.method, req.path, e),
                }
                return;
            }
        }
    }
    http.stream.conn.send_close_notify();
    let _ = http.stream.flush();
}

fn json_headers() -> Vec<(String, String)> {
    vec![
        ("Content-Type".into(), "application/json".into()),
        ("Cache-Control".into(), "no-cache, private".into()),
        ("Audit-Id".into(), crate::util::uuid4()),
    ]
}

fn write_error<W: Write>(w: &mut W, e: &ApiError, close: bool) -> std::io::Result<()> {
    let mut h = json_headers();
    if let Some(ra) = e.retry_after {
        h.push(("Retry-After".into(), ra.to_string()));
    }
    let body = serde_json::to_vec(&e.to_status()).unwrap_or_default();
    http::write_response(w, e.code, &h, &body, close)
}

/// What the connection does after a request.
enum Next {
    Continue,
    Close,
    /// Hand the connection to the kubelet proxy.
    Upgrade(Box<Upgraded>),
}

impl From<bool> for Next {
    fn from(keep: bool) -> Next {
        if keep {
            Next::Continue
        } else {
            Next::Close
        }
    }
}

/// Handles one request.
fn process<W: Write>(
    srv: &Server,
    w: &mut W,
    req: &Request,
    cert: &Option<CertAuth>,
    close: bool,
    peer: Option<std::net::SocketAddr>,
    alive: &dyn Fn() -> bool,
) -> Next {
    let started = Instant::now();
    let auth = authenticate(srv, req, cert.as_ref().map(|c| &c.user));
    let credential = cert.as_ref().map(|c| c.credential_id.as_str());
    let (user_name, groups) = match &auth {
        Ok(u) => (u.name.clone(), u.groups.clone()),
        Err(_) => (String::new(), vec![]),
    };
    let ua = req.user_agent().to_string();

    if req.path == "/__double" || req.path.starts_with("/__double/") {
        let (code, body) = match &auth {
            Ok(u) if u.is_admin() => control(srv, req),
            Ok(_) => (
                403,
                ApiError::new(
                    403,
                    "Forbidden",
                    "the /__double control API is for admin identities only",
                )
                .to_status(),
            ),
            Err(e) => (e.code, e.to_status()),
        };
        let info = Info {
            verb: req.method.to_ascii_lowercase(),
            resource: req.path.clone(),
            ..Default::default()
        };
        srv.audit.log(
            &user_name,
            &groups,
            &info.verb,
            &req.method,
            &req.target,
            &info,
            code,
            &ua,
            started.elapsed().as_millis(),
        );
        let body = serde_json::to_vec(&body).unwrap_or_default();
        return http::write_response(w, code, &json_headers(), &body, close)
            .is_ok()
            .into();
    }

    let (target, info) = handlers::classify(req);
    srv.budget.charge(&user_name, &info.resource, &info.sub);
    std::thread::sleep(srv.cfg.latency.of(&info.verb));
    let decision = srv.faults.decide(&req.path, &info.verb);
    if decision.stall_ms > 0 {
        std::thread::sleep(Duration::from_millis(decision.stall_ms));
    }
    let finish_with = |code: u16, extra: Option<Value>| {
        let extra = match (extra, credential) {
            (Some(Value::Object(mut m)), Some(id)) => {
                m.insert("credentialId".into(), json!(id));
                Some(Value::Object(m))
            }
            (None, Some(id)) => Some(json!({ "credentialId": id })),
            (extra, _) => extra,
        };
        srv.stats.record(&info.stats_key(), &ua, &user_name, code);
        srv.audit.log_with(
            &user_name,
            &groups,
            &info.verb,
            &req.method,
            &req.target,
            &info,
            code,
            &ua,
            started.elapsed().as_millis(),
            extra,
        );
    };
    let finish = |code: u16| finish_with(code, None);
    if decision.drop {
        finish(0);
        return Next::Close;
    }
    if decision.garbage {
        finish(200);
        // Half an object, then bytes no JSON decoder takes.
        let body = b"{\"kind\":\"Status\",\"metadata\":{\"name\":\x00\xff\xfe<html>";
        let _ = http::write_response(w, 200, &json_headers(), body, true);
        return Next::Close;
    }
    let result: Result<Reply, ApiError> = if let Some((code, retry)) = decision.status {
        Err(ApiError::for_code(code, retry))
    } else {
        match auth {
            Err(e) => Err(e),
            Ok(user) => {
                if user.name == "system:anonymous" {
                    if let Some(e) = anonymous_forbidden(&info, req) {
                        Err(e)
                    } else {
                        run_handler(srv, req, &user, target, &info)
                    }
                } else {
                    run_handler(srv, req, &user, target, &info)
                }
            }
        }
    };
    let next = match result {
        Ok(Reply::Kubelet(call)) => {
            return kubelet_call(srv, w, req, call, peer, alive, &finish_with)
        }
        Ok(Reply::Watch(mut wr)) => {
            wr.truncate = decision.truncate_watch;
            finish(200);
            let h = vec![("Audit-Id".to_string(), crate::util::uuid4())];
            match watch::serve(w, &srv.api, &wr, &h, alive) {
                Ok(()) => !wr.truncate,
                Err(_) => false,
            }
        }
        Ok(Reply::Json(code, v)) => {
            finish(code);
            let body = serde_json::to_vec(&v).unwrap_or_default();
            http::write_response(w, code, &json_headers(), &body, close).is_ok()
        }
        Ok(Reply::Text(code, t)) => {
            finish(code);
            let h = vec![
                (
                    "Content-Type".to_string(),
                    "text/plain; charset=utf-8".to_string(),
                ),
                ("X-Content-Type-Options".to_string(), "nosniff".to_string()),
            ];
            http::write_response(w, code, &h, t.as_bytes(), close).is_ok()
        }
        Err(e) => {
            finish(e.code);
            write_error(w, &e, close).is_ok()
        }
    };
    next.into()
}

/// Serves a pod subresource the kubelet answers (see [`nodeproxy`]):
/// streams a log, or connects an upgrade and hands the connection over.
/// `finish` records the request (code, and for upgrades the protocols).
fn kubelet_call<W: Write>(
    srv: &Server,
    w: &mut W,
    req: &Request,
    call: KubeletCall,
    peer: Option<std::net::SocketAddr>,
    alive: &dyn Fn() -> bool,
    finish: &dyn Fn(u16, Option<Value>),
) -> Next {
    match call {
        KubeletCall::Log { loc: None, .. } => {
            finish(200, None);
            let h = vec![("Content-Type".to_string(), "text/plain".to_string())];
            http::write_response(w, 200, &h, b"", false).is_ok().into()
        }
        KubeletCall::Log {
            loc: Some(loc),
            follow,
            pod,
        } => {
            let extra = Some(json!({"kubelet": loc.url()}));
            match nodeproxy::serve_log(&srv.kubelet, &loc, follow, &pod, w, alive) {
                Ok(code) => {
                    finish(code, extra);
                    Next::Continue
                }
                Err(LogError::Api(e)) => {
                    finish(e.code, extra);
                    write_error(w, &e, false).is_ok().into()
                }
                Err(LogError::Midstream(m)) => {
                    log::info!("{}: log stream from {} ended: {}", req.path, loc.url(), m);
                    finish(200, extra);
                    Next::Close
                }
            }
        }
        KubeletCall::Upgrade { loc } => {
            let upgrade = req.header("upgrade").unwrap_or("").to_string();
            let mut extra = json!({
                "kubelet": loc.url(),
                "upgrade": upgrade,
                "offeredProtocols": nodeproxy::offered_protocols(req),
            });
            if !nodeproxy::is_upgrade_request(req) {
                let e = ApiError::bad_request("Upgrade request required");
                finish(e.code, Some(extra));
                return write_error(w, &e, true).is_ok().into();
            }
            match nodeproxy::dial_upgrade(&srv.kubelet, &loc, req, peer) {
                Ok(Dialed::Upgraded(up)) => {
                    extra["protocol"] = json!(up.protocol);
                    finish(101, Some(extra));
                    Next::Upgrade(up)
                }
                Ok(Dialed::Response(code, raw)) => {
                    finish(code, Some(extra));
                    let _ = w.write_all(&raw);
                    let _ = w.flush();
                    Next::Close
                }
                Err(e) => {
                    let e = ApiError::internal(&format!("error dialing backend: {}", e));
                    finish(e.code, Some(extra));
                    let _ = write_error(w, &e, true);
                    Next::Close
                }
            }
        }
    }
}

fn run_handler(
    srv: &Server,
    req: &Request,
    user: &User,
    target: Target,
    info: &Info,
) -> Result<Reply, ApiError> {
    if let Target::Review(plural) = target {
        let _ = (user, info);
        if req.method != "POST" {
            return Err(ApiError::method_not_allowed());
        }
        let r = if plural == "tokenreviews" {
            let pki = lock(&srv.pki);
            reviews::token_review(&srv.authz, &pki.tokens, &req.body)
        } else {
            reviews::subject_access_review(&srv.authz, &req.body)
        };
        return r.map(|(code, v)| Reply::Json(code, v));
    }
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        handlers::handle(&srv.api, req, user, target, info)
    }));
    match r {
        Ok(r) => r,
        Err(_) => Err(ApiError::internal(
            "handler panicked (a bug in the apiserver double)",
        )),
    }
}

fn control(srv: &Server, req: &Request) -> (u16, Value) {
    let body = || -> Result<Value, (u16, Value)> {
        if req.body.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(&req.body).map_err(|e| {
            (
                400,
                ApiError::bad_request(format!("invalid JSON: {}", e)).to_status(),
            )
        })
    };
    let bad = |m: String| (400, ApiError::bad_request(m).to_status());
    match (req.method.as_str(), req.path.trim_end_matches('/')) {
        ("GET", "/__double/faults") => (200, json!({"faults": srv.faults.to_json()})),
        ("DELETE", "/__double/faults") => {
            srv.faults.clear();
            (200, json!({"faults": []}))
        }
        ("POST", "/__double/faults") => {
            let v = match body() {
                Ok(v) => v,
                Err(e) => return e,
            };
            if v.get("clear").and_then(|x| x.as_bool()) == Some(true) {
                srv.faults.clear();
            }
            if v.get("closeWatches").and_then(|x| x.as_bool()) == Some(true) {
                srv.api.store.lock().end_all_watches();
            }
            match srv.faults.add(&v) {
                Ok(n) => (200, json!({"added": n, "faults": srv.faults.to_json()})),
                Err(m) => bad(m),
            }
        }
        ("GET", "/__double/stats") => {
            let mut v = srv.stats.to_json();
            v["clientLimits"] = srv.budget.to_json();
            (200, v)
        }
        ("POST", "/__double/csr") => {
            let v = match body() {
                Ok(v) => v,
                Err(e) => return e,
            };
            if let Some(on) = v.get("autoApprove").and_then(|x| x.as_bool()) {
                srv.csr
                    .auto_approve
                    .store(on, std::sync::atomic::Ordering::Relaxed);
            }
            if let Some(ttl) = v.get("certTTLSeconds").and_then(|x| x.as_u64()) {
                srv.csr
                    .test_ttl_seconds
                    .store(ttl, std::sync::atomic::Ordering::Relaxed);
            }
            let on = srv
                .csr
                .auto_approve
                .load(std::sync::atomic::Ordering::Relaxed);
            (200, json!({"autoApprove": on}))
        }
        ("POST", "/__double/stats/reset") => {
            srv.stats.reset();
            (200, srv.stats.to_json())
        }
        ("POST", "/__double/nodes") => {
            let v = match body() {
                Ok(v) => v,
                Err(e) => return e,
            };
            let Some(name) = v.get("name").and_then(|x| x.as_str()) else {
                return bad("name is required".into());
            };
            let mut pki = lock(&srv.pki);
            match pki.add_node(name, &srv.url) {
                Ok(()) => (
                    200,
                    json!({
                        "kubeconfig": srv.cfg.dir.join(format!("kubelet-{}.kubeconfig", name)),
                        "filesKubeconfig": srv.cfg.dir.join(format!("kubelet-{}-files.kubeconfig", name)),
                        "tokenKubeconfig": srv.cfg.dir.join(format!("kubelet-{}-token.kubeconfig", name)),
                    }),
                ),
                Err(m) => bad(m),
            }
        }
        ("POST", "/__double/certs") => {
            let v = match body() {
                Ok(v) => v,
                Err(e) => return e,
            };
            let Some(cn) = v.get("cn").and_then(|x| x.as_str()) else {
                return bad("cn is required".into());
            };
            let orgs: Vec<String> = v
                .get("orgs")
                .and_then(|x| x.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|o| o.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let orgs: Vec<&str> = orgs.iter().map(|s| s.as_str()).collect();
            let days = v.get("days").and_then(|x| x.as_i64()).unwrap_or(365).max(1);
            let pki = lock(&srv.pki);
            match pki.issue_client(cn, &orgs, days) {
                Ok((c, k)) => (200, json!({"cert": c, "key": k})),
                Err(m) => (500, ApiError::internal(&m).to_status()),
            }
        }
        ("POST", "/__double/tokens") => {
            let v = match body() {
                Ok(v) => v,
                Err(e) => return e,
            };
            let Some(user) = v
                .get("user")
                .and_then(|x| x.as_str())
                .filter(|u| !u.is_empty())
            else {
                return bad("user is required".into());
            };
            let groups: Vec<String> = v
                .get("groups")
                .and_then(|x| x.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|o| o.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let mut pki = lock(&srv.pki);
            match pki.add_token(user, &groups) {
                Ok(t) => (200, json!({"token": t, "user": user, "groups": groups})),
                Err(m) => (500, ApiError::internal(&m).to_status()),
            }
        }
        ("GET", "/__double/attach") => (200, srv.api.attach.to_json()),
        ("POST", "/__double/attach") => {
            let v = match body() {
                Ok(v) => v,
                Err(e) => return e,
            };
            match v.get("enabled") {
                Some(Value::Bool(on)) => srv.api.attach.set_enabled(*on),
                None => {}
                Some(_) => return bad("enabled must be true or false".into()),
            }
            (200, srv.api.attach.to_json())
        }
        ("GET", "/__double/tokenrequests") => (200, srv.api.token_log.to_json()),
        ("DELETE", "/__double/tokenrequests") => {
            srv.api.token_log.clear();
            (200, srv.api.token_log.to_json())
        }
        ("GET", "/__double/authz") => (200, srv.authz.to_json()),
        ("POST", "/__double/authz") => {
            let v = match body() {
                Ok(v) => v,
                Err(e) => return e,
            };
            if let Some(d) = v.get("deny") {
                let Some(a) = d.as_array() else {
                    return bad("deny must be a list of user names".into());
                };
                let users = a
                    .iter()
                    .filter_map(|o| o.as_str().map(String::from))
                    .collect();
                srv.authz.set_deny(users);
            }
            if v.get("clearReviews").and_then(|x| x.as_bool()) == Some(true) {
                srv.authz.clear_reviews();
            }
            (200, srv.authz.to_json())
        }
        ("GET", "/__double/authz/reviews") => (200, srv.authz.reviews_json()),
        ("DELETE", "/__double/authz/reviews") => {
            srv.authz.clear_reviews();
            (200, srv.authz.reviews_json())
        }
        ("GET", "/__double") | ("GET", "/__double/info") => {
            let g = srv.api.store.lock();
            (
                200,
                json!({"url": srv.url, "dir": srv.cfg.dir, "resourceVersion": g.rv.to_string(),
                "historyStart": g.history_start.to_string(), "connections": srv.conns.load(Ordering::SeqCst)}),
            )
        }
        _ => (404, ApiError::path_not_found().to_status()),
    }
}
