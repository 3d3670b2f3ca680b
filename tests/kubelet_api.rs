//! The kubelet API server (the 10250 HTTPS port and the read-only port),
//! end to end: the real rkubelet binary in cluster mode against the
//! kube-apiserver double (tests/apiserver, for the node, the pods and the
//! TokenReview/SubjectAccessReview webhooks) and a private, real containerd
//! per test (tests/harness/containerd.sh).
//!
//! Each test has its own containerd, bridge rke<N>, subnet 10.88.<100+N>.0/24,
//! healthz port 20000+N, API server port 21000+N, kubelet port 22000+N and
//! read-only port 23000+N, with N in 41..=50 (e2e.rs uses 1..=12, cluster.rs
//! 20..=40):
//!
//!     cargo build --release
//!     cargo test --release --test kubelet_api -- --test-threads=2
//!
//! The kubelet runs with anonymous auth off, webhook authn (TokenReview) on,
//! x509 client certs verified against the double's CA and Webhook authz
//! (SubjectAccessReview); the double allows every user but those on its deny
//! list and records each SubjectAccessReview it answers.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConnection, DigitallySignedStruct, SignatureScheme, StreamOwned};
use serde_json::{json, Value};

use common::cluster::*;
use common::*;

/// On failure: the reviews and errors in the double's audit log.
fn dump_double(d: &Double) {
    let audit = fs::read_to_string(d.dir.join("audit.log")).unwrap_or_default();
    let lines: Vec<&str> = audit
        .lines()
        .filter(|l| l.contains("review") || l.contains("\"code\":4") || l.contains("\"code\":5"))
        .collect();
    eprintln!(
        "===== the double's audit log: reviews and errors (last 30) =====\n{}",
        lines[lines.len().saturating_sub(30)..].join("\n")
    );
}

// --- TLS clients ----------------------------------------------------------------------

/// The kubelet's serving certificate is self-signed (written to --cert-dir):
/// like the API server with --kubelet-insecure-tls, do not verify it.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0.signature_verification_algorithms)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A client config for the kubelet, optionally with a client certificate.
fn kubelet_tls(client: Option<(&Path, &Path)>) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let b = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCert(provider)));
    Arc::new(match client {
        Some((crt, key)) => b
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_file(crt).unwrap()],
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    })
}

fn double_tls(dir: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(dir.join("ca.crt")).unwrap())
        .unwrap();
    Arc::new(
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// One HTTP client: base URL, TLS config, optional bearer token.
struct Http {
    agent: ureq::Agent,
    base: String,
    token: Option<String>,
}

impl Http {
    fn new(base: String, tls: Option<Arc<rustls::ClientConfig>>, token: Option<String>) -> Http {
        let mut b = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(3))
            .timeout(Duration::from_secs(20))
            .redirects(0);
        if let Some(t) = tls {
            b = b.tls_config(t);
        }
        Http {
            agent: b.build(),
            base,
            token,
        }
    }

    fn request(&self, method: &str, path: &str) -> ureq::Request {
        let mut r = self
            .agent
            .request(method, &format!("{}{path}", self.base))
            .set("User-Agent", "rk-kubelet-api-test/1");
        if let Some(t) = &self.token {
            r = r.set("Authorization", &format!("Bearer {t}"));
        }
        r
    }

    /// (status, body text), or the transport error.
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, String), String> {
        let r = self.request(method, path);
        send(r, method, path, body)
    }

    fn get(&self, path: &str) -> (u16, String) {
        self.call("GET", path, None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn json(&self, method: &str, path: &str, body: Option<&Value>, want: u16) -> Value {
        let (c, t) = self
            .call(method, path, body)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c, want, "{method} {path}: {t}");
        serde_json::from_str(&t).unwrap_or_else(|e| panic!("{method} {path}: {e}: {t}"))
    }
}

// --- one test's world -------------------------------------------------------------------

/// The double (dropped first: prints the reviews on failure), the admin
/// client of the double, and the Env (containerd, rkubelet, dirs).
struct Node {
    double: Double,
    api: Http,
    env: Env,
    admin_token: String,
    port: u16,
    ro_port: u16,
    cert_dir: PathBuf,
}

impl Node {
    fn start(name: &str, n: u32, read_only: bool) -> Node {
        assert!((41..=50).contains(&n), "kubelet_api tests use N in 41..=50");
        let env = Env::new(name, n);
        let double = Double::new(env.dir.join("api"), 21000 + n as u16).with_dump(dump_double);
        let admin_token = fs::read_to_string(double.dir.join("admin-token"))
            .unwrap()
            .trim()
            .to_string();
        let api = Http::new(
            format!("https://127.0.0.1:{}", 21000 + n),
            Some(double_tls(&double.dir)),
            Some(admin_token.clone()),
        );
        let (port, ro_port) = (22000 + n as u16, 23000 + n as u16);
        let cert_dir = env.dir.join("pki");
        let config = env.dir.join("kubelet-api-config.yaml");
        fs::write(
            &config,
            kubelet_config(
                &env,
                &format!(
                    "address: 127.0.0.1\n\
                     port: {port}\n\
                     readOnlyPort: {}\n\
                     authentication:\n\
                     \x20 anonymous:\n\
                     \x20   enabled: false\n\
                     \x20 webhook:\n\
                     \x20   enabled: true\n\
                     \x20 x509:\n\
                     \x20   clientCAFile: {}\n\
                     authorization:\n\
                     \x20 mode: Webhook\n",
                    if read_only { ro_port } else { 0 },
                    double.dir.join("ca.crt").display(),
                ),
            ),
        )
        .unwrap();
        let mut node = Node {
            double,
            api,
            env,
            admin_token,
            port,
            ro_port,
            cert_dir,
        };
        let cert_dir = node.cert_dir.display().to_string();
        let args =
            cluster_kubelet_args(&node.double, &node.env, &config, &["--cert-dir", &cert_dir]);
        node.env.start_kubelet_with_args(&args);
        node.env.wait_healthy(secs(30));
        // The API port answers (401 without credentials) once it is up.
        let k = node.kubelet(None);
        let up = poll(secs(20), || {
            node.env.assert_kubelet_alive();
            k.call("GET", "/healthz", None).ok()
        });
        assert!(up.is_some(), "the kubelet API port {port} never answered");
        node
    }

    /// A client of the kubelet's HTTPS port with this bearer token.
    fn kubelet(&self, token: Option<&str>) -> Http {
        Http::new(
            format!("https://127.0.0.1:{}", self.port),
            Some(kubelet_tls(None)),
            token.map(String::from),
        )
    }

    fn kubelet_admin(&self) -> Http {
        self.kubelet(Some(&self.admin_token.clone()))
    }

    /// A token for `user` issued by the double.
    fn token_for(&self, user: &str) -> String {
        let v = self.api.json(
            "POST",
            "/__double/tokens",
            Some(&json!({"user": user, "groups": ["testers"]})),
            200,
        );
        v["token"].as_str().unwrap().to_string()
    }

    fn sars(&self) -> Vec<Value> {
        let v = self.api.json("GET", "/__double/authz/reviews", None, 200);
        v["items"].as_array().cloned().unwrap_or_default()
    }

    fn create_pod(&self, pod: Value) -> Value {
        self.api
            .json("POST", "/api/v1/namespaces/default/pods", Some(&pod), 201)
    }

    fn pod(&self, name: &str) -> Option<Value> {
        match self.api.call(
            "GET",
            &format!("/api/v1/namespaces/default/pods/{name}"),
            None,
        ) {
            Ok((200, t)) => serde_json::from_str(&t).ok(),
            _ => None,
        }
    }

    fn wait_pod(
        &mut self,
        name: &str,
        timeout: Duration,
        mut f: impl FnMut(&Value) -> bool,
    ) -> Value {
        let mut last = Value::Null;
        let got = poll(timeout, || {
            self.env.assert_kubelet_alive();
            let p = self.pod(name)?;
            last = p.clone();
            f(&p).then_some(p)
        });
        got.unwrap_or_else(|| {
            panic!(
                "pod {name}: condition not met within {timeout:?}; last status:\n{}",
                serde_json::to_string_pretty(&last["status"]).unwrap_or_default()
            )
        })
    }

    fn wait_running(&mut self, name: &str) -> Value {
        self.wait_pod(name, secs(60), |p| {
            p["status"]["phase"] == "Running"
                && p["status"]["containerStatuses"][0]["state"]["running"].is_object()
        })
    }
}

/// A pod bound to the node, one busybox container "c" running `script`
/// (tests/common/cluster.rs's, without labels and with a 2 s grace period).
fn api_pod(name: &str, script: &str) -> Value {
    let mut pod = common::cluster::api_pod(name, script);
    pod["metadata"].as_object_mut().unwrap().remove("labels");
    pod["spec"]["terminationGracePeriodSeconds"] = json!(2);
    pod
}

const COUNTER: &str =
    "trap 'exit 0' TERM INT; i=0; while true; do i=$((i+1)); echo \"line $i\"; sleep 1; done";

fn line_numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| {
            l.rsplit_once("line ")
                .and_then(|(_, n)| n.trim().parse().ok())
        })
        .collect()
}

/// An RFC 3339 timestamp as the kubelet writes it (`2006-01-02T15:04:05.999999999Z07:00`).
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 20 {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| r.into_iter().all(|i| b[i].is_ascii_digit());
    let zone = &s[19..];
    let zone = zone
        .strip_prefix('.')
        .map(|z| z.trim_start_matches(|c: char| c.is_ascii_digit()))
        .unwrap_or(zone);
    digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && (zone == "Z"
            || (zone.len() == 6
                && (zone.starts_with('+') || zone.starts_with('-'))
                && zone.as_bytes()[3] == b':'))
}

// --- a minimal WebSocket client ------------------------------------------------------------

type Tls = StreamOwned<ClientConnection, TcpStream>;

fn tls_connect(port: u16, cfg: Arc<rustls::ClientConfig>) -> Tls {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let conn =
        ClientConnection::new(cfg, ServerName::try_from("127.0.0.1").unwrap().to_owned()).unwrap();
    StreamOwned::new(conn, tcp)
}

struct Ws {
    s: Tls,
    buf: Vec<u8>,
}

/// Opens a WebSocket: Ok(Ws) after a 101, Err((status, head+body)) otherwise.
fn ws_open(
    port: u16,
    path: &str,
    token: Option<&str>,
    protocols: &str,
) -> Result<Ws, (u16, String)> {
    let mut s = tls_connect(port, kubelet_tls(None));
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Protocol: {protocols}\r\n"
    );
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    s.flush().unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = s.read(&mut chunk).unwrap_or(0);
        assert!(
            n > 0,
            "connection closed during the WebSocket handshake: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if code != 101 {
        // Read what body there is (bounded).
        let _ = s.sock.set_read_timeout(Some(Duration::from_secs(2)));
        let mut rest = buf[end..].to_vec();
        let _ = s.read_to_end(&mut rest);
        return Err((code, format!("{head}{}", String::from_utf8_lossy(&rest))));
    }
    // RFC 6455's example key and its accept value.
    assert!(
        head.lines()
            .any(|l| l.split_once(':').is_some_and(|(k, v)| k
                .trim()
                .eq_ignore_ascii_case("sec-websocket-accept")
                && v.trim() == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")),
        "bad Sec-WebSocket-Accept in {head}"
    );
    Ok(Ws {
        s,
        buf: buf[end..].to_vec(),
    })
}

impl Ws {
    fn fill(&mut self, n: usize) -> bool {
        let mut chunk = [0u8; 8192];
        while self.buf.len() < n {
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return false,
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
            }
        }
        true
    }

    /// The next server frame (opcode, payload); None at the end. Server
    /// frames are unmasked.
    fn frame(&mut self) -> Option<(u8, Vec<u8>)> {
        if !self.fill(2) {
            return None;
        }
        let (b0, b1) = (self.buf[0], self.buf[1]);
        assert_eq!(b1 & 0x80, 0, "server frames must not be masked");
        let (len, hl) = match b1 & 0x7f {
            126 => {
                self.fill(4);
                (u16::from_be_bytes([self.buf[2], self.buf[3]]) as usize, 4)
            }
            127 => {
                self.fill(10);
                let mut l = [0u8; 8];
                l.copy_from_slice(&self.buf[2..10]);
                (u64::from_be_bytes(l) as usize, 10)
            }
            l => (l as usize, 2),
        };
        if !self.fill(hl + len) {
            return None;
        }
        let payload = self.buf[hl..hl + len].to_vec();
        self.buf.drain(..hl + len);
        Some((b0 & 0x0f, payload))
    }

    /// Sends a masked binary frame.
    fn send(&mut self, payload: &[u8]) {
        let mask = [0x12u8, 0x34, 0x56, 0x78];
        let mut f = vec![0x82u8];
        match payload.len() {
            l if l < 126 => f.push(0x80 | l as u8),
            l if l < 65536 => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(l as u16).to_be_bytes());
            }
            l => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(l as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.s.write_all(&f).unwrap();
        self.s.flush().unwrap();
    }

    /// Channel data frames until `done` says so or the stream ends; returns
    /// everything collected per channel.
    fn collect(
        &mut self,
        deadline: Instant,
        mut done: impl FnMut(&[Vec<u8>]) -> bool,
    ) -> Vec<Vec<u8>> {
        let mut chans = vec![Vec::new(); 5];
        while Instant::now() < deadline && !done(&chans) {
            match self.frame() {
                Some((0x1 | 0x2, p)) if !p.is_empty() => {
                    let c = p[0] as usize;
                    if c < chans.len() {
                        chans[c].extend_from_slice(&p[1..]);
                    }
                }
                Some((0x8, _)) | None => break,
                Some(_) => {}
            }
        }
        chans
    }
}

// --- the tests ----------------------------------------------------------------------------

/// a. Authentication (token, x509, none) and authorization (SubjectAccessReviews).
#[test]
fn authn_and_authz() {
    let mut node = Node::start("kapi-auth", 41, false);
    node.create_pod(api_pod("authpod", SLEEPER));
    node.wait_running("authpod");
    let admin = node.kubelet_admin();

    // No credentials: 401.
    let (c, body) = node.kubelet(None).get("/pods");
    assert_eq!(c, 401, "/pods without credentials: {body}");
    let (c, _) = node.kubelet(Some("not-a-token")).get("/pods");
    assert_eq!(c, 401, "/pods with an unknown token");

    // Admin token: the PodList.
    let list = admin.json("GET", "/pods", None, 200);
    assert_eq!(list["kind"], "PodList", "{list}");
    assert_eq!(list["apiVersion"], "v1");
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str())
        .collect();
    assert!(names.contains(&"authpod"), "pods: {names:?}");

    // A user the authorizer denies: 403 naming the user.
    let denied = node.token_for("mallory");
    node.api.json(
        "POST",
        "/__double/authz",
        Some(&json!({"deny": ["mallory"]})),
        200,
    );
    let (c, body) = node.kubelet(Some(&denied)).get("/pods");
    assert_eq!(c, 403, "denied user on /pods: {body}");
    assert!(
        body.contains("Forbidden") && body.contains("user=mallory"),
        "403 body should name the user: {body}"
    );
    // A user that is allowed, with an issued token.
    let alice = node.token_for("alice");
    assert_eq!(node.kubelet(Some(&alice)).get("/pods").0, 200);

    // x509: the admin client certificate signed by the cluster CA.
    let x509 = Http::new(
        format!("https://127.0.0.1:{}", node.port),
        Some(kubelet_tls(Some((
            &node.double.dir.join("admin.crt"),
            &node.double.dir.join("admin.key"),
        )))),
        None,
    );
    let list = x509.json("GET", "/pods", None, 200);
    assert_eq!(list["kind"], "PodList");

    // The SubjectAccessReviews name the node and the right subresource.
    node.api
        .json("DELETE", "/__double/authz/reviews", None, 200);
    let fresh = node.token_for("auditor");
    let k = node.kubelet(Some(&fresh));
    let mut codes = vec![];
    for path in ["/pods", "/stats/summary", "/metrics", "/logs/"] {
        codes.push((path, k.get(path).0));
    }
    let sars = node.sars();
    let summary: Vec<String> = sars
        .iter()
        .map(|s| {
            format!(
                "{} {} {}/{} name={}",
                s["user"], s["verb"], s["resource"], s["subresource"], s["name"]
            )
        })
        .collect();
    let subs_for_user: Vec<&str> = sars
        .iter()
        .filter(|s| s["user"] == "auditor")
        .map(|s| {
            assert_eq!(s["resource"], "nodes", "{s}");
            assert_eq!(s["name"], NODE, "{s}");
            assert_eq!(s["verb"], "get", "{s}");
            s["subresource"].as_str().unwrap_or("")
        })
        .collect();
    assert!(
        subs_for_user.contains(&"pods") || subs_for_user.contains(&"proxy"),
        "/pods: want subresource pods or proxy; reviews: {summary:#?}"
    );
    for want in ["stats", "metrics", "log"] {
        assert!(
            subs_for_user.contains(&want),
            "want a review with subresource {want}; requests {codes:?}; reviews: {summary:#?}"
        );
    }
    assert!(codes.iter().take(3).all(|(_, c)| *c == 200), "{codes:?}");
    node.env.assert_kubelet_alive();
}

/// b. /containerLogs: tailLines, timestamps, follow, previous.
#[test]
fn container_logs() {
    let mut node = Node::start("kapi-logs", 42, false);
    node.create_pod(api_pod("counter", COUNTER));
    let mut crash = api_pod("crasher", "echo run; sleep 1; exit 1");
    crash["spec"]["restartPolicy"] = json!("Always");
    node.create_pod(crash);
    node.wait_running("counter");
    let k = node.kubelet_admin();
    let base = "/containerLogs/default/counter/c";

    // Wait for a few lines.
    let text = eventually(secs(20), "5 lines of logs", || {
        let (c, t) = k.get(base);
        (c == 200 && line_numbers(&t).len() >= 5).then_some(t)
    });
    assert!(
        line_numbers(&text).windows(2).all(|w| w[1] == w[0] + 1),
        "{text}"
    );

    // tailLines=3: the last three lines, consecutive.
    let (c, t) = k.get(&format!("{base}?tailLines=3"));
    assert_eq!(c, 200, "{t}");
    let nums = line_numbers(&t);
    assert_eq!(nums.len(), 3, "tailLines=3 gave: {t:?}");
    assert!(nums[0] + 1 == nums[1] && nums[1] + 1 == nums[2], "{t:?}");
    assert!(
        nums[2] >= line_numbers(&text).last().copied().unwrap(),
        "{t:?}"
    );

    // timestamps=true: each line starts with an RFC 3339 timestamp.
    let (c, t) = k.get(&format!("{base}?timestamps=true&tailLines=2"));
    assert_eq!(c, 200, "{t}");
    assert_eq!(t.lines().count(), 2, "{t:?}");
    for l in t.lines() {
        let (ts, rest) = l
            .split_once(' ')
            .unwrap_or_else(|| panic!("no timestamp: {l:?}"));
        assert!(is_rfc3339(ts), "not an RFC 3339 timestamp: {ts:?} in {l:?}");
        assert!(rest.starts_with("line "), "{l:?}");
    }

    // follow=true: a line written after the request arrives on the stream.
    let (_, t) = k.get(&format!("{base}?tailLines=1"));
    let last = line_numbers(&t).last().copied().unwrap_or(0);
    let started = Instant::now();
    let resp = k
        .request("GET", &format!("{base}?follow=true&tailLines=1"))
        .timeout(Duration::from_secs(15))
        .call()
        .expect("follow request");
    assert_eq!(resp.status(), 200);
    let mut newer = None;
    for l in BufReader::new(resp.into_reader()).lines() {
        let Ok(l) = l else { break };
        if let Some(n) = line_numbers(&l).first().copied().filter(|n| *n > last) {
            newer = Some(n);
            break;
        }
    }
    assert!(
        newer.is_some(),
        "follow=true: no line after 'line {last}' within {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < secs(10),
        "follow took {:?}",
        started.elapsed()
    );

    // previous=true: the last terminated instance's output.
    node.wait_pod("crasher", secs(60), |p| {
        p["status"]["containerStatuses"][0]["restartCount"]
            .as_u64()
            .is_some_and(|n| n >= 1)
    });
    let (c, t) = k.get("/containerLogs/default/crasher/c?previous=true");
    assert_eq!(c, 200, "previous=true: {t}");
    assert!(t.contains("run"), "previous=true: {t:?}");
    // A container that never ran before has no previous instance.
    let (c, t) = k.get(&format!("{base}?previous=true"));
    assert!(
        c == 400 || c == 404 || c == 500,
        "previous=true of a first instance: {c} {t}"
    );
    // Unknown pod.
    let (c, _) = k.get("/containerLogs/default/nope/c");
    assert_eq!(c, 404);
    node.env.assert_kubelet_alive();
}

/// The sum of the samples of `name` whose labels include all of `labels`
/// (each `key="value"`).
fn sample_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            let matches = (rest.is_empty() || rest.starts_with('{'))
                && labels.iter().all(|want| rest.contains(want));
            matches.then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Checks the Prometheus text exposition format; returns the sample names.
fn parse_prometheus(text: &str) -> Vec<String> {
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    let mut names = vec![];
    for (i, line) in text.lines().enumerate() {
        let ctx = || format!("line {}: {line:?}", i + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(c) = line.strip_prefix('#') {
            let parts: Vec<&str> = c.trim_start().splitn(3, ' ').collect();
            match parts.first() {
                Some(&"HELP") => assert!(parts.len() >= 2 && valid_name(parts[1]), "{}", ctx()),
                Some(&"TYPE") => {
                    assert!(parts.len() == 3 && valid_name(parts[1]), "{}", ctx());
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"]
                            .contains(&parts[2].trim()),
                        "{}",
                        ctx()
                    );
                }
                _ => {}
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("no value: {}", ctx()));
        let name = &line[..name_end];
        assert!(valid_name(name), "bad metric name: {}", ctx());
        let mut rest = &line[name_end..];
        if rest.starts_with('{') {
            // labels: name="value" pairs, values with \\ \" \n escapes
            let b = rest.as_bytes();
            let (mut j, mut in_q, mut esc) = (1, false, false);
            while j < b.len() {
                let ch = b[j];
                if in_q {
                    if esc {
                        esc = false;
                    } else if ch == b'\\' {
                        esc = true;
                    } else if ch == b'"' {
                        in_q = false;
                    }
                } else if ch == b'"' {
                    in_q = true;
                } else if ch == b'}' {
                    break;
                }
                j += 1;
            }
            assert!(j < b.len(), "unterminated labels: {}", ctx());
            let labels = &rest[1..j];
            for pair in split_labels(labels) {
                let (k, v) = pair
                    .split_once('=')
                    .unwrap_or_else(|| panic!("bad label {pair:?}: {}", ctx()));
                assert!(
                    valid_name(k.trim()) && !k.contains(':'),
                    "bad label name {k:?}: {}",
                    ctx()
                );
                assert!(
                    v.len() >= 2 && v.starts_with('"') && v.ends_with('"'),
                    "bad label value {v:?}: {}",
                    ctx()
                );
            }
            rest = &rest[j + 1..];
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        assert!(
            fields.len() == 1 || fields.len() == 2,
            "want `value [timestamp]`: {}",
            ctx()
        );
        let v = fields[0];
        assert!(
            v.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&v),
            "bad value {v:?}: {}",
            ctx()
        );
        if let Some(ts) = fields.get(1) {
            assert!(ts.parse::<i64>().is_ok(), "bad timestamp: {}", ctx());
        }
        names.push(name.to_string());
    }
    names
}

/// Splits `a="x",b="y,z"` at the commas outside quotes.
fn split_labels(s: &str) -> Vec<&str> {
    let (mut out, mut start, mut in_q, mut esc) = (vec![], 0, false, false);
    for (i, ch) in s.char_indices() {
        if in_q {
            if esc {
                esc = false;
            } else if ch == '\\' {
                esc = true;
            } else if ch == '"' {
                in_q = false;
            }
        } else if ch == '"' {
            in_q = true;
        } else if ch == ',' {
            out.push(&s[start..i]);
            start = i + 1;
        }
    }
    if !s[start..].trim().is_empty() {
        out.push(&s[start..]);
    }
    out
}

/// c + d. /metrics, /metrics/resource and /stats/summary.
#[test]
fn metrics_and_stats_summary() {
    let mut node = Node::start("kapi-metrics", 43, false);
    let created = node.create_pod(api_pod("statpod", SLEEPER));
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    node.wait_running("statpod");
    let k = node.kubelet_admin();

    // c. /metrics: Prometheus text with the kubelet's own metrics.
    let text = eventually(secs(30), "kubelet_running_pods in /metrics", || {
        let (c, t) = k.get("/metrics");
        (c == 200 && t.contains("kubelet_running_pods")).then_some(t)
    });
    let names = parse_prometheus(&text);
    for want in ["kubelet_running_pods", "kubelet_node_name"] {
        assert!(
            names.iter().any(|n| n == want),
            "/metrics lacks {want}:\n{text}"
        );
    }
    let node_name_line = text
        .lines()
        .find(|l| l.starts_with("kubelet_node_name{"))
        .unwrap_or("");
    assert!(
        node_name_line.contains(&format!("node=\"{NODE}\"")),
        "kubelet_node_name: {node_name_line:?}"
    );
    // Each recording site is wired: the pod's start, its sandbox and
    // container starts, the CRI calls, PLEG, this very request and the API
    // client's requests all show up as samples with values.
    for (name, labels) in [
        ("kubelet_pod_start_duration_seconds_count", &[][..]),
        ("kubelet_started_pods_total", &[][..]),
        (
            "kubelet_started_containers_total",
            &["container_type=\"container\""][..],
        ),
        (
            "kubelet_runtime_operations_total",
            &["operation_type=\"run_pod_sandbox\""][..],
        ),
        ("kubelet_pleg_relist_duration_seconds_count", &[][..]),
        (
            "kubelet_http_requests_total",
            &[
                "path=\"metrics\"",
                "server_type=\"readwrite\"",
                "method=\"GET\"",
            ][..],
        ),
        ("rest_client_requests_total", &["code=\"200\""][..]),
    ] {
        let v = sample_sum(&text, name, labels);
        assert!(v >= 1.0, "{name}{labels:?} = {v}, want >= 1:\n{text}");
    }
    let resp = k.request("GET", "/metrics").call().unwrap();
    let ct = resp.header("Content-Type").unwrap_or("").to_string();
    assert!(ct.starts_with("text/plain"), "/metrics Content-Type {ct:?}");

    let text = eventually(secs(30), "cpu usage in /metrics/resource", || {
        let (c, t) = k.get("/metrics/resource");
        (c == 200
            && (t.contains("container_cpu_usage_seconds_total")
                || t.contains("node_cpu_usage_seconds_total")))
        .then_some(t)
    });
    parse_prometheus(&text);

    // d. /stats/summary in upstream's schema (what metrics-server reads).
    let mut last = Value::Null;
    let got = poll(secs(45), || {
        let (c, t) = k.get("/stats/summary");
        if c != 200 {
            last = Value::String(format!("{c}: {t}"));
            return None;
        }
        let v: Value = serde_json::from_str(&t).ok()?;
        last = v.clone();
        let pod = v["pods"]
            .as_array()?
            .iter()
            .find(|p| p["podRef"]["name"] == "statpod")?
            .clone();
        (pod["containers"].as_array().is_some_and(|c| !c.is_empty())
            && v["node"]["cpu"]["usageCoreNanoSeconds"].is_u64())
        .then_some((v, pod))
    });
    let (summary, pod) = got.unwrap_or_else(|| {
        panic!(
            "/stats/summary never listed statpod with containers and node cpu; last:\n{}",
            serde_json::to_string_pretty(&last).unwrap_or_default()
        )
    });
    let n = &summary["node"];
    assert_eq!(n["nodeName"], NODE, "{n}");
    assert!(
        n["cpu"]["usageCoreNanoSeconds"]
            .as_u64()
            .is_some_and(|x| x > 0),
        "{n}"
    );
    assert!(
        n["memory"]["workingSetBytes"]
            .as_u64()
            .is_some_and(|x| x > 0),
        "{n}"
    );
    assert!(n["cpu"]["time"].is_string(), "node.cpu.time: {n}");
    assert_eq!(pod["podRef"]["namespace"], "default", "{pod}");
    assert_eq!(pod["podRef"]["uid"], uid.as_str(), "{pod}");
    let cnames: Vec<&str> = pod["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(cnames, vec!["c"], "{pod}");
    // only_cpu_and_memory=true (metrics-server's query) answers too.
    let (c, t) = k.get("/stats/summary?only_cpu_and_memory=true");
    assert_eq!(c, 200, "{t}");
    let v: Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["node"]["nodeName"], NODE);
    node.env.assert_kubelet_alive();
}

/// e. /exec over WebSocket (v4.channel.k8s.io).
#[test]
fn exec_websocket() {
    let mut node = Node::start("kapi-exec", 44, false);
    node.create_pod(api_pod("execpod", SLEEPER));
    node.wait_running("execpod");
    let path = "/exec/default/execpod/c?command=echo&command=hi&output=1&error=1";

    // Without credentials: 401, no upgrade.
    match ws_open(node.port, path, None, "v4.channel.k8s.io") {
        Ok(_) => panic!("exec without credentials was upgraded"),
        Err((c, t)) => assert_eq!(c, 401, "{t}"),
    }

    let token = node.admin_token.clone();
    let mut ws = ws_open(node.port, path, Some(&token), "v4.channel.k8s.io")
        .unwrap_or_else(|(c, t)| panic!("exec upgrade: {c}: {t}"));
    let chans = ws.collect(Instant::now() + secs(20), |c| !c[3].is_empty());
    let stdout = String::from_utf8_lossy(&chans[1]).into_owned();
    let status = String::from_utf8_lossy(&chans[3]).into_owned();
    assert!(
        stdout.contains("hi"),
        "stdout channel: {stdout:?}; status: {status:?}"
    );
    let st: Value = serde_json::from_str(&status)
        .unwrap_or_else(|e| panic!("status channel is not JSON ({e}): {status:?}"));
    assert_eq!(st["status"], "Success", "{st}");

    // A failing command: the status carries the exit code.
    let path = "/exec/default/execpod/c?command=sh&command=-c&command=exit%203&output=1&error=1";
    let mut ws = ws_open(node.port, path, Some(&token), "v4.channel.k8s.io")
        .unwrap_or_else(|(c, t)| panic!("exec upgrade: {c}: {t}"));
    let chans = ws.collect(Instant::now() + secs(20), |c| !c[3].is_empty());
    let st: Value = serde_json::from_slice(&chans[3]).unwrap_or(Value::Null);
    assert_eq!(st["status"], "Failure", "{st}");
    assert_eq!(st["reason"], "NonZeroExitCode", "{st}");
    node.env.assert_kubelet_alive();
}

/// f. /portForward over WebSocket to a busybox httpd.
#[test]
fn port_forward_websocket() {
    let mut node = Node::start("kapi-pf", 45, false);
    node.create_pod(api_pod(
        "web",
        "mkdir -p /www && echo hello-from-httpd > /www/index.html && exec httpd -f -p 8080 -h /www",
    ));
    node.wait_running("web");
    let token = node.admin_token.clone();
    let path = "/portForward/default/web?port=8080";
    let mut ws = ws_open(node.port, path, Some(&token), "v4.channel.k8s.io")
        .unwrap_or_else(|(c, t)| panic!("portForward upgrade: {c}: {t}"));
    // Each channel (0 data, 1 error) first carries the port, little-endian.
    let chans = ws.collect(Instant::now() + secs(10), |c| {
        c[0].len() >= 2 && c[1].len() >= 2
    });
    assert_eq!(
        &chans[0][..2],
        &8080u16.to_le_bytes(),
        "data channel port prefix"
    );
    let mut req = vec![0u8];
    req.extend_from_slice(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    ws.send(&req);
    let chans = ws.collect(Instant::now() + secs(15), |c| {
        String::from_utf8_lossy(&c[0]).contains("hello-from-httpd")
    });
    let data = String::from_utf8_lossy(&chans[0]).into_owned();
    assert!(
        data.starts_with("HTTP/1.") && data.contains("hello-from-httpd"),
        "port-forwarded answer: {data:?}; error channel: {:?}",
        String::from_utf8_lossy(&chans[1])
    );
    node.env.assert_kubelet_alive();
}

/// g. The read-only port: plain HTTP, no auth, no debugging handlers.
#[test]
fn read_only_port() {
    let mut node = Node::start("kapi-ro", 46, true);
    node.create_pod(api_pod("ropod", SLEEPER));
    node.wait_running("ropod");
    let ro = Http::new(format!("http://127.0.0.1:{}", node.ro_port), None, None);
    let (c, t) = ro.get("/healthz");
    assert_eq!((c, t.trim()), (200, "ok"));
    let list = ro.json("GET", "/pods", None, 200);
    assert_eq!(list["kind"], "PodList");
    assert!(
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["metadata"]["name"] == "ropod"),
        "{list}"
    );
    // Not served there: upstream's read-only server installs the
    // "debugging disabled" handlers (405 "Debug endpoints are disabled.").
    for path in [
        "/containerLogs/default/ropod/c",
        "/exec/default/ropod/c?command=true",
        "/logs/",
    ] {
        let (c, t) = ro.get(path);
        assert!(
            c == 405 && t.contains("Debug endpoints are disabled"),
            "{path} on the read-only port: {c} {t:?}"
        );
    }
    // Unknown paths are 404.
    assert_eq!(ro.get("/no/such/path").0, 404);
    // No SubjectAccessReview for read-only requests.
    assert!(node.sars().is_empty(), "{:?}", node.sars());
    // The secure port still wants credentials.
    assert_eq!(node.kubelet(None).get("/pods").0, 401);
    node.env.assert_kubelet_alive();
}

/// h. Bad input: huge headers, unknown paths, a slowloris client.
#[test]
fn bad_input() {
    let mut node = Node::start("kapi-bad", 47, false);
    let k = node.kubelet_admin();

    // 100 KiB of headers: 431.
    let mut s = tls_connect(node.port, kubelet_tls(None));
    let mut req = format!(
        "GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n",
        node.admin_token
    );
    for i in 0..100 {
        req.push_str(&format!("X-Filler-{i}: {}\r\n", "a".repeat(1000)));
    }
    req.push_str("\r\n");
    let _ = s.write_all(req.as_bytes());
    let _ = s.flush();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let head = String::from_utf8_lossy(&got);
    assert!(
        head.starts_with("HTTP/1.1 431"),
        "100 KiB of headers: {:?}",
        &head[..head.len().min(200)]
    );

    // Unknown path (authorized): 404.
    let (c, _) = k.get("/no/such/path");
    assert_eq!(c, 404);

    // A slowloris: 1 header byte per second is cut off and does not block
    // a normal request meanwhile.
    let port = node.port;
    let slow = std::thread::spawn(move || {
        let mut s = tls_connect(port, kubelet_tls(None));
        let started = Instant::now();
        let msg = b"GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n";
        for b in msg.iter() {
            if s.write_all(&[*b]).and_then(|_| s.flush()).is_err() {
                return (true, started.elapsed());
            }
            // A closed connection shows as EOF/error on a short read.
            s.sock
                .set_read_timeout(Some(Duration::from_millis(1000)))
                .unwrap();
            let mut buf = [0u8; 512];
            match s.read(&mut buf) {
                Ok(0) => return (true, started.elapsed()),
                Ok(_) => return (true, started.elapsed()),
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return (true, started.elapsed()),
            }
            if started.elapsed() > secs(60) {
                break;
            }
        }
        (false, started.elapsed())
    });
    std::thread::sleep(secs(3));
    let t0 = Instant::now();
    let (c, _) = k.get("/pods");
    assert_eq!(c, 200);
    assert!(
        t0.elapsed() < secs(5),
        "a normal request took {:?} beside a slow client",
        t0.elapsed()
    );
    let (cut, after) = slow.join().unwrap();
    assert!(cut, "the slow client was never cut off ({after:?})");
    assert!(
        after < secs(45),
        "the slow client was cut off only after {after:?}"
    );
    eprintln!("[kapi-bad] slow client cut off after {after:?}");
    assert_eq!(k.get("/pods").0, 200);

    // Random bytes instead of a TLS handshake, from 16 clients at once,
    // each then waiting for the server to hang up.
    let port = node.port;
    let noisy: Vec<_> = (0..16u64)
        .map(|i| {
            std::thread::spawn(move || {
                let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
                tcp.set_read_timeout(Some(secs(20))).unwrap();
                let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ i;
                let bytes: Vec<u8> = (0..64 * 1024)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                let _ = tcp.write_all(&bytes);
                // EOF or a reset: the server hung up; a timeout: it hung.
                match tcp.read_to_end(&mut Vec::new()) {
                    Ok(_) => true,
                    Err(e) => !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                }
            })
        })
        .collect();
    // A request head cut off by a half-close (the client shut its write
    // side), and an upgrade request followed at once by a half-close.
    let mut cut = tls_connect(port, kubelet_tls(None));
    let _ = cut.write_all(b"GET /pods HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ");
    let _ = cut.flush();
    let _ = cut.sock.shutdown(std::net::Shutdown::Write);
    let mut upgrade = tls_connect(port, kubelet_tls(None));
    let _ = upgrade.write_all(
        format!(
            "GET /exec/default/none/c?command=true&stdout=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Authorization: Bearer {}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
             X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
            node.admin_token
        )
        .as_bytes(),
    );
    let _ = upgrade.flush();
    let _ = upgrade.sock.shutdown(std::net::Shutdown::Write);
    let t0 = Instant::now();
    assert_eq!(
        k.get("/pods").0,
        200,
        "beside random bytes and half-closed clients"
    );
    assert!(
        t0.elapsed() < secs(5),
        "a normal request took {:?} beside random bytes and half-closed clients",
        t0.elapsed()
    );
    for (i, h) in noisy.into_iter().enumerate() {
        assert!(
            h.join().unwrap(),
            "random-bytes client {i} was never hung up on"
        );
    }
    for (what, mut s) in [("cut-off head", cut), ("half-closed upgrade", upgrade)] {
        s.sock.set_read_timeout(Some(secs(20))).unwrap();
        let mut got = Vec::new();
        let r = s.read_to_end(&mut got);
        let timed_out = matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
            || e.kind() == std::io::ErrorKind::TimedOut);
        assert!(
            !timed_out,
            "{what}: the server kept the connection open 20 s"
        );
        eprintln!(
            "[kapi-bad] {what}: {:?}",
            String::from_utf8_lossy(&got[..got.len().min(40)])
        );
    }
    assert_eq!(k.get("/pods").0, 200);
    node.env.assert_kubelet_alive();
}
