//! End-to-end tests of the kubelet API server over real sockets: TLS with
//! rcgen-made certificates, a fake API server for TokenReview
//! and SubjectAccessReview, and a fake host.
//!
//! This file holds the fixtures (PKI, the fakes, a started server and a
//! small HTTP client); the tests sit by concern in `auth` (TLS serving,
//! authentication, authorization, the configuration they come from),
//! `logs` (/containerLogs, /logs), `endpoints` (debug handlers, the
//! read-only port) and `connections` (keep-alive, upgrades, limits).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::ServerName;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::*;
use crate::client::testing::{client, Reply, TestServer};
use crate::server::healthz::NamedCheck;

mod auth;
mod connections;
mod endpoints;
mod logs;

const NODE: &str = "node1";

// ---------- PKI ----------

struct Pki {
    ca_pem: String,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
}

impl Pki {
    fn new() -> Pki {
        let ca_key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name.push(DnType::CommonName, "test-ca");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = p.self_signed(&ca_key).unwrap();
        Pki {
            ca_pem: ca.pem(),
            ca,
            ca_key,
        }
    }

    /// (cert PEM, key PEM) signed by the CA.
    fn issue(
        &self,
        sans: &[&str],
        cn: &str,
        orgs: &[&str],
        eku: ExtendedKeyUsagePurpose,
    ) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut p =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        for o in orgs {
            p.distinguished_name.push(DnType::OrganizationName, *o);
        }
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![eku];
        let cert = p.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

// ---------- fake host ----------

struct FakeHost {
    logs: PathBuf,
    running: AtomicBool,
    restarts: u32,
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some("uid1".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

impl KubeletHost for FakeHost {
    fn node_name(&self) -> String {
        NODE.into()
    }
    fn pods(&self) -> Vec<Pod> {
        vec![pod("web")]
    }
    fn running_pods(&self) -> Vec<Pod> {
        vec![pod("web"), pod("orphan")]
    }
    fn config_json(&self) -> Value {
        json!({"kind": "KubeletConfiguration", "port": 10250})
    }
    fn container_log(
        &self,
        ns: &str,
        pod: &str,
        c: &str,
        previous: bool,
    ) -> Result<(PathBuf, bool), HostError> {
        if ns != "default" || pod != "web" {
            return Err(HostError::NotFound(format!("pod {pod:?} does not exist")));
        }
        if c != "app" {
            return Err(HostError::NotFound(format!(
                "container {c:?} not found in pod {pod:?}"
            )));
        }
        let n = match (previous, self.restarts) {
            (false, n) => n,
            (true, 0) => {
                return Err(HostError::Invalid(
                    "previous terminated container \"app\" not found".into(),
                ))
            }
            (true, n) => n - 1,
        };
        let path = container_log_path(&self.logs, ns, pod, "uid1", c, n);
        Ok((path, !previous && self.running.load(Ordering::SeqCst)))
    }
}

// ---------- fake API server ----------

type Policy = fn(&Value) -> bool;

/// Answers TokenReviews and SubjectAccessReviews (by `policy`).
struct FakeApi {
    server: TestServer,
}

impl FakeApi {
    fn start(policy: Policy) -> FakeApi {
        let server = TestServer::start(move |r| {
            let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
            let out = if r.path.ends_with("tokenreviews") {
                token_review(&v)
            } else {
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                       "spec": v["spec"], "status": {"allowed": policy(&v["spec"])}})
            };
            Reply::json(200, &out)
        });
        FakeApi { server }
    }

    fn client(&self) -> Client {
        client(&self.server.url)
    }

    /// The bodies of the requests whose path ends with `kind`.
    fn calls(&self, kind: &str) -> Vec<Value> {
        self.server
            .requests()
            .iter()
            .filter(|r| r.path.ends_with(kind))
            .map(|r| serde_json::from_slice(&r.body).unwrap_or(Value::Null))
            .collect()
    }
}

fn token_review(v: &Value) -> Value {
    let status = if v["spec"]["token"] == "good-token" {
        json!({"authenticated": true, "user": {"username": "alice", "uid": "u-1", "groups": ["devs"]}})
    } else {
        json!({"authenticated": false})
    };
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": v["spec"], "status": status})
}

/// alice may use proxy, stats and log; nothing else.
fn alice_policy(spec: &Value) -> bool {
    let sub = spec["resourceAttributes"]["subresource"]
        .as_str()
        .unwrap_or("");
    spec["user"] == "alice" && matches!(sub, "proxy" | "stats" | "log")
}

// ---------- server fixture ----------

struct Setup {
    anonymous: bool,
    authz: AuthzMode,
    webhook_authn: bool,
    client: Option<Client>,
    debugging: bool,
    read_only: bool,
    limits: Limits,
    extra: Vec<(String, Arc<dyn Handler>)>,
    restarts: u32,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            anonymous: false,
            authz: AuthzMode::AlwaysAllow,
            webhook_authn: false,
            client: None,
            debugging: true,
            read_only: false,
            limits: Limits::default(),
            extra: Vec::new(),
            restarts: 0,
        }
    }
}

struct Fixture {
    started: Started,
    dir: TempDir,
    pki: Pki,
    host: Arc<FakeHost>,
    _stop: rkubelet_util::shutdown::Trigger,
}

fn base_config(dir: &Path) -> ServerConfig {
    ServerConfig {
        address: "127.0.0.1".parse().unwrap(),
        port: 0,
        read_only_port: None,
        tls_cert_file: None,
        tls_private_key_file: None,
        cert_dir: dir.join("pki"),
        serving_cert: None,
        tls_min_version: String::new(),
        tls_cipher_suites: Vec::new(),
        client_ca_file: None,
        anonymous: false,
        webhook_authn: false,
        webhook_authn_ttl: Duration::from_secs(120),
        authz_mode: AuthzMode::AlwaysAllow,
        authz_authorized_ttl: Duration::from_secs(300),
        authz_unauthorized_ttl: Duration::from_secs(30),
        node_logs_dir: dir.join("varlog"),
        streaming_idle_timeout: Duration::from_secs(30),
        enable_debugging_handlers: true,
        enable_system_log_handler: true,
        limits: Limits::default(),
    }
}

fn healthz() -> Arc<Healthz> {
    Healthz::new(vec![NamedCheck {
        name: "ping",
        check: Box::new(|| Ok(())),
    }])
}

fn start_with(s: Setup) -> Fixture {
    let tmp = TempDir::with_prefix("rkubelet-srv-srv-").unwrap();
    let dir = tmp.path();
    let pki = Pki::new();
    let (crt, key) = pki.issue(
        &["localhost", "127.0.0.1"],
        "node1",
        &[],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    std::fs::write(dir.join("ca.crt"), &pki.ca_pem).unwrap();
    std::fs::write(dir.join("server.crt"), crt).unwrap();
    std::fs::write(dir.join("server.key"), key).unwrap();
    std::fs::create_dir_all(dir.join("varlog")).unwrap();
    let mut cfg = base_config(dir);
    cfg.tls_cert_file = Some(dir.join("server.crt"));
    cfg.tls_private_key_file = Some(dir.join("server.key"));
    cfg.client_ca_file = Some(dir.join("ca.crt"));
    cfg.anonymous = s.anonymous;
    cfg.authz_mode = s.authz;
    cfg.webhook_authn = s.webhook_authn;
    cfg.enable_debugging_handlers = s.debugging;
    cfg.read_only_port = s.read_only.then_some(0);
    cfg.limits = s.limits;
    let host = Arc::new(FakeHost {
        logs: dir.join("pods"),
        running: AtomicBool::new(true),
        restarts: s.restarts,
    });
    let (trigger, shutdown) = rkubelet_util::shutdown::channel().unwrap();
    let started = spawn_servers(cfg, host.clone(), healthz(), s.client, s.extra, shutdown).unwrap();
    Fixture {
        started,
        dir: tmp,
        pki,
        host,
        _stop: trigger,
    }
}

// ---------- HTTP client ----------

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads one response (Content-Length, chunked, or until close).
fn read_response(s: &mut dyn Read) -> Resp {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut tmp) {
            Ok(0) | Err(_) => panic!(
                "connection closed before a response: {:?}",
                String::from_utf8_lossy(&buf)
            ),
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    let mut rest = buf[head_end..].to_vec();
    let find = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let mut fill = |rest: &mut Vec<u8>| match s.read(&mut tmp) {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            rest.extend_from_slice(&tmp[..n]);
            true
        }
    };
    let body = if let Some(len) = find("content-length") {
        let len: usize = len.parse().unwrap();
        while rest.len() < len && fill(&mut rest) {}
        rest.truncate(len);
        rest
    } else if find("transfer-encoding").as_deref() == Some("chunked") {
        let mut body = Vec::new();
        loop {
            while !rest.windows(2).any(|w| w == b"\r\n") {
                assert!(fill(&mut rest), "chunk size line");
            }
            let i = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let size =
                usize::from_str_radix(std::str::from_utf8(&rest[..i]).unwrap().trim(), 16).unwrap();
            rest.drain(..i + 2);
            while rest.len() < size + 2 {
                assert!(fill(&mut rest), "chunk data");
            }
            body.extend_from_slice(&rest[..size]);
            rest.drain(..size + 2);
            if size == 0 {
                break body;
            }
        }
    } else {
        while fill(&mut rest) {}
        rest
    };
    Resp {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

/// Who the TLS client is.
enum Who<'a> {
    Nobody,
    Cert(&'a str, &'a [&'a str]),
    Token(&'a str),
}

fn client_config(f: &Fixture, who: &Who<'_>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for c in crate::client::tls::parse_certs(f.pki.ca_pem.as_bytes()).unwrap() {
        roots.add(c).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = match who {
        Who::Cert(cn, orgs) => {
            let (crt, key) = f
                .pki
                .issue(&[], cn, orgs, ExtendedKeyUsagePurpose::ClientAuth);
            let chain = crate::client::tls::parse_certs(crt.as_bytes()).unwrap();
            let key = crate::client::tls::parse_key(key.as_bytes()).unwrap();
            b.with_client_auth_cert(chain, key).unwrap()
        }
        _ => b.with_no_client_auth(),
    };
    Arc::new(cfg)
}

fn tls_stream(
    addr: SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(cfg, name).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

fn request_text(method: &str, path: &str, who: &Who<'_>, extra: &str) -> String {
    let auth = match who {
        Who::Token(t) => format!("Authorization: Bearer {t}\r\n"),
        _ => String::new(),
    };
    format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n{auth}{extra}Connection: close\r\n\r\n")
}

fn https(f: &Fixture, method: &str, path: &str, who: Who<'_>) -> Resp {
    let mut s = tls_stream(f.started.secure, client_config(f, &who));
    s.write_all(request_text(method, path, &who, "").as_bytes())
        .unwrap();
    read_response(&mut s)
}

fn get(f: &Fixture, path: &str, who: Who<'_>) -> Resp {
    https(f, "GET", path, who)
}

fn plain(addr: SocketAddr, raw: &[u8]) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(raw).unwrap();
    read_response(&mut s)
}

const ADMIN: Who<'static> = Who::Cert("admin", &["system:masters"]);
