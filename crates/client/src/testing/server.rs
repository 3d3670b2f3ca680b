//! A tiny HTTP/1.1 server on 127.0.0.1: records every request and answers
//! from a handler; optional TLS with client certificates.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rkubelet_util::lock;

#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    /// Path and query.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// A TLS client certificate was presented.
    pub client_cert: bool,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without its query.
    pub fn path_only(&self) -> &str {
        self.path
            .split_once('?')
            .map_or(self.path.as_str(), |(p, _)| p)
    }

    /// The body as JSON; panics on another body, a test's own mistake.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }

    /// The value of one query parameter (raw, not decoded).
    pub fn query(&self, key: &str) -> Option<&str> {
        let q = self.path.split_once('?')?.1;
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

pub enum Reply {
    /// A complete response with Content-Length.
    Full {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// A chunked response: each chunk after its delay; then the terminating
    /// chunk unless `truncate`; the connection is held open `hold` first.
    Chunks {
        chunks: Vec<(Duration, Vec<u8>)>,
        hold: Duration,
        truncate: bool,
    },
    /// A chunked response fed by a channel: each `Some` a chunk, `None` an
    /// abrupt end (no terminating chunk); once every sender is gone, the
    /// terminating chunk. `on_end` runs when the stream ends, however.
    Stream {
        chunks: Receiver<Option<Vec<u8>>>,
        on_end: Box<dyn FnOnce() + Send>,
    },
    /// Close the connection without answering.
    Close,
}

impl Reply {
    pub fn json(status: u16, body: &serde_json::Value) -> Reply {
        Reply::Full {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string().into_bytes(),
        }
    }

    pub fn status(status: u16, reason: &str, message: &str) -> Reply {
        let body = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "reason": reason, "message": message, "code": status,
        });
        Reply::json(status, &body)
    }

    /// Watch events, one chunk each, then the end of the stream.
    pub fn events(lines: &[serde_json::Value]) -> Reply {
        let chunks = lines
            .iter()
            .map(|l| (Duration::ZERO, format!("{l}\n").into_bytes()))
            .collect();
        Reply::Chunks {
            chunks,
            hold: Duration::ZERO,
            truncate: false,
        }
    }
}

type Handler = dyn Fn(&Recorded) -> Reply + Send + Sync;

pub struct TestServer {
    pub url: String,
    requests: Arc<Mutex<Vec<Recorded>>>,
    stop: Arc<AtomicBool>,
    closed: Arc<AtomicUsize>,
    addr: std::net::SocketAddr,
}

impl TestServer {
    pub fn start(handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> TestServer {
        Self::start_inner(Arc::new(handler), None)
    }

    pub fn start_tls(
        tls: Arc<rustls::ServerConfig>,
        handler: impl Fn(&Recorded) -> Reply + Send + Sync + 'static,
    ) -> TestServer {
        Self::start_inner(Arc::new(handler), Some(tls))
    }

    fn start_inner(handler: Arc<Handler>, tls: Option<Arc<rustls::ServerConfig>>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let server = TestServer {
            url: format!("{scheme}://{addr}"),
            requests: Arc::default(),
            stop: Arc::default(),
            closed: Arc::default(),
            addr,
        };
        let (requests, stop) = (server.requests.clone(), server.stop.clone());
        let closed = server.closed.clone();
        thread::spawn(move || {
            for conn in listener.incoming() {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let ctx = Conn {
                    handler: handler.clone(),
                    requests: requests.clone(),
                    stop: stop.clone(),
                    closed: closed.clone(),
                };
                let tls = tls.clone();
                thread::spawn(move || ctx.serve(conn, tls));
            }
        });
        server
    }

    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.requests).clone()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `"METHOD path"` of every request so far, without queries.
    pub fn calls(&self) -> Vec<String> {
        self.requests()
            .iter()
            .map(|r| format!("{} {}", r.method, r.path_only()))
            .collect()
    }

    /// Waits until `pred` holds for the requests so far; whether it did.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&[Recorded]) -> bool) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if pred(&self.requests()) {
                return true;
            }
            thread::sleep(Duration::from_millis(10));
        }
        pred(&self.requests())
    }

    /// Held streams whose client went away.
    pub fn closed_streams(&self) -> usize {
        self.closed.load(Ordering::SeqCst)
    }

    pub fn count(&self, pred: impl Fn(&Recorded) -> bool) -> usize {
        self.requests().iter().filter(|r| pred(r)).count()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wake the accept loop
    }
}

struct Conn {
    handler: Arc<Handler>,
    requests: Arc<Mutex<Vec<Recorded>>>,
    stop: Arc<AtomicBool>,
    closed: Arc<AtomicUsize>,
}

impl Conn {
    fn serve(self, tcp: TcpStream, tls: Option<Arc<rustls::ServerConfig>>) {
        let _ = tcp.set_read_timeout(Some(Duration::from_secs(20)));
        match tls {
            None => self.serve_stream(tcp, false),
            Some(cfg) => {
                let Ok(mut conn) = rustls::ServerConnection::new(cfg) else {
                    return;
                };
                let mut tcp = tcp;
                while conn.is_handshaking() {
                    if conn.complete_io(&mut tcp).is_err() {
                        return;
                    }
                }
                let client_cert = conn.peer_certificates().is_some_and(|c| !c.is_empty());
                self.serve_stream(rustls::StreamOwned::new(conn, tcp), client_cert);
            }
        }
    }

    /// Requests on one keep-alive connection until EOF or a Close/Chunks reply.
    fn serve_stream<S: Read + Write>(self, stream: S, client_cert: bool) {
        let mut reader = BufReader::new(stream);
        while let Some(mut req) = read_request(&mut reader) {
            req.client_cert = client_cert;
            lock(&self.requests).push(req.clone());
            let reply = (self.handler)(&req);
            let w = reader.get_mut();
            match reply {
                Reply::Full {
                    status,
                    headers,
                    body,
                } => {
                    if write_full(w, status, &headers, &body).is_err() {
                        return;
                    }
                }
                Reply::Chunks {
                    chunks,
                    hold,
                    truncate,
                } => {
                    self.write_chunks(w, chunks, hold, truncate);
                    return;
                }
                Reply::Stream { chunks, on_end } => {
                    self.write_stream(w, &chunks);
                    on_end();
                    return;
                }
                Reply::Close => return,
            }
        }
    }

    fn write_chunks<W: Write>(
        &self,
        w: &mut W,
        chunks: Vec<(Duration, Vec<u8>)>,
        hold: Duration,
        truncate: bool,
    ) {
        if write_chunked_head(w).is_err() {
            return;
        }
        for (delay, data) in chunks {
            thread::sleep(delay);
            if write_chunk(w, &data).is_err() {
                return;
            }
        }
        let until = Instant::now() + hold;
        while Instant::now() < until && !self.stop.load(Ordering::SeqCst) {
            thread::sleep(KEEPALIVE);
            if !self.keepalive(w) {
                return;
            }
        }
        if !truncate {
            let _ = write_last_chunk(w);
        }
    }

    fn write_stream<W: Write>(&self, w: &mut W, chunks: &Receiver<Option<Vec<u8>>>) {
        if write_chunked_head(w).is_err() {
            return;
        }
        while !self.stop.load(Ordering::SeqCst) {
            match chunks.recv_timeout(KEEPALIVE) {
                Ok(Some(data)) => {
                    if write_chunk(w, &data).is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(RecvTimeoutError::Timeout) => {
                    if !self.keepalive(w) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = write_last_chunk(w);
                    return;
                }
            }
        }
    }

    /// While a stream is held, a blank-line chunk (watch readers skip blank
    /// lines) notices a client that has gone away: false then.
    fn keepalive<W: Write>(&self, w: &mut W) -> bool {
        if write_chunk(w, b"\n").is_err() {
            self.closed.fetch_add(1, Ordering::SeqCst);
            return false;
        }
        true
    }
}

/// How often a held stream checks that its client is still there.
const KEEPALIVE: Duration = Duration::from_millis(100);

fn write_chunked_head<W: Write>(w: &mut W) -> std::io::Result<()> {
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    w.write_all(head.as_bytes())?;
    w.flush()
}

fn write_chunk<W: Write>(w: &mut W, data: &[u8]) -> std::io::Result<()> {
    let mut chunk = format!("{:x}\r\n", data.len()).into_bytes();
    chunk.extend_from_slice(data);
    chunk.extend_from_slice(b"\r\n");
    w.write_all(&chunk)?;
    w.flush()
}

fn write_last_chunk<W: Write>(w: &mut W) -> std::io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

fn read_request<R: BufRead>(r: &mut R) -> Option<Recorded> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        r.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':')?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let len = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Recorded {
        method,
        path,
        headers,
        body,
        client_cert: false,
    })
}

fn write_full<W: Write>(
    w: &mut W,
    status: u16,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())?;
    w.write_all(body)?;
    w.flush()
}
