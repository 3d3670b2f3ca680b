//! End-to-end tests of the kubelet API server over real sockets: TLS with
//! rcgen-made certificates, a fake API server (tiny_http) for TokenReview
//! and SubjectAccessReview, and a fake host.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::ServerName;
use serde_json::{json, Value};

use super::*;
use crate::client::RestConfig;
use crate::server::healthz::NamedCheck;

const NODE: &str = "node1";

fn temp_dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("rkubelet-srv-{}-{name}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

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
    fn pod_logs_dir(&self) -> PathBuf {
        self.logs.clone()
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

struct FakeApi {
    url: String,
    calls: Arc<Mutex<Vec<(String, Value)>>>,
}

impl FakeApi {
    fn start(policy: Policy) -> FakeApi {
        let server = tiny_http::Server::http("127.0.0.1:0").unwrap();
        let url = format!("http://{}", server.server_addr().to_ip().unwrap());
        let calls = Arc::new(Mutex::new(Vec::new()));
        let rec = calls.clone();
        std::thread::spawn(move || {
            for mut req in server.incoming_requests() {
                let mut body = String::new();
                let _ = req.as_reader().read_to_string(&mut body);
                let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let path = req.url().to_string();
                rec.lock().unwrap().push((path.clone(), v.clone()));
                let out = if path.ends_with("tokenreviews") {
                    token_review(&v)
                } else {
                    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                           "spec": v["spec"], "status": {"allowed": policy(&v["spec"])}})
                };
                let h = tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
                let _ =
                    req.respond(tiny_http::Response::from_string(out.to_string()).with_header(h));
            }
        });
        FakeApi { url, calls }
    }

    fn client(&self) -> Client {
        let mut cfg = RestConfig::new(&self.url);
        cfg.qps = -1.0;
        cfg.timeout = Duration::from_secs(5);
        Client::new(cfg).unwrap()
    }

    fn calls(&self, kind: &str) -> Vec<Value> {
        let calls = self.calls.lock().unwrap();
        calls
            .iter()
            .filter(|(p, _)| p.ends_with(kind))
            .map(|(_, v)| v.clone())
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
    dir: PathBuf,
    pki: Pki,
    host: Arc<FakeHost>,
    _stop: crossbeam_channel::Sender<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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
    let dir = temp_dir("srv");
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
    let mut cfg = base_config(&dir);
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
    let (tx, rx) = crossbeam_channel::bounded(0);
    let started = spawn_servers(cfg, host.clone(), healthz(), s.client, s.extra, rx).unwrap();
    Fixture {
        started,
        dir,
        pki,
        host,
        _stop: tx,
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

// ---------- tests ----------

#[test]
fn x509_and_anonymous_off() {
    let f = start_with(Setup::default());
    let r = get(&f, "/healthz", Who::Nobody);
    assert_eq!((r.status, r.body.as_str()), (401, "Unauthorized"));
    assert_eq!(
        get(&f, "/pods", Who::Token("whatever")).status,
        401,
        "no webhook: tokens ignored"
    );

    let r = get(&f, "/healthz", ADMIN);
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));
    let r = get(&f, "/pods", ADMIN);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let list: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(list["kind"], "PodList");
    assert_eq!(list["apiVersion"], "v1");
    assert_eq!(list["items"][0]["metadata"]["name"], "web");
    let running: Value = serde_json::from_str(&get(&f, "/runningpods/", ADMIN).body).unwrap();
    assert_eq!(running["items"].as_array().unwrap().len(), 2);
    let cfg: Value = serde_json::from_str(&get(&f, "/configz", ADMIN).body).unwrap();
    assert_eq!(cfg["kubeletconfig"]["port"], 10250);
    assert_eq!(get(&f, "/nope", ADMIN).status, 404);
    assert_eq!(
        get(&f, "/exec/default/web/app", ADMIN).status,
        404,
        "no streaming handler yet"
    );
    let r = https(&f, "POST", "/pods", ADMIN);
    assert_eq!((r.status, r.header("allow")), (405, Some("GET")));
    let r = get(&f, "/runningpods", ADMIN);
    assert_eq!(
        (r.status, r.header("location")),
        (301, Some("/runningpods/"))
    );
}

#[test]
fn self_signed_certificate_is_generated_and_served() {
    let dir = temp_dir("selfsigned");
    let mut cfg = base_config(&dir);
    cfg.anonymous = true;
    let host = Arc::new(FakeHost {
        logs: dir.join("pods"),
        running: AtomicBool::new(true),
        restarts: 0,
    });
    struct LocalHost(Arc<FakeHost>);
    impl KubeletHost for LocalHost {
        fn node_name(&self) -> String {
            "localhost".into()
        }
        fn pods(&self) -> Vec<Pod> {
            self.0.pods()
        }
        fn running_pods(&self) -> Vec<Pod> {
            self.0.running_pods()
        }
        fn config_json(&self) -> Value {
            self.0.config_json()
        }
        fn pod_logs_dir(&self) -> PathBuf {
            self.0.pod_logs_dir()
        }
        fn container_log(
            &self,
            ns: &str,
            p: &str,
            c: &str,
            prev: bool,
        ) -> Result<(PathBuf, bool), HostError> {
            self.0.container_log(ns, p, c, prev)
        }
    }
    let (_tx, rx) = crossbeam_channel::bounded::<()>(0);
    let started =
        spawn_servers(cfg, Arc::new(LocalHost(host)), healthz(), None, vec![], rx).unwrap();
    let crt = std::fs::read(dir.join("pki/kubelet.crt")).unwrap();
    assert!(dir.join("pki/kubelet.key").exists());
    let chain = crate::client::tls::parse_certs(&crt).unwrap();
    assert_eq!(chain.len(), 2, "serving cert + its CA");
    let mut roots = rustls::RootCertStore::empty();
    roots.add(chain[1].clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cc = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut s = tls_stream(started.secure, Arc::new(cc));
    s.write_all(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s);
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "ok"),
        "anonymous allowed"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn webhook_authn_and_authz_with_caching() {
    let api = FakeApi::start(alice_policy);
    let stats = handler(|req, resp| {
        let who = req.user().map(|u| u.name.clone()).unwrap_or_default();
        resp.send_json(200, &json!({"user": who}))
    });
    let f = start_with(Setup {
        anonymous: true,
        webhook_authn: true,
        authz: AuthzMode::Webhook,
        client: Some(api.client()),
        extra: vec![("/stats/summary".into(), stats)],
        ..Setup::default()
    });
    std::fs::write(f.dir.join("varlog/syslog"), "boot\n").unwrap();
    let alice = || Who::Token("good-token");

    // /pods: "pods" is denied, then "proxy" allowed.
    assert_eq!(get(&f, "/pods", alice()).status, 200);
    let sars = api.calls("subjectaccessreviews");
    let subs: Vec<&str> = sars
        .iter()
        .map(|s| {
            s["spec"]["resourceAttributes"]["subresource"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(subs, ["pods", "proxy"]);
    let attrs = &sars[1]["spec"]["resourceAttributes"];
    assert_eq!(attrs["verb"], "get");
    assert_eq!(attrs["resource"], "nodes");
    assert_eq!(attrs["name"], NODE);
    assert_eq!(attrs["version"], "v1");
    assert_eq!(sars[1]["spec"]["user"], "alice");
    assert_eq!(
        sars[1]["spec"]["groups"],
        json!(["devs", "system:authenticated"])
    );
    assert_eq!(api.calls("tokenreviews").len(), 1);

    let r = get(&f, "/stats/summary", alice());
    assert_eq!((r.status, r.body.as_str()), (200, r#"{"user":"alice"}"#));
    assert_eq!(get(&f, "/logs/", alice()).status, 200);
    let r = get(&f, "/metrics", alice());
    assert_eq!(r.status, 403);
    assert_eq!(
        r.body,
        "Forbidden (user=alice, verb=get, resource=nodes, subresource(s)=[metrics])\n"
    );
    let subs: Vec<String> = api
        .calls("subjectaccessreviews")
        .iter()
        .map(|s| {
            s["spec"]["resourceAttributes"]["subresource"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(subs, ["pods", "proxy", "stats", "log", "metrics"]);

    // Cached: no new reviews of either kind.
    let before = api.calls.lock().unwrap().len();
    assert_eq!(get(&f, "/pods", alice()).status, 200);
    assert_eq!(get(&f, "/metrics", alice()).status, 403);
    assert_eq!(api.calls.lock().unwrap().len(), before);

    // POST maps to create; a bad token is 401 even with anonymous on;
    // no token at all is system:anonymous (denied by the policy).
    assert_eq!(
        https(&f, "POST", "/exec/default/web/app?command=ls", alice()).status,
        404
    );
    let last = api.calls("subjectaccessreviews").pop().unwrap();
    assert_eq!(last["spec"]["resourceAttributes"]["verb"], "create");
    assert_eq!(last["spec"]["resourceAttributes"]["subresource"], "proxy");
    assert_eq!(get(&f, "/pods", Who::Token("bad")).status, 401);
    let r = get(&f, "/healthz", Who::Nobody);
    assert_eq!(r.status, 403);
    assert!(r.body.contains("user=system:anonymous"), "{}", r.body);
    assert!(r.body.contains("[healthz proxy]"), "{}", r.body);
    // A client certificate needs no TokenReview.
    let tokens = api.calls("tokenreviews").len();
    assert_eq!(get(&f, "/pods", Who::Cert("alice", &[])).status, 200);
    assert_eq!(api.calls("tokenreviews").len(), tokens);
}

const LOG0: &str = "2024-01-01T00:00:00.5Z stdout F old\n";
const LOG1: &str = "\
2024-01-01T00:00:01.000000000Z stdout F one
2024-01-01T00:00:02.000000000Z stderr F two
2024-01-01T00:00:03.000000000Z stdout P par
2024-01-01T00:00:03.100000000Z stdout P ti
2024-01-01T00:00:03.200000000Z stdout F al
2024-01-01T00:00:04.000000000Z stdout F four
";

fn write_logs(f: &Fixture) -> PathBuf {
    let current = container_log_path(&f.host.logs, "default", "web", "uid1", "app", 1);
    std::fs::create_dir_all(current.parent().unwrap()).unwrap();
    std::fs::write(current.with_file_name("0.log"), LOG0).unwrap();
    std::fs::write(&current, LOG1).unwrap();
    current
}

#[test]
fn container_logs() {
    let f = start_with(Setup {
        restarts: 1,
        ..Setup::default()
    });
    write_logs(&f);
    let logs = |q: &str| get(&f, &format!("/containerLogs/default/web/app{q}"), ADMIN);
    let r = logs("");
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "one\ntwo\npartial\nfour\n")
    );
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(logs("?tailLines=2").body, "al\nfour\n");
    assert_eq!(logs("?tail=1").body, "four\n");
    assert_eq!(logs("?limitBytes=5").body, "one\nt");
    assert_eq!(logs("?previous=true").body, "old\n");
    assert_eq!(
        logs("?sinceTime=2024-01-01T00:00:03Z").body,
        "partial\nfour\n"
    );
    assert_eq!(logs("?stream=Stderr").body, "two\n");
    let ts = logs("?timestamps=true").body;
    assert!(
        ts.starts_with("2024-01-01T00:00:01Z one\n2024-01-01T00:00:02Z two\n"),
        "{ts}"
    );
    assert!(ts.contains("2024-01-01T00:00:03Z partial\n"), "{ts}");

    assert_eq!(logs("?tailLines=abc").status, 400);
    assert_eq!(logs("?tailLines=-1").status, 422);
    assert_eq!(
        logs("?sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z").status,
        422
    );
    assert_eq!(
        get(&f, "/containerLogs/default/nope/app", ADMIN).status,
        404
    );
    assert_eq!(
        get(&f, "/containerLogs/default/web/nope", ADMIN).status,
        404
    );
    assert_eq!(get(&f, "/containerLogs/default/web", ADMIN).status, 404);
    assert_eq!(
        get(&f, "/containerLogs/default/web/app?x=%zz", ADMIN).status,
        400
    );
}

#[test]
fn container_logs_follow_until_the_container_stops() {
    let f = start_with(Setup::default());
    let current = container_log_path(&f.host.logs, "default", "web", "uid1", "app", 0);
    std::fs::create_dir_all(current.parent().unwrap()).unwrap();
    std::fs::write(&current, "2024-01-01T00:00:01Z stdout F first\n").unwrap();
    let host = f.host.clone();
    let path = current.clone();
    let writer = std::thread::spawn(move || {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        for i in 0..3 {
            std::thread::sleep(Duration::from_millis(150));
            writeln!(file, "2024-01-01T00:00:0{}Z stdout F line{i}", i + 2).unwrap();
        }
        std::thread::sleep(Duration::from_millis(300));
        host.running.store(false, Ordering::SeqCst);
    });
    let t0 = Instant::now();
    let r = get(&f, "/containerLogs/default/web/app?follow=true", ADMIN);
    writer.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, "first\nline0\nline1\nline2\n");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "ended after the container stopped"
    );
}

#[test]
fn follow_ends_when_the_client_goes_away() {
    let f = start_with(Setup::default());
    let current = container_log_path(&f.host.logs, "default", "web", "uid1", "app", 0);
    std::fs::create_dir_all(current.parent().unwrap()).unwrap();
    std::fs::write(&current, "2024-01-01T00:00:01Z stdout F first\n").unwrap();
    let mut s = tls_stream(f.started.secure, client_config(&f, &ADMIN));
    s.write_all(
        request_text("GET", "/containerLogs/default/web/app?follow=1", &ADMIN, "").as_bytes(),
    )
    .unwrap();
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    drop(s);
    let t0 = Instant::now();
    while f.started.servers[0].active.load(Ordering::SeqCst) > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "follower still running"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn node_logs_and_traversal() {
    let f = start_with(Setup::default());
    let varlog = f.dir.join("varlog");
    std::fs::create_dir_all(varlog.join("pods")).unwrap();
    std::fs::write(varlog.join("syslog"), "hello syslog\n").unwrap();
    std::fs::write(f.dir.join("secret"), "top secret\n").unwrap();
    std::os::unix::fs::symlink(f.dir.join("secret"), varlog.join("escape")).unwrap();

    let r = get(&f, "/logs/", ADMIN);
    assert_eq!(r.status, 200);
    assert!(r.body.contains("<a href=\"pods/\">pods/</a>"), "{}", r.body);
    assert!(
        r.body.contains("<a href=\"syslog\">syslog</a>"),
        "{}",
        r.body
    );
    let r = get(&f, "/logs/syslog", ADMIN);
    assert_eq!((r.status, r.body.as_str()), (200, "hello syslog\n"));
    assert_eq!(
        get(&f, "/logs/pods", ADMIN).header("location"),
        Some("pods/")
    );
    assert_eq!(get(&f, "/logs/../secret", ADMIN).status, 400);
    assert_eq!(get(&f, "/logs/%2e%2e/secret", ADMIN).status, 400);
    assert_eq!(get(&f, "/logs/pods/..%2f..%2fsecret", ADMIN).status, 400);
    let r = get(&f, "/logs/escape", ADMIN);
    assert_eq!(r.status, 404);
    assert!(!r.body.contains("secret"));
    assert_eq!(get(&f, "/logs/missing", ADMIN).status, 404);
}

#[test]
fn debug_flags_v_sets_the_log_verbosity() {
    let f = start_with(Setup::default());
    let put = |body: &str| {
        let mut s = tls_stream(f.started.secure, client_config(&f, &ADMIN));
        let head = request_text(
            "PUT",
            "/debug/flags/v",
            &ADMIN,
            &format!("Content-Length: {}\r\n", body.len()),
        );
        s.write_all(format!("{head}{body}").as_bytes()).unwrap();
        read_response(&mut s)
    };
    let r = put("4");
    assert_eq!(
        (r.status, r.body.as_str()),
        (200, "successfully set klog.logging.verbosity to 4\n")
    );
    assert_eq!(log::max_level(), log::LevelFilter::Debug);
    assert_eq!(put("loud").status, 400);
    assert_eq!(get(&f, "/debug/flags/v", ADMIN).status, 405);
    assert_eq!(put("2").status, 200);
    assert_eq!(log::max_level(), log::LevelFilter::Info);
}

#[test]
fn debugging_disabled_and_read_only_port() {
    let stats = handler(|_, resp| resp.send_text(200, "stats"));
    let exec = handler(|_, resp| resp.send_text(200, "exec"));
    let f = start_with(Setup {
        debugging: false,
        read_only: true,
        extra: vec![("/stats/".into(), stats), ("/exec/".into(), exec)],
        ..Setup::default()
    });
    let r = get(&f, "/containerLogs/default/web/app", ADMIN);
    assert_eq!(
        (r.status, r.body.as_str()),
        (405, "Debug endpoints are disabled.")
    );
    assert_eq!(get(&f, "/exec/default/web/app", ADMIN).status, 405);
    assert_eq!(get(&f, "/configz", ADMIN).status, 404);
    assert_eq!(get(&f, "/stats/summary", ADMIN).body, "stats");

    let ro = f.started.read_only.unwrap();
    let r = plain(ro, b"GET /pods HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200, "no authentication on the read-only port");
    assert!(r.body.contains("PodList"));
    assert_eq!(plain(ro, b"GET /healthz HTTP/1.1\r\n\r\n").body, "ok");
    assert_eq!(
        plain(ro, b"GET /stats/summary HTTP/1.0\r\n\r\n").body,
        "stats"
    );
    assert_eq!(plain(ro, b"GET /configz HTTP/1.0\r\n\r\n").status, 404);
    assert_eq!(plain(ro, b"GET /exec/a/b/c HTTP/1.0\r\n\r\n").status, 405);
    assert_eq!(plain(ro, b"GET /runningpods/ HTTP/1.0\r\n\r\n").status, 405);
}

#[test]
fn keep_alive_and_upgrade_take_over() {
    let echo = handler(|req, resp| {
        assert!(req.is_upgrade());
        let mut up =
            resp.switch_protocols(&[("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")])?;
        let mut got = up.buffered.clone();
        while got.len() < 5 {
            let mut b = [0u8; 16];
            let n = up.stream.read(&mut b)?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&b[..n]);
        }
        up.stream.write_all(&got)?;
        up.stream.flush()
    });
    let f = start_with(Setup {
        extra: vec![("/exec/".into(), echo)],
        ..Setup::default()
    });
    let mut s = tls_stream(f.started.secure, client_config(&f, &ADMIN));
    // Two requests on one connection.
    for _ in 0..2 {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        assert_eq!(read_response(&mut s).body, "ok");
    }
    s.write_all(b"POST /exec/default/web/app HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\nhel").unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101 Switching Protocols\r\n"));
    s.write_all(b"lo").unwrap();
    let mut echoed = [0u8; 5];
    s.read_exact(&mut echoed).unwrap();
    assert_eq!(&echoed, b"hello");
}

fn small_limits() -> Limits {
    Limits {
        max_connections: 4,
        header_timeout: Duration::from_secs(1),
        ..Limits::default()
    }
}

#[test]
fn slowloris_is_cut_off_without_blocking_others() {
    let f = start_with(Setup {
        read_only: true,
        limits: small_limits(),
        ..Setup::default()
    });
    let ro = f.started.read_only.unwrap();
    let slow = std::thread::spawn(move || {
        let mut s = TcpStream::connect(ro).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let t0 = Instant::now();
        let req = b"GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        s.set_nonblocking(true).unwrap();
        let mut out = Vec::new();
        for b in req.iter() {
            let mut peek = [0u8; 1];
            if s.write_all(&[*b]).is_err() || s.peek(&mut peek).is_ok() {
                break; // answered or closed
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        s.set_nonblocking(false).unwrap();
        let _ = s.read_to_end(&mut out);
        let out = String::from_utf8_lossy(&out).into_owned();
        (t0.elapsed(), out)
    });
    // A TLS client that never finishes its handshake is cut off too.
    let mut idle_tls = TcpStream::connect(f.started.secure).unwrap();
    idle_tls
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    assert_eq!(get(&f, "/healthz", ADMIN).body, "ok");
    assert_eq!(
        plain(ro, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n").body,
        "ok"
    );
    assert!(
        t0.elapsed() < Duration::from_millis(900),
        "others are served meanwhile"
    );
    let (took, out) = slow.join().unwrap();
    assert!(out.starts_with("HTTP/1.1 408"), "{out:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    let mut b = [0u8; 1];
    assert_eq!(
        idle_tls.read(&mut b).unwrap_or(0),
        0,
        "handshake deadline closes the socket"
    );
}

#[test]
fn bad_requests_and_bodies() {
    let f = start_with(Setup {
        read_only: true,
        ..Setup::default()
    });
    let ro = f.started.read_only.unwrap();
    assert_eq!(plain(ro, b"\x16\x03garbage\r\n\r\n").status, 400);
    assert_eq!(plain(ro, b"GET /pods?a=%G1 HTTP/1.1\r\n\r\n").status, 400);
    assert_eq!(plain(ro, b"GET http//x HTTP/1.1\r\n\r\n").status, 400);
    let big = b"POST /pods HTTP/1.1\r\nContent-Length: 2097152\r\n\r\n";
    assert_eq!(plain(ro, big).status, 413);
    let mut chunked = b"POST /pods HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..18 {
        chunked.extend_from_slice(b"10000\r\n");
        chunked.extend_from_slice(&[b'a'; 0x10000]);
        chunked.extend_from_slice(b"\r\n");
    }
    assert_eq!(plain(ro, &chunked).status, 413);
    let mut huge_head = b"GET /pods HTTP/1.1\r\nX-Big: ".to_vec();
    huge_head.extend(std::iter::repeat_n(b'a', 100 << 10));
    huge_head.extend_from_slice(b"\r\n\r\n");
    assert_eq!(plain(ro, &huge_head).status, 431);
    // A small body is fine (GET-only routes still answer 405 to POST).
    let r = plain(ro, b"POST /pods HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
    assert_eq!(r.status, 405);
    // TLS garbage fails the handshake and closes.
    let mut s = TcpStream::connect(f.started.secure).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(!out.starts_with(b"HTTP/1.1 200"));
}

#[test]
fn connections_are_bounded() {
    let f = start_with(Setup {
        read_only: true,
        limits: Limits {
            header_timeout: Duration::from_secs(2),
            ..small_limits()
        },
        ..Setup::default()
    });
    let ro = f.started.read_only.unwrap();
    let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(ro).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let r = plain(ro, b"GET /healthz HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 503);
    assert!(t0.elapsed() < Duration::from_secs(1));
    drop(idle);
    let t0 = Instant::now();
    loop {
        let r = plain(ro, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n");
        if r.status == 200 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "slots come back");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn config_from_kubelet_configuration() {
    let mut c = crate::kubeletconfig::KubeletConfiguration {
        read_only_port: 10255,
        ..Default::default()
    };
    c.authentication.x509.client_ca_file = "/etc/ca.crt".into();
    let s = ServerConfig::from_kubelet_config(&c, Path::new("/var/lib/kubelet/pki")).unwrap();
    assert_eq!(s.port, 10250);
    assert_eq!(s.read_only_port, Some(10255));
    assert_eq!(s.authz_mode, AuthzMode::Webhook);
    assert!(s.webhook_authn && !s.anonymous);
    assert_eq!(s.webhook_authn_ttl, Duration::from_secs(120));
    assert_eq!(s.authz_unauthorized_ttl, Duration::from_secs(30));
    assert_eq!(s.client_ca_file, Some(PathBuf::from("/etc/ca.crt")));
    assert_eq!(s.tls_cert_file, None);
    c.read_only_port = 0;
    assert_eq!(
        ServerConfig::from_kubelet_config(&c, Path::new("/x"))
            .unwrap()
            .read_only_port,
        None
    );
    // Webhook modes need an API client, as upstream requires.
    let dir = temp_dir("noclient");
    let mut cfg = base_config(&dir);
    cfg.authz_mode = AuthzMode::Webhook;
    let host = Arc::new(FakeHost {
        logs: dir.clone(),
        running: AtomicBool::new(false),
        restarts: 0,
    });
    let (_tx, rx) = crossbeam_channel::bounded::<()>(0);
    assert!(spawn_servers(cfg, host, healthz(), None, vec![], rx).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}
