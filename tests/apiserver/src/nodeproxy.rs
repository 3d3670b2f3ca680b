//! The pod subresources the real kube-apiserver proxies to the node's
//! kubelet: `pods/{name}/log`, `pods/{name}/exec`, `pods/{name}/attach` and
//! `pods/{name}/portforward` (pkg/registry/core/pod/rest/{log,subresources}.go
//! with the locations of pkg/registry/core/pod/strategy.go: LogLocation,
//! ExecLocation, AttachLocation, PortForwardLocation).
//!
//! The pod's spec.nodeName names a Node; its status.daemonEndpoints
//! .kubeletEndpoint.port (10250 when unset) and its first address by
//! kubeadm's `--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname`
//! give `https://ADDRESS:PORT`. The double connects there with TLS and a
//! kubelet client certificate (upstream --kubelet-client-certificate /
//! --kubelet-client-key); the kubelet's serving certificate is verified
//! against --kubelet-certificate-authority when given and not at all
//! otherwise, as upstream's kubelet client does without a CA.
//!
//! Logs are fetched with a fresh GET and streamed back as `text/plain`
//! (upstream LocationStreamer; a non-2xx kubelet answer becomes a Status as
//! GenericHttpResponseChecker makes it). exec/attach/portforward need an
//! upgrade request; the upgrade is replayed to the kubelet and, once it
//! answers 101, the two connections are joined byte for byte, whatever the
//! protocol on top (SPDY/3.1 or WebSocket): this is the UpgradeAwareHandler
//! of kube-apiserver before 1.30. Since 1.30 a real apiserver instead
//! terminates WebSocket (v5.channel.k8s.io) requests itself and speaks
//! SPDY to the kubelet (the StreamTranslator / TranslatingStreams feature);
//! the double does not. A kubectl whose WebSocket upgrade fails (here: the
//! runtime's stream server does not offer v5.channel.k8s.io and answers
//! non-101) falls back to SPDY on a new request, which is what a kubectl
//! talking to a pre-1.30 apiserver does too.
//!
//! Every blocking call is bounded: connect, handshake and response head by
//! fixed timeouts; a log stream and an upgraded stream wake every second to
//! notice a client that went away or an idle deadline.

use crate::handlers::{Api, Route};
use crate::http::Request;
use crate::status::ApiError;
use crate::util::get_str;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, Connection, DigitallySignedStruct, SignatureScheme};
use rustls::{ServerConnection, StreamOwned};
use serde_json::Value;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Default kubelet port when the Node reports none (upstream KubeletPort).
pub const DEFAULT_KUBELET_PORT: u16 = 10250;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// TLS handshake plus the kubelet's response head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a blocked read wakes to look at the client and the deadlines.
const TICK: Duration = Duration::from_secs(1);
/// A non-follow log read that gets nothing for this long fails.
const LOG_IDLE: Duration = Duration::from_secs(60);
/// An upgraded stream without traffic either way for this long is closed
/// (the kubelet's own streamingConnectionIdleTimeout is 4 h).
const STREAM_IDLE: Duration = Duration::from_secs(30 * 60);
const MAX_HEAD: usize = 64 * 1024;
/// How much of a kubelet error body goes into the Status (upstream maxReadLength).
const MAX_ERROR_BODY: usize = 50_000;
const COPY_BUF: usize = 32 * 1024;

// ------------------------------------------------------------------ the client

/// The double's client of kubelets.
pub struct KubeletClient {
    tls: Arc<ClientConfig>,
}

/// Files of the kubelet client (upstream's flags of the same names).
#[derive(Debug, Clone, Default)]
pub struct KubeletClientFiles {
    pub client_certificate: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    pub certificate_authority: Option<PathBuf>,
}

/// No verification of the kubelet's serving certificate (upstream's kubelet
/// client without a CA); handshake signatures are still checked.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerify {
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

fn read_certs(p: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(p)
        .map_err(|e| format!("read {}: {}", p.display(), e))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("parse {}: {}", p.display(), e))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate", p.display()));
    }
    Ok(certs)
}

impl KubeletClient {
    pub fn new(files: &KubeletClientFiles) -> Result<KubeletClient, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let b = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("kubelet client: tls versions: {}", e))?;
        let b = match &files.certificate_authority {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for c in read_certs(ca)? {
                    roots
                        .add(c)
                        .map_err(|e| format!("--kubelet-certificate-authority: {}", e))?;
                }
                b.with_root_certificates(roots)
            }
            None => b
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider))),
        };
        let cfg = match (&files.client_certificate, &files.client_key) {
            (Some(c), Some(k)) => {
                let key = PrivateKeyDer::from_pem_file(k)
                    .map_err(|e| format!("--kubelet-client-key {}: {}", k.display(), e))?;
                b.with_client_auth_cert(read_certs(c)?, key)
                    .map_err(|e| format!("kubelet client certificate: {}", e))?
            }
            (None, None) => b.with_no_client_auth(),
            _ => {
                return Err(
                    "--kubelet-client-certificate and --kubelet-client-key go together".into(),
                )
            }
        };
        Ok(KubeletClient { tls: Arc::new(cfg) })
    }

    /// A TLS connection to the kubelet, handshake done.
    fn connect(&self, loc: &Location) -> io::Result<StreamOwned<ClientConnection, TcpStream>> {
        let addrs: Vec<SocketAddr> = (loc.host.as_str(), loc.port).to_socket_addrs()?.collect();
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address");
        let mut tcp = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let tcp = tcp.ok_or(last)?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(HEAD_TIMEOUT))?;
        tcp.set_write_timeout(Some(HEAD_TIMEOUT))?;
        let name = ServerName::try_from(loc.host.clone())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let conn = ClientConnection::new(self.tls.clone(), name).map_err(io::Error::other)?;
        let mut s = StreamOwned::new(conn, tcp);
        while s.conn.is_handshaking() {
            s.conn.complete_io(&mut s.sock)?;
        }
        Ok(s)
    }
}

// ------------------------------------------------------------------ locations

/// Where on which kubelet a request goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Location {
    pub host: String,
    pub port: u16,
    /// Path and query, as on the request line.
    pub target: String,
}

impl Location {
    pub fn url(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("https://{}:{}{}", host, self.port, self.target)
    }
}

/// What the handler decided: a log stream or an upgrade to proxy.
#[derive(Debug, Clone, PartialEq)]
pub enum KubeletCall {
    /// `None` for a pod not bound to a node: an empty 200 (upstream).
    Log {
        loc: Option<Location>,
        follow: bool,
        pod: String,
    },
    Upgrade {
        loc: Location,
    },
}

/// Go's url.QueryEscape.
fn qenc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{:02X}", b)),
        }
    }
    out
}

fn path_enc(s: &str) -> String {
    qenc(s).replace('+', "%20")
}

/// strconv.ParseBool.
fn parse_bool(name: &str, v: &str) -> Result<bool, ApiError> {
    match v {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" | "" => Ok(false),
        _ => Err(ApiError::bad_request(format!(
            "invalid value {:?} for query parameter {:?}: not a boolean",
            v, name
        ))),
    }
}

fn q_bool(req: &Request, name: &str) -> Result<bool, ApiError> {
    req.q(name).map_or(Ok(false), |v| parse_bool(name, v))
}

fn q_int(req: &Request, name: &str) -> Result<Option<i64>, ApiError> {
    req.q(name)
        .map(|v| {
            v.parse::<i64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid value {:?} for query parameter {:?}: not an integer",
                    v, name
                ))
            })
        })
        .transpose()
}

fn container_names(pod: &Value) -> Vec<String> {
    let mut names = Vec::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(a) = pod["spec"][list].as_array() {
            names.extend(
                a.iter()
                    .filter_map(|c| c["name"].as_str().map(String::from)),
            );
        }
    }
    names
}

/// Upstream validateContainer: the only container when none is named.
fn validate_container(container: &str, pod: &Value, name: &str) -> Result<String, ApiError> {
    if container.is_empty() {
        let main: Vec<&str> = pod["spec"]["containers"]
            .as_array()
            .map(|a| a.iter().filter_map(|c| c["name"].as_str()).collect())
            .unwrap_or_default();
        return match main.len() {
            1 => Ok(main[0].to_string()),
            0 => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {}",
                name
            ))),
            _ => Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {}, choose one of: [{}]",
                name,
                container_names(pod).join(" ")
            ))),
        };
    }
    if !container_names(pod).iter().any(|c| c == container) {
        return Err(ApiError::bad_request(format!(
            "container {} is not valid for pod {}",
            container, name
        )));
    }
    Ok(container.to_string())
}

/// Upstream NodeConnectionInfoGetter with kubeadm's preferred address types.
fn node_endpoint(api: &Api, node_name: &str) -> Result<(String, u16), ApiError> {
    let node = api
        .store
        .lock()
        .get("nodes", "", node_name)
        .ok_or_else(|| ApiError::not_found("nodes", node_name))?;
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .filter(|p| *p > 0 && *p <= u64::from(u16::MAX))
        .map(|p| p as u16)
        .unwrap_or(DEFAULT_KUBELET_PORT);
    let addrs = node["status"]["addresses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for ty in ["InternalIP", "ExternalIP", "Hostname"] {
        if let Some(a) = addrs
            .iter()
            .find(|a| a["type"] == ty)
            .and_then(|a| a["address"].as_str())
            .filter(|a| !a.is_empty())
        {
            return Ok((a.to_string(), port));
        }
    }
    Err(ApiError::internal(&format!(
        "no preferred addresses found; known addresses: {}",
        Value::Array(addrs)
    )))
}

/// The location for `pods/{name}/{sub}` (log, exec, attach, portforward).
pub fn pod_call(
    api: &Api,
    route: &Route,
    req: &Request,
    sub: &str,
) -> Result<KubeletCall, ApiError> {
    let ns = route.ns.as_deref().unwrap_or("");
    let name = route.name.as_deref().unwrap_or("");
    let method_ok = match sub {
        "log" => req.method == "GET",
        _ => req.method == "GET" || req.method == "POST",
    };
    if !method_ok {
        return Err(ApiError::method_not_allowed());
    }
    let pod = api
        .store
        .lock()
        .get("pods", ns, name)
        .ok_or_else(|| ApiError::not_found("pods", name))?;
    let node_name = get_str(&pod, &["spec", "nodeName"])
        .unwrap_or("")
        .to_string();
    let mut params: Vec<(String, String)> = Vec::new();
    let mut add = |k: &str, v: String| params.push((k.to_string(), v));
    let path = match sub {
        "log" => {
            let follow = q_bool(req, "follow")?;
            let since_seconds = q_int(req, "sinceSeconds")?;
            let since_time = req.q("sinceTime").filter(|s| !s.is_empty());
            let tail = q_int(req, "tailLines")?;
            let limit = q_int(req, "limitBytes")?;
            let mut errs = Vec::new();
            if since_seconds.is_some() && since_time.is_some() {
                errs.push((
                    String::new(),
                    "FieldValueForbidden",
                    "at most one of `sinceTime` or `sinceSeconds` may be specified".to_string(),
                ));
            }
            if since_seconds.is_some_and(|s| s < 1) {
                errs.push((
                    "sinceSeconds".to_string(),
                    "FieldValueInvalid",
                    "must be greater than 0".to_string(),
                ));
            }
            if tail.is_some_and(|t| t < 0) {
                errs.push((
                    "tailLines".to_string(),
                    "FieldValueInvalid",
                    "must be greater than or equal to 0".to_string(),
                ));
            }
            if limit.is_some_and(|l| l < 1) {
                errs.push((
                    "limitBytes".to_string(),
                    "FieldValueInvalid",
                    "must be greater than 0".to_string(),
                ));
            }
            if let Some(t) = since_time {
                if crate::util::parse_rfc3339(t).is_none() {
                    return Err(ApiError::bad_request(format!(
                        "invalid value {:?} for query parameter \"sinceTime\": not an RFC 3339 time",
                        t
                    )));
                }
            }
            if !errs.is_empty() {
                return Err(ApiError::invalid("PodLogOptions", "", "", &errs));
            }
            let container = validate_container(req.q("container").unwrap_or(""), &pod, name)?;
            if node_name.is_empty() {
                // Not scheduled yet: no location, an empty log.
                return Ok(KubeletCall::Log {
                    loc: None,
                    follow,
                    pod: name.to_string(),
                });
            }
            if follow {
                add("follow", "true".into());
            }
            if q_bool(req, "previous")? {
                add("previous", "true".into());
            }
            if q_bool(req, "timestamps")? {
                add("timestamps", "true".into());
            }
            if let Some(s) = since_seconds {
                add("sinceSeconds", s.to_string());
            }
            if let Some(t) = since_time {
                add("sinceTime", t.to_string());
            }
            if let Some(t) = tail {
                add("tailLines", t.to_string());
            }
            if let Some(l) = limit {
                add("limitBytes", l.to_string());
            }
            format!(
                "/containerLogs/{}/{}/{}",
                path_enc(ns),
                path_enc(name),
                path_enc(&container)
            )
        }
        "exec" | "attach" => {
            let container = validate_container(req.q("container").unwrap_or(""), &pod, name)?;
            if node_name.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "pod {} does not have a host assigned",
                    name
                )));
            }
            // PodExecOptions / PodAttachOptions -> core/v1 Exec*Param names.
            let (stdin, stdout, stderr, tty) = (
                q_bool(req, "stdin")?,
                q_bool(req, "stdout")?,
                q_bool(req, "stderr")?,
                q_bool(req, "tty")?,
            );
            if stdin {
                add("input", "1".into());
            }
            if stdout {
                add("output", "1".into());
            }
            if stderr {
                add("error", "1".into());
            }
            if tty {
                add("tty", "1".into());
            }
            if sub == "exec" {
                let cmd: Vec<&str> = req
                    .query
                    .iter()
                    .filter(|(k, _)| k == "command")
                    .map(|(_, v)| v.as_str())
                    .collect();
                if cmd.is_empty() {
                    return Err(ApiError::invalid(
                        "PodExecOptions",
                        "",
                        "",
                        &[(
                            "command".to_string(),
                            "FieldValueRequired",
                            "Required value".to_string(),
                        )],
                    ));
                }
                for c in cmd {
                    add("command", c.to_string());
                }
            }
            format!(
                "/{}/{}/{}/{}",
                sub,
                path_enc(ns),
                path_enc(name),
                path_enc(&container)
            )
        }
        "portforward" => {
            if node_name.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "pod {} does not have a host assigned",
                    name
                )));
            }
            for (k, v) in &req.query {
                if k == "ports" || k == "port" {
                    for p in v.split(',').filter(|p| !p.is_empty()) {
                        add("port", p.to_string());
                    }
                }
            }
            format!("/portForward/{}/{}", path_enc(ns), path_enc(name))
        }
        _ => return Err(ApiError::path_not_found()),
    };
    let (host, port) = node_endpoint(api, &node_name)?;
    let query: Vec<String> = params
        .iter()
        .map(|(k, v)| format!("{}={}", qenc(k), qenc(v)))
        .collect();
    let target = if query.is_empty() {
        path
    } else {
        format!("{}?{}", path, query.join("&"))
    };
    let loc = Location { host, port, target };
    Ok(if sub == "log" {
        KubeletCall::Log {
            loc: Some(loc),
            follow: q_bool(req, "follow")?,
            pod: name.to_string(),
        }
    } else {
        KubeletCall::Upgrade { loc }
    })
}

// ------------------------------------------------------------------ HTTP to the kubelet

/// (status, headers, bytes read past the head).
type Head = (u16, Vec<(String, String)>, Vec<u8>, Vec<u8>);

/// Reads a response head: (status, headers, raw head, bytes after it).
fn read_head<R: Read>(r: &mut R) -> io::Result<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = r.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the kubelet closed the connection before answering",
            ));
        }
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = from + i + 4;
            let extra = buf.split_off(end);
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(_)) => {}
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "malformed response head from the kubelet",
                    ))
                }
            }
            let code = resp.code.unwrap_or(0);
            let hs = resp
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).trim().to_string(),
                    )
                })
                .collect();
            return Ok((code, hs, buf, extra));
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "response head from the kubelet too large",
            ));
        }
    }
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// A response body: Content-Length, chunked, or up to EOF.
struct Body<R: Read> {
    r: R,
    pending: Vec<u8>,
    mode: BodyMode,
}

enum BodyMode {
    Length(usize),
    /// Bytes left in the current chunk (0: read a size line next).
    Chunked(usize),
    Eof,
    Done,
}

impl<R: Read> Body<R> {
    fn fill(&mut self) -> io::Result<bool> {
        let mut tmp = [0u8; 16 * 1024];
        let n = self.r.read(&mut tmp)?;
        self.pending.extend_from_slice(&tmp[..n]);
        Ok(n > 0)
    }

    /// The next piece of the body; Ok(None) at its end. A read timeout of
    /// the underlying stream comes back as an error that [`is_timeout`]
    /// recognises, without losing data.
    fn next(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            match self.mode {
                BodyMode::Done => return Ok(None),
                BodyMode::Length(0) => {
                    self.mode = BodyMode::Done;
                    return Ok(None);
                }
                BodyMode::Length(left) => {
                    if self.pending.is_empty() && !self.fill()? {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the kubelet's response body ended early",
                        ));
                    }
                    let n = left.min(self.pending.len());
                    let rest = self.pending.split_off(n);
                    self.mode = BodyMode::Length(left - n);
                    return Ok(Some(std::mem::replace(&mut self.pending, rest)));
                }
                BodyMode::Eof => {
                    if !self.pending.is_empty() {
                        return Ok(Some(std::mem::take(&mut self.pending)));
                    }
                    if !self.fill()? {
                        self.mode = BodyMode::Done;
                        return Ok(None);
                    }
                }
                BodyMode::Chunked(0) => {
                    let Some(i) = self.pending.windows(2).position(|w| w == b"\r\n") else {
                        if self.pending.len() > 4096 {
                            return Err(io::Error::new(
                                io::ErrorKind::InvalidData,
                                "chunk size line too long",
                            ));
                        }
                        if !self.fill()? {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the kubelet's chunked body ended early",
                            ));
                        }
                        continue;
                    };
                    let line = String::from_utf8_lossy(&self.pending[..i]).into_owned();
                    let size =
                        usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                            .map_err(|_| {
                                io::Error::new(io::ErrorKind::InvalidData, "bad chunk size")
                            })?;
                    self.pending.drain(..i + 2);
                    if size == 0 {
                        // Trailers are not needed: the body is complete.
                        self.mode = BodyMode::Done;
                        return Ok(None);
                    }
                    // +2 for the CRLF after the data.
                    self.mode = BodyMode::Chunked(size + 2);
                }
                BodyMode::Chunked(left) => {
                    if self.pending.is_empty() && !self.fill()? {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the kubelet's chunked body ended early",
                        ));
                    }
                    let n = left.min(self.pending.len());
                    let mut piece: Vec<u8> = self.pending.drain(..n).collect();
                    let left = left - n;
                    // Strip what belongs to the chunk's trailing CRLF.
                    let data_len = piece.len().saturating_sub(2usize.saturating_sub(left));
                    piece.truncate(data_len);
                    self.mode = BodyMode::Chunked(left);
                    if !piece.is_empty() {
                        return Ok(Some(piece));
                    }
                }
            }
        }
    }
}

/// Why a log request failed before any of the body went out.
pub enum LogError {
    Api(ApiError),
    /// The body was being streamed; the connection must close.
    Midstream(String),
}

/// GET the log from the kubelet and stream it to `w` as a chunked
/// text/plain response. Ok(status written) or the error to answer.
pub fn serve_log<W: Write>(
    client: &KubeletClient,
    loc: &Location,
    follow: bool,
    pod: &str,
    w: &mut W,
    alive: &dyn Fn() -> bool,
) -> Result<u16, LogError> {
    let dial_err =
        |e: io::Error| LogError::Api(ApiError::internal(&format!("Get \"{}\": {}", loc.url(), e)));
    let mut s = client.connect(loc).map_err(dial_err)?;
    let head = format!(
        "GET {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: apiserver-double\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n",
        loc.target, loc.host, loc.port
    );
    s.write_all(head.as_bytes()).map_err(dial_err)?;
    s.flush().map_err(dial_err)?;
    let (code, headers, _raw, extra) = read_head(&mut s).map_err(dial_err)?;
    let _ = s.sock.set_read_timeout(Some(TICK));
    let mode = if header(&headers, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        BodyMode::Chunked(0)
    } else if let Some(n) = header(&headers, "content-length").and_then(|v| v.parse().ok()) {
        BodyMode::Length(n)
    } else {
        BodyMode::Eof
    };
    let mut body = Body {
        r: s,
        pending: extra,
        mode,
    };
    if !(200..=206).contains(&code) {
        // upstream GenericHttpResponseChecker
        let mut text = Vec::new();
        let deadline = Instant::now() + HEAD_TIMEOUT;
        while text.len() < MAX_ERROR_BODY {
            match body.next() {
                Ok(Some(p)) => text.extend_from_slice(&p),
                Ok(None) => break,
                Err(e) if is_timeout(&e) && Instant::now() < deadline => {}
                Err(_) => break,
            }
        }
        text.truncate(MAX_ERROR_BODY);
        let text = String::from_utf8_lossy(&text).into_owned();
        let e = match code {
            500 => ApiError::internal(&text),
            400 => ApiError::bad_request(text),
            _ => {
                let mut e = ApiError::for_code(code, None);
                e.message = text;
                e.details = Some(serde_json::json!({"name": pod, "kind": "pods/log"}));
                e
            }
        };
        return Err(LogError::Api(e));
    }
    let h = vec![
        ("Content-Type".to_string(), "text/plain".to_string()),
        ("Cache-Control".to_string(), "no-cache, private".to_string()),
    ];
    crate::http::write_chunked_head(w, 200, &h).map_err(|e| LogError::Midstream(e.to_string()))?;
    let mut last = Instant::now();
    loop {
        match body.next() {
            Ok(Some(p)) => {
                last = Instant::now();
                crate::http::write_chunk(w, &p).map_err(|e| LogError::Midstream(e.to_string()))?;
            }
            Ok(None) => break,
            Err(e) if is_timeout(&e) => {
                if !alive() {
                    return Err(LogError::Midstream("the client went away".into()));
                }
                if !follow && last.elapsed() >= LOG_IDLE {
                    return Err(LogError::Midstream(format!(
                        "no data from the kubelet for {:?}",
                        LOG_IDLE
                    )));
                }
            }
            Err(e) => return Err(LogError::Midstream(e.to_string())),
        }
    }
    crate::http::end_chunks(w).map_err(|e| LogError::Midstream(e.to_string()))?;
    Ok(200)
}

// ------------------------------------------------------------------ upgrades

/// The kubelet accepted the upgrade: its connection and its 101 head (plus
/// any bytes that came right after it), to relay to the client.
pub struct Upgraded {
    kubelet: StreamOwned<ClientConnection, TcpStream>,
    head: Vec<u8>,
    /// The protocol the kubelet chose: Sec-WebSocket-Protocol (WebSocket)
    /// or X-Stream-Protocol-Version (SPDY), empty when it named none.
    pub protocol: String,
}

/// The protocols a client offers: every Sec-WebSocket-Protocol (comma
/// lists) and X-Stream-Protocol-Version header value.
pub fn offered_protocols(req: &Request) -> Vec<String> {
    req.headers
        .iter()
        .filter(|(k, _)| k == "sec-websocket-protocol" || k == "x-stream-protocol-version")
        .flat_map(|(_, v)| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

pub enum Dialed {
    Upgraded(Box<Upgraded>),
    /// The kubelet answered something else: passed back verbatim (status,
    /// raw head and as much body as arrived), then the connection closes.
    Response(u16, Vec<u8>),
}

/// Headers the apiserver does not pass on: Host is rewritten; credentials
/// were consumed by the apiserver's authentication filter.
const DROPPED: &[&str] = &[
    "host",
    "authorization",
    "proxy-authorization",
    "impersonate-user",
    "impersonate-group",
    "impersonate-uid",
    "x-forwarded-for",
];

/// True for `Connection: upgrade` + an `Upgrade` header (httpstream.IsUpgradeRequest).
pub fn is_upgrade_request(req: &Request) -> bool {
    req.headers.iter().any(|(k, v)| {
        k == "connection"
            && v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
    }) && req.header("upgrade").is_some_and(|v| !v.trim().is_empty())
}

/// Replays the upgrade request to the kubelet and reads its answer.
pub fn dial_upgrade(
    client: &KubeletClient,
    loc: &Location,
    req: &Request,
    peer: Option<SocketAddr>,
) -> io::Result<Dialed> {
    let mut s = client.connect(loc)?;
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {}:{}\r\n",
        req.method, loc.target, loc.host, loc.port
    );
    let mut forwarded = req.header("x-forwarded-for").map(String::from);
    for (k, v) in &req.headers {
        if DROPPED.contains(&k.as_str()) || k.contains(['\r', '\n']) || v.contains(['\r', '\n']) {
            continue;
        }
        // Bodies of upgrade requests are not replayed (there are none).
        if k == "content-length" || k == "transfer-encoding" {
            continue;
        }
        head.push_str(&format!("{}: {}\r\n", k, v));
    }
    if let Some(p) = peer {
        let ip = p.ip().to_string();
        forwarded = Some(match forwarded {
            Some(f) => format!("{}, {}", f, ip),
            None => ip,
        });
    }
    if let Some(f) = forwarded {
        head.push_str(&format!("X-Forwarded-For: {}\r\n", f));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.flush()?;
    let (code, headers, raw, extra) = read_head(&mut s)?;
    if code == 101 {
        let protocol = header(&headers, "sec-websocket-protocol")
            .or_else(|| header(&headers, "x-stream-protocol-version"))
            .unwrap_or("")
            .to_string();
        let mut head = raw;
        head.extend_from_slice(&extra);
        return Ok(Dialed::Upgraded(Box::new(Upgraded {
            kubelet: s,
            head,
            protocol,
        })));
    }
    // Echo the kubelet's answer (upstream tryUpgrade writes the raw response).
    let mut out = raw;
    let len = header(&headers, "content-length").and_then(|v| v.parse::<usize>().ok());
    let mut body = extra;
    let limit = len.unwrap_or(MAX_ERROR_BODY).min(MAX_ERROR_BODY);
    let mut chunk = [0u8; 8192];
    while body.len() < limit {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(_) => break,
        }
    }
    out.extend_from_slice(&body);
    Ok(Dialed::Response(code, out))
}

/// One TLS connection (either side) split into halves two threads can use:
/// the reader waits on the socket without the lock and takes it only to
/// feed ciphertext in and plaintext out; the writer takes it to encrypt and
/// send, so records are never interleaved.
struct TlsReader {
    conn: Arc<Mutex<Connection>>,
    sock: TcpStream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

struct TlsWriter {
    conn: Arc<Mutex<Connection>>,
    sock: TcpStream,
}

fn lock(c: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}

fn flush_tls(c: &mut Connection, mut sock: &TcpStream) -> io::Result<()> {
    while c.wants_write() {
        c.write_tls(&mut sock)?;
    }
    Ok(())
}

fn halves(conn: Connection, sock: TcpStream) -> io::Result<(TlsReader, TlsWriter, TcpStream)> {
    let conn = Arc::new(Mutex::new(conn));
    Ok((
        TlsReader {
            conn: conn.clone(),
            sock: sock.try_clone()?,
            buf: vec![0; 18 * 1024],
            start: 0,
            end: 0,
        },
        TlsWriter {
            conn,
            sock: sock.try_clone()?,
        },
        sock,
    ))
}

impl Read for TlsReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        loop {
            {
                let mut c = lock(&self.conn);
                match c.reader().read(out) {
                    // Ok(0) is the peer's close_notify.
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if self.start < self.end {
                    let mut slice = &self.buf[self.start..self.end];
                    let n = c.read_tls(&mut slice)?;
                    self.start = if n == 0 { self.end } else { self.start + n };
                    let processed = c.process_new_packets();
                    let flushed = flush_tls(&mut c, &self.sock);
                    processed.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                    flushed?;
                    continue;
                }
            }
            let n = self.sock.read(&mut self.buf)?;
            if n == 0 {
                return Ok(0);
            }
            self.start = 0;
            self.end = n;
        }
    }
}

impl Write for TlsWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let mut c = lock(&self.conn);
        let n = c.writer().write(data)?;
        flush_tls(&mut c, &self.sock)?;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        let mut c = lock(&self.conn);
        c.writer().flush()?;
        flush_tls(&mut c, &self.sock)
    }
}

impl Drop for TlsWriter {
    fn drop(&mut self) {
        let mut c = lock(&self.conn);
        c.send_close_notify();
        let _ = flush_tls(&mut c, &self.sock);
        let _ = self.sock.shutdown(Shutdown::Write);
    }
}

/// Last traffic either way, in ms since `start`.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn idle_for(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

fn pump(r: &mut dyn Read, w: &mut dyn Write, act: &Activity) -> io::Result<u64> {
    let mut buf = vec![0u8; COPY_BUF];
    let mut total = 0u64;
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                act.touch();
                w.write_all(&buf[..n])?;
                w.flush()?;
                total += n as u64;
                act.touch();
            }
            Err(e) if is_timeout(&e) => {
                if act.idle_for() >= STREAM_IDLE {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "stream idle timeout",
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes the kubelet's 101 to the client, passes on what the client had
/// already sent, then copies bytes both ways until either side ends. Blocks
/// the client's connection thread and uses one more thread for the
/// kubelet -> client direction. Returns (bytes up, bytes down).
pub fn relay(
    client: StreamOwned<ServerConnection, TcpStream>,
    client_buffered: &[u8],
    up: Upgraded,
) -> io::Result<(u64, u64)> {
    let StreamOwned { conn, sock } = client;
    let (mut client_r, mut client_w, client_sock) = halves(Connection::Server(conn), sock)?;
    let StreamOwned {
        conn: kconn,
        sock: ksock,
    } = up.kubelet;
    let (mut kube_r, mut kube_w, kube_sock) = halves(Connection::Client(kconn), ksock)?;
    for s in [&client_sock, &kube_sock] {
        s.set_read_timeout(Some(TICK))?;
        s.set_write_timeout(Some(HEAD_TIMEOUT))?;
    }
    client_w.write_all(&up.head)?;
    client_w.flush()?;
    if !client_buffered.is_empty() {
        kube_w.write_all(client_buffered)?;
        kube_w.flush()?;
    }
    let act = Arc::new(Activity {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
    });
    let act2 = act.clone();
    let client_sock2 = client_sock.try_clone()?;
    let down = std::thread::Builder::new()
        .name("kubelet-proxy".into())
        .spawn(move || {
            let r = pump(&mut kube_r, &mut client_w, &act2);
            // close_notify to the client, then wake the other direction.
            drop(client_w);
            let _ = client_sock2.shutdown(Shutdown::Read);
            r
        })?;
    let upr = pump(&mut client_r, &mut kube_w, &act);
    // The client is done sending: pass the half-close on and let the kubelet
    // finish; on errors end everything now.
    if upr.is_ok() {
        drop(kube_w);
    } else {
        let _ = kube_sock.shutdown(Shutdown::Both);
    }
    let downr = down
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("kubelet-proxy thread panicked")));
    let _ = kube_sock.shutdown(Shutdown::Both);
    let _ = client_sock.shutdown(Shutdown::Both);
    Ok((upr.unwrap_or(0), downr?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_escape_like_go() {
        assert_eq!(qenc("sh -c 'echo hi'"), "sh+-c+%27echo+hi%27");
        assert_eq!(qenc("a&b=c/d"), "a%26b%3Dc%2Fd");
        assert_eq!(path_enc("a b"), "a%20b");
    }

    #[test]
    fn chunked_body_across_reads() {
        let raw = b"5\r\nhello\r\n3\r\n, w\r\n0\r\n\r\n".to_vec();
        // Feed one byte at a time to cross every boundary.
        struct OneByte(Vec<u8>, usize);
        impl Read for OneByte {
            fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                if self.1 >= self.0.len() {
                    return Ok(0);
                }
                b[0] = self.0[self.1];
                self.1 += 1;
                Ok(1)
            }
        }
        let mut body = Body {
            r: OneByte(raw, 0),
            pending: Vec::new(),
            mode: BodyMode::Chunked(0),
        };
        let mut out = Vec::new();
        while let Some(p) = body.next().unwrap() {
            out.extend(p);
        }
        assert_eq!(out, b"hello, w");
        let mut len = Body {
            r: io::Cursor::new(b"abcdef".to_vec()),
            pending: b"12".to_vec(),
            mode: BodyMode::Length(5),
        };
        let mut out = Vec::new();
        while let Some(p) = len.next().unwrap() {
            out.extend(p);
        }
        assert_eq!(out, b"12abc");
    }

    fn api_with(objs: &[(&'static str, Value)]) -> Api {
        let api = Api {
            store: crate::store::Store::new(100, None),
            bookmark_interval: Duration::from_secs(60),
            min_request_timeout: 1800,
            ca_pem: String::new(),
            server_url: Mutex::new(String::new()),
            node_restriction: false,
            node_authorizer: false,
            token_log: Default::default(),
        };
        for (k, o) in objs {
            api.store.lock().put(k, o.clone());
        }
        api
    }

    fn req(method: &str, path: &str, query: &[(&str, &str)]) -> (Request, Route) {
        let r = Request {
            method: method.into(),
            path: path.into(),
            query: query
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        };
        let (t, _) = crate::handlers::classify(&r);
        let crate::handlers::Target::Res(route, _) = t else {
            panic!("{path} is not a resource path")
        };
        (r, route)
    }

    #[test]
    fn locations_as_upstream() {
        let node = serde_json::json!({"metadata": {"name": "n1"}, "status": {
            "addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "10.0.0.5"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 12250}}}});
        let pod = serde_json::json!({"metadata": {"name": "p", "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}});
        let unbound = serde_json::json!({"metadata": {"name": "u", "namespace": "default"},
            "spec": {"containers": [{"name": "c"}]}});
        let api = api_with(&[("nodes", node), ("pods", pod), ("pods", unbound)]);
        let call = |method: &str, path: &str, q: &[(&str, &str)], sub: &str| {
            let (r, route) = req(method, path, q);
            pod_call(&api, &route, &r, sub)
        };
        let l = call(
            "GET",
            "/api/v1/namespaces/default/pods/p/log",
            &[
                ("follow", "true"),
                ("tailLines", "5"),
                ("timestamps", "false"),
            ],
            "log",
        )
        .unwrap();
        assert_eq!(
            l,
            KubeletCall::Log {
                loc: Some(Location {
                    host: "10.0.0.5".into(),
                    port: 12250,
                    target: "/containerLogs/default/p/c?follow=true&tailLines=5".into()
                }),
                follow: true,
                pod: "p".into()
            }
        );
        let KubeletCall::Upgrade { loc } = call(
            "POST",
            "/api/v1/namespaces/default/pods/p/exec",
            &[
                ("command", "sh"),
                ("command", "-c"),
                ("command", "echo a b"),
                ("stdin", "true"),
                ("stdout", "true"),
            ],
            "exec",
        )
        .unwrap() else {
            panic!("exec is an upgrade")
        };
        assert_eq!(
            loc.url(),
            "https://10.0.0.5:12250/exec/default/p/c?input=1&output=1&command=sh&command=-c&command=echo+a+b"
        );
        let KubeletCall::Upgrade { loc } = call(
            "GET",
            "/api/v1/namespaces/default/pods/p/portforward",
            &[("ports", "80,8080")],
            "portforward",
        )
        .unwrap() else {
            panic!("portforward is an upgrade")
        };
        assert_eq!(loc.target, "/portForward/default/p?port=80&port=8080");
        // Unbound pods: an empty log, a 400 for exec.
        assert_eq!(
            call("GET", "/api/v1/namespaces/default/pods/u/log", &[], "log").unwrap(),
            KubeletCall::Log {
                loc: None,
                follow: false,
                pod: "u".into()
            }
        );
        let e = call(
            "POST",
            "/api/v1/namespaces/default/pods/u/exec",
            &[("command", "x")],
            "exec",
        )
        .unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "pod u does not have a host assigned")
        );
        // Log options are validated; exec needs a command; log is GET only.
        let e = call(
            "GET",
            "/api/v1/namespaces/default/pods/p/log",
            &[("sinceSeconds", "5"), ("sinceTime", "2024-01-01T00:00:00Z")],
            "log",
        )
        .unwrap_err();
        assert_eq!(e.code, 422, "{}", e.message);
        let e = call(
            "GET",
            "/api/v1/namespaces/default/pods/p/log",
            &[("tailLines", "x")],
            "log",
        )
        .unwrap_err();
        assert_eq!(e.code, 400);
        let e = call(
            "POST",
            "/api/v1/namespaces/default/pods/p/exec",
            &[],
            "exec",
        )
        .unwrap_err();
        assert_eq!(e.code, 422);
        let e = call("POST", "/api/v1/namespaces/default/pods/p/log", &[], "log").unwrap_err();
        assert_eq!(e.code, 405);
        let e = call(
            "GET",
            "/api/v1/namespaces/default/pods/nope/log",
            &[],
            "log",
        )
        .unwrap_err();
        assert_eq!(e.code, 404);
    }

    #[test]
    fn container_defaulting() {
        let pod = serde_json::json!({"spec": {"containers": [{"name": "a"}], "initContainers": [{"name": "i"}]}});
        assert_eq!(validate_container("", &pod, "p").unwrap(), "a");
        assert_eq!(validate_container("i", &pod, "p").unwrap(), "i");
        let e = validate_container("x", &pod, "p").unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(e.message, "container x is not valid for pod p");
        let two = serde_json::json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let e = validate_container("", &two, "p").unwrap_err();
        assert_eq!(
            e.message,
            "a container name must be specified for pod p, choose one of: [a b]"
        );
    }
}
