//! exec, attach and portforward: the upgrade request replayed to the
//! kubelet and, once it answers 101, both connections joined byte for
//! byte (apimachinery's UpgradeAwareHandler before 1.30).

use super::{header, is_timeout, read_head, KubeletClient, Location};
use super::{COPY_BUF, HEAD_TIMEOUT, MAX_ERROR_BODY, STREAM_IDLE, TICK};
use crate::http::Request;
use rkubelet_util::lock;
use rustls::{ClientConnection, Connection, ServerConnection, StreamOwned};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
