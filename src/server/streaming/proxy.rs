//! A byte-level upgrade-aware reverse proxy (upstream proxyStream ->
//! UpgradeAwareHandler with upgradeRequired): the client's request is
//! replayed to the runtime's stream-server URL (request line rewritten to the
//! URL's path, Host rewritten, X-Forwarded-For appended), the runtime's
//! `101 Switching Protocols` head is relayed back, and from then on bytes are
//! copied both ways, one thread per direction, whatever the protocol on top
//! (SPDY/3.1 or WebSocket channel.k8s.io). A non-101 answer is passed back
//! to the client as an ordinary response.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::{ClientStream, Halves};

/// Largest response head we accept from the runtime.
const MAX_HEAD: usize = 64 * 1024;
/// Largest non-101 body we pass back.
const MAX_ERROR_BODY: usize = 1024 * 1024;
/// How often a blocked read wakes to check the idle deadline.
const IDLE_TICK: Duration = Duration::from_secs(15);
const COPY_BUF: usize = 32 * 1024;

/// Headers never forwarded to the runtime: Host is rewritten; credentials
/// meant for the kubelet stay with the kubelet.
const DROPPED_HEADERS: &[&str] = &["host", "authorization", "proxy-authorization"];

/// `http://host:port/path?query` of the runtime's stream server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamUrl {
    pub host: String,
    pub port: u16,
    /// Path plus `?query`, as it goes on the request line.
    pub request_target: String,
}

impl StreamUrl {
    pub fn parse(url: &str) -> Result<StreamUrl, String> {
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some((scheme, _)) => {
                return Err(format!(
                    "unsupported stream URL scheme {scheme:?} in {url:?}"
                ))
            }
            None => return Err(format!("stream URL {url:?} has no scheme")),
        };
        let (authority, target) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let target = if target.starts_with('?') {
            format!("/{target}")
        } else {
            target.to_string()
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("bad host in stream URL {url:?}"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p
                    .parse()
                    .map_err(|_| format!("bad port in stream URL {url:?}"))?,
                None => 80,
            };
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_string(),
                    p.parse()
                        .map_err(|_| format!("bad port in stream URL {url:?}"))?,
                ),
                None => (authority.to_string(), 80),
            }
        };
        if host.is_empty() {
            return Err(format!("stream URL {url:?} has no host"));
        }
        Ok(StreamUrl {
            host,
            port,
            request_target: target,
        })
    }

    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// What the client sent (the parts the proxy replays).
pub struct ClientRequest<'a> {
    pub method: &'a str,
    pub headers: &'a [(String, String)],
    pub remote_addr: Option<SocketAddr>,
}

/// The runtime's answer to the replayed request.
pub enum BackendReply {
    /// 101: the backend connection, and the head (plus any bytes the runtime
    /// sent right after it) to write to the client before relaying.
    Upgraded { backend: TcpStream, head: Vec<u8> },
    /// Anything else, to pass back as an ordinary response.
    Response {
        status: u16,
        content_type: String,
        body: Vec<u8>,
    },
}

/// Connects to the runtime, replays the request, reads the response head.
pub fn dial_backend(
    url: &StreamUrl,
    req: &ClientRequest<'_>,
    connect_timeout: Duration,
) -> io::Result<BackendReply> {
    let addrs: Vec<SocketAddr> = (url.host.as_str(), url.port).to_socket_addrs()?.collect();
    let mut last_err = io::Error::new(io::ErrorKind::NotFound, "no address for stream URL host");
    let mut backend = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, connect_timeout) {
            Ok(s) => {
                backend = Some(s);
                break;
            }
            Err(e) => last_err = e,
        }
    }
    let mut backend = backend.ok_or(last_err)?;
    backend.set_nodelay(true)?;
    backend.set_read_timeout(Some(connect_timeout))?;
    backend.set_write_timeout(Some(connect_timeout))?;

    backend.write_all(&request_head(url, req))?;
    backend.flush()?;

    let (head, extra) = read_head(&mut backend)?;
    let (status, headers) = parse_head(&head)?;
    if status == 101 {
        let mut all = head;
        all.extend_from_slice(&extra);
        return Ok(BackendReply::Upgraded { backend, head: all });
    }
    // Echo the runtime's error, bounded.
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok());
    let mut body = extra;
    let limit = len.unwrap_or(MAX_ERROR_BODY).min(MAX_ERROR_BODY);
    let mut chunk = [0u8; 8192];
    while body.len() < limit {
        match backend.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
            Err(_) => break,
        }
    }
    body.truncate(limit);
    let content_type = headers
        .into_iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v)
        .unwrap_or_else(|| "text/plain; charset=utf-8".to_string());
    Ok(BackendReply::Response {
        status,
        content_type,
        body,
    })
}

fn request_head(url: &StreamUrl, req: &ClientRequest<'_>) -> Vec<u8> {
    let mut h = format!("{} {} HTTP/1.1\r\n", req.method, url.request_target);
    h.push_str(&format!("Host: {}\r\n", url.host_header()));
    let mut forwarded_for: Option<String> = None;
    for (k, v) in req.headers {
        let lk = k.to_ascii_lowercase();
        if DROPPED_HEADERS.contains(&lk.as_str())
            || k.contains(['\r', '\n'])
            || v.contains(['\r', '\n'])
        {
            continue;
        }
        if lk == "x-forwarded-for" {
            forwarded_for = Some(v.clone());
            continue;
        }
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(addr) = req.remote_addr {
        let ip = addr.ip().to_string();
        forwarded_for = Some(match forwarded_for {
            Some(prev) => format!("{prev}, {ip}"),
            None => ip,
        });
    }
    if let Some(ff) = forwarded_for {
        h.push_str(&format!("X-Forwarded-For: {ff}\r\n"));
    }
    h.push_str("\r\n");
    h.into_bytes()
}

/// Reads up to the blank line; returns (head incl. CRLFCRLF, bytes after it).
fn read_head(s: &mut TcpStream) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "stream server closed the connection before responding",
            ));
        }
        let scan_from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf[scan_from..].windows(4).position(|w| w == b"\r\n\r\n") {
            let end = scan_from + i + 4;
            let extra = buf.split_off(end);
            return Ok((buf, extra));
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "stream server response head too large",
            ));
        }
    }
}

fn parse_head(head: &[u8]) -> io::Result<(u16, Vec<(String, String)>)> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let status = parts.next().and_then(|s| s.parse::<u16>().ok());
    let status = match status {
        Some(s) if version.starts_with("HTTP/1.") => s,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad status line from stream server: {status_line:?}"),
            ))
        }
    };
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Ok((status, headers))
}

/// Last traffic in either direction, as ms since `start`.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
}

impl Activity {
    fn touch(&self) {
        let ms = self.start.elapsed().as_millis() as u64;
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// Copies until EOF, an error, or `idle` without traffic either way.
fn pump(
    r: &mut dyn Read,
    w: &mut dyn Write,
    activity: &Activity,
    idle: Duration,
) -> io::Result<()> {
    let mut buf = vec![0u8; COPY_BUF];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                activity.touch();
                w.write_all(&buf[..n])?;
                w.flush()?;
                activity.touch();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if activity.idle_for() >= idle {
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

/// Writes the 101 head to the client, forwards what the client had already
/// sent, then copies both ways until the runtime closes, an error, or the
/// stream idles for `idle`. Blocks the calling thread (the client's connection thread)
/// and uses one more for the runtime -> client direction.
pub fn relay(
    client: Box<dyn ClientStream>,
    client_buffered: &[u8],
    backend: TcpStream,
    head: &[u8],
    idle: Duration,
) -> io::Result<()> {
    let Halves {
        reader: mut client_r,
        writer: mut client_w,
        socket: client_sock,
    } = client.into_halves()?;
    let tick = Some(IDLE_TICK.min(idle).max(Duration::from_millis(10)));
    client_sock.set_nodelay(true)?;
    client_sock.set_read_timeout(tick)?;
    client_sock.set_write_timeout(Some(idle))?;
    backend.set_read_timeout(tick)?;
    backend.set_write_timeout(Some(idle))?;

    client_w.write_all(head)?;
    client_w.flush()?;
    let mut backend_w = backend.try_clone()?;
    if !client_buffered.is_empty() {
        backend_w.write_all(client_buffered)?;
    }
    let mut backend_r = backend.try_clone()?;

    let activity = Arc::new(Activity {
        start: Instant::now(),
        last_ms: AtomicU64::new(0),
    });
    let act = Arc::clone(&activity);
    let client_sock2 = client_sock.try_clone()?;
    let down = crate::util::worker::spawn_helper("stream-proxy", move || {
        let r = pump(&mut backend_r, &mut *client_w, &act, idle);
        // Dropping the writer sends a TLS close_notify where there is one;
        // then wake the client -> runtime direction.
        drop(client_w);
        let _ = client_sock2.shutdown(Shutdown::Read);
        r
    })?;
    let up = pump(&mut *client_r, &mut backend_w, &activity, idle);
    // The client finished sending: pass the half-close on and let the
    // runtime finish (it closes on EOF); on errors close everything now.
    // (Upstream closes both at once; the half-close loses no trailing
    // output.)
    let _ = backend.shutdown(if up.is_ok() {
        Shutdown::Write
    } else {
        Shutdown::Both
    });
    let down = down
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("stream-proxy thread panicked")));
    let _ = backend.shutdown(Shutdown::Both);
    let _ = client_sock.shutdown(Shutdown::Both);
    match (up, down) {
        (Err(e), _) | (_, Err(e)) if e.kind() == io::ErrorKind::TimedOut => Err(e),
        _ => Ok(()),
    }
}
