//! HTTP/1.1 over a TCP or TLS stream: request heads parsed with httparse
//! under a deadline and size limits, bodies read whole (bounded), responses
//! with Content-Length, chunked streaming, or a hand-over of the raw stream.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::{ServerConnection, StreamOwned};

use super::auth::UserInfo;

/// Connection and request limits.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Concurrent connections per port; more are answered 503 and closed.
    pub max_connections: usize,
    /// Request line + headers, in bytes (431 beyond).
    pub max_head: usize,
    pub max_headers: usize,
    /// Request body, in bytes (413 beyond).
    pub max_body: usize,
    /// From accept (TLS handshake included) or from a request's first byte
    /// to the end of its headers.
    pub header_timeout: Duration,
    /// Keep-alive wait for the next request.
    pub idle_timeout: Duration,
    /// To read a whole request body.
    pub body_timeout: Duration,
    /// One blocked write to a client that does not read.
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 128,
            max_head: 64 << 10,
            max_headers: 100,
            max_body: 1 << 20,
            header_timeout: Duration::from_secs(10),
            // Go's http.Server IdleTimeout as the kubelet sets it.
            idle_timeout: Duration::from_secs(90),
            body_timeout: Duration::from_secs(30),
            write_timeout: Duration::from_secs(60),
        }
    }
}

/// A TCP socket whose reads fail once a deadline passes, however slowly the
/// peer trickles bytes (a per-read timeout alone would not bound that).
pub struct Sock {
    tcp: TcpStream,
    deadline: Option<Instant>,
}

impl Sock {
    pub(crate) fn new(tcp: TcpStream, deadline: Option<Instant>) -> Sock {
        Sock { tcp, deadline }
    }

    /// Sets (or with None clears) the read deadline.
    pub fn set_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.deadline = deadline;
        if deadline.is_none() {
            self.tcp.set_read_timeout(None)?;
        }
        Ok(())
    }

    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// The socket without a read timeout.
    fn into_tcp(self) -> io::Result<TcpStream> {
        self.tcp.set_read_timeout(None)?;
        Ok(self.tcp)
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "read deadline exceeded",
                ));
            }
            self.tcp.set_read_timeout(Some(left))?;
        }
        self.tcp.read(buf)
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tcp.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.tcp.flush()
    }
}

/// A connection's byte stream, plain or TLS.
pub enum Transport {
    Plain(Sock),
    Tls(Box<StreamOwned<ServerConnection, Sock>>),
}

impl Transport {
    pub fn sock(&self) -> &Sock {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &t.sock,
        }
    }

    pub fn sock_mut(&mut self) -> &mut Sock {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &mut t.sock,
        }
    }

    /// Ends our side: TLS close_notify, then a TCP half-close.
    pub(crate) fn close_write(&mut self) {
        if let Transport::Tls(t) = self {
            t.conn.send_close_notify();
            let _ = t.flush();
        }
        let _ = self.sock().tcp.shutdown(std::net::Shutdown::Write);
    }
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(t) => t.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(t) => t.flush(),
        }
    }
}

/// A connection handed to a handler (SPDY/WebSocket upgrades): the socket,
/// or the TLS session over it, with no deadlines left on it.
pub enum RawStream {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl RawStream {
    /// The underlying socket: timeouts, shutdown, peer address, try_clone.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            RawStream::Plain(t) => t,
            RawStream::Tls(s) => &s.sock,
        }
    }

    fn from_transport(io: Transport) -> io::Result<RawStream> {
        Ok(match io {
            Transport::Plain(s) => RawStream::Plain(s.into_tcp()?),
            Transport::Tls(t) => {
                let StreamOwned { conn, sock } = *t;
                RawStream::Tls(Box::new(StreamOwned::new(conn, sock.into_tcp()?)))
            }
        })
    }
}

impl Read for RawStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            RawStream::Plain(t) => t.read(buf),
            RawStream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for RawStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            RawStream::Plain(t) => t.write(buf),
            RawStream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            RawStream::Plain(t) => t.flush(),
            RawStream::Tls(s) => s.flush(),
        }
    }
}

/// The stream taken over by a handler, and bytes the client sent after the
/// request head that were already read from it (consume these first).
pub struct Upgraded {
    pub stream: RawStream,
    pub buffered: Vec<u8>,
}

/// True once the peer has closed or reset its side of `tcp`.
pub(crate) fn peer_hung_up(tcp: &TcpStream) -> bool {
    let mut pfd = libc::pollfd {
        fd: tcp.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd for a file descriptor that `tcp` keeps open; zero timeout.
    let n = unsafe { libc::poll(&mut pfd, 1, 0) };
    n > 0 && pfd.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Tells a long-running handler to stop: the server is shutting down or the
/// client went away. Cheap to check; clone it into other threads.
#[derive(Clone)]
pub struct CancelToken {
    stopping: Arc<AtomicBool>,
    tcp: Option<Arc<TcpStream>>,
}

impl CancelToken {
    pub fn is_cancelled(&self) -> bool {
        self.stopping.load(Ordering::Relaxed) || self.tcp.as_deref().is_some_and(peer_hung_up)
    }
}

#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer closed, or stayed idle, before a request started.
    Closed,
    /// The head or body did not arrive in time: 408, close.
    TimedOut,
    Io(io::Error),
    /// Malformed request: 400, close.
    Bad(String),
    /// Headers over the limit: 431, close.
    HeadTooLarge,
    /// Body over the limit: 413, close.
    BodyTooLarge,
}

fn io_to_read_error(e: io::Error) -> ReadError {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ReadError::TimedOut,
        _ => ReadError::Io(e),
    }
}

/// A parsed request head.
#[derive(Debug)]
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    pub http10: bool,
    pub headers: Vec<(String, String)>,
    pub content_length: Option<usize>,
    pub chunked: bool,
}

impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }
}

fn header_value<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// A connection: its stream (None once a handler took it) and read-ahead bytes.
pub(crate) struct Conn {
    pub io: Option<Transport>,
    pub buf: Vec<u8>,
    pub peer: Option<SocketAddr>,
}

fn taken() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "connection handed to a handler",
    )
}

impl Conn {
    pub fn new(io: Transport, peer: Option<SocketAddr>) -> Conn {
        Conn {
            io: Some(io),
            buf: Vec::with_capacity(4096),
            peer,
        }
    }

    fn io(&mut self) -> io::Result<&mut Transport> {
        self.io.as_mut().ok_or_else(taken)
    }

    fn set_deadline(&mut self, deadline: Option<Instant>) -> io::Result<()> {
        self.io()?.sock_mut().set_deadline(deadline)
    }

    /// Reads more bytes into the buffer; Ok(0) at end of stream.
    fn fill(&mut self) -> io::Result<usize> {
        let mut tmp = [0u8; 8192];
        let n = match self.io()?.read(&mut tmp) {
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            r => r?,
        };
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(n)
    }

    /// Reads a request head. `deadline` bounds the whole head (the first
    /// request: from accept); without one the first byte may take
    /// `idle_timeout` and the rest `header_timeout` after it.
    pub fn read_head(
        &mut self,
        deadline: Option<Instant>,
        limits: &Limits,
    ) -> Result<Head, ReadError> {
        let started = !self.buf.is_empty();
        let first = deadline.unwrap_or_else(|| Instant::now() + limits.idle_timeout);
        self.set_deadline(Some(first)).map_err(ReadError::Io)?;
        if !started {
            match self.fill() {
                Ok(0) => return Err(ReadError::Closed),
                Ok(_) => {}
                Err(e) if is_timeout(&e) || is_disconnect(&e) => return Err(ReadError::Closed),
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
        if deadline.is_none() {
            let head_deadline = Instant::now() + limits.header_timeout;
            self.set_deadline(Some(head_deadline))
                .map_err(ReadError::Io)?;
        }
        loop {
            if let Some((head, n)) = parse_head(&self.buf, limits)? {
                self.buf.drain(..n);
                return Ok(head);
            }
            if self.buf.len() > limits.max_head {
                return Err(ReadError::HeadTooLarge);
            }
            match self.fill() {
                Ok(0) => return Err(ReadError::Bad("connection closed mid-request".into())),
                Ok(_) => {}
                Err(e) => return Err(io_to_read_error(e)),
            }
        }
    }

    /// Reads the body `head` announces, whole and bounded.
    pub fn read_body(&mut self, head: &Head, limits: &Limits) -> Result<Vec<u8>, ReadError> {
        if !head.chunked && head.content_length.unwrap_or(0) == 0 {
            return Ok(Vec::new());
        }
        if head.content_length.is_some_and(|n| n > limits.max_body) {
            return Err(ReadError::BodyTooLarge);
        }
        if head
            .header("expect")
            .is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
        {
            let io = self.io().map_err(ReadError::Io)?;
            io.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
                .map_err(ReadError::Io)?;
            io.flush().map_err(ReadError::Io)?;
        }
        self.set_deadline(Some(Instant::now() + limits.body_timeout))
            .map_err(ReadError::Io)?;
        match head.content_length {
            Some(n) if !head.chunked => self.take(n),
            _ => self.read_chunked(limits.max_body),
        }
    }

    fn take(&mut self, n: usize) -> Result<Vec<u8>, ReadError> {
        while self.buf.len() < n {
            match self.fill() {
                Ok(0) => return Err(ReadError::Bad("unexpected end of body".into())),
                Ok(_) => {}
                Err(e) => return Err(io_to_read_error(e)),
            }
        }
        let rest = self.buf.split_off(n);
        Ok(std::mem::replace(&mut self.buf, rest))
    }

    fn take_line(&mut self) -> Result<String, ReadError> {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.take(i + 2)?;
                return Ok(String::from_utf8_lossy(&line[..i]).into_owned());
            }
            if self.buf.len() > 4096 {
                return Err(ReadError::Bad("chunk header too long".into()));
            }
            match self.fill() {
                Ok(0) => return Err(ReadError::Bad("unexpected end of chunked body".into())),
                Ok(_) => {}
                Err(e) => return Err(io_to_read_error(e)),
            }
        }
    }

    fn read_chunked(&mut self, max: usize) -> Result<Vec<u8>, ReadError> {
        let mut body = Vec::new();
        loop {
            let line = self.take_line()?;
            let size_text = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| ReadError::Bad("bad chunk size".into()))?;
            if size == 0 {
                while !self.take_line()?.is_empty() {}
                return Ok(body);
            }
            if body.len().saturating_add(size) > max {
                return Err(ReadError::BodyTooLarge);
            }
            body.extend(self.take(size)?);
            if self.take(2)? != b"\r\n" {
                return Err(ReadError::Bad("bad chunk terminator".into()));
            }
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
    )
}

/// The fuzz targets' way in: a request head as the listener parses it,
/// then its target split and decoded as a Request does.
#[cfg(feature = "fuzzing")]
pub(super) fn fuzz_head(buf: &[u8]) -> Option<String> {
    let (head, _) = parse_head(buf, &Limits::default()).ok()??;
    let (path, _query) = split_target(&head.target).ok()?;
    Some(path)
}

/// Parses a complete head from `buf`: Some((head, bytes used)), None if more is needed.
fn parse_head(buf: &[u8], limits: &Limits) -> Result<Option<(Head, usize)>, ReadError> {
    let mut headers = vec![httparse::EMPTY_HEADER; limits.max_headers];
    let mut r = httparse::Request::new(&mut headers);
    let n = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(ReadError::HeadTooLarge),
        Err(e) => return Err(ReadError::Bad(format!("malformed HTTP request: {e}"))),
    };
    if n > limits.max_head {
        return Err(ReadError::HeadTooLarge);
    }
    let mut head = Head {
        method: r.method.unwrap_or("").to_string(),
        target: r.path.unwrap_or("").to_string(),
        http10: r.version == Some(0),
        headers: Vec::with_capacity(r.headers.len()),
        content_length: None,
        chunked: false,
    };
    for h in r.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map_err(|_| ReadError::Bad(format!("header {} is not UTF-8", h.name)))?
            .trim()
            .to_string();
        head.headers.push((h.name.to_ascii_lowercase(), value));
    }
    framing(&mut head)?;
    Ok(Some((head, n)))
}

/// Content-Length / Transfer-Encoding, refusing ambiguous framing (smuggling).
fn framing(head: &mut Head) -> Result<(), ReadError> {
    let bad = |m: &str| ReadError::Bad(m.to_string());
    for (name, value) in &head.headers {
        match name.as_str() {
            "content-length" => {
                let n: usize = value.parse().map_err(|_| bad("bad content-length"))?;
                if head.content_length.is_some_and(|old| old != n) {
                    return Err(bad("conflicting content-length"));
                }
                head.content_length = Some(n);
            }
            "transfer-encoding" if value.eq_ignore_ascii_case("chunked") => head.chunked = true,
            "transfer-encoding" => return Err(bad("unsupported transfer-encoding")),
            _ => {}
        }
    }
    if head.chunked && head.content_length.is_some() {
        return Err(bad("both content-length and chunked"));
    }
    Ok(())
}

/// An authenticated request with its body read.
pub struct Request {
    pub(crate) method: String,
    pub(crate) target: String,
    pub(crate) path: String,
    pub(crate) query: Vec<(String, String)>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    pub(crate) user: Option<UserInfo>,
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) http10: bool,
}

impl Request {
    /// Builds a request from its head; Err for a target that cannot be decoded (400).
    pub(crate) fn from_head(
        head: Head,
        body: Vec<u8>,
        peer: Option<SocketAddr>,
    ) -> Result<Request, String> {
        let (path, query) = split_target(&head.target)?;
        Ok(Request {
            method: head.method,
            target: head.target,
            path,
            query,
            headers: head.headers,
            body,
            user: None,
            peer,
            http10: head.http10,
        })
    }

    pub fn method(&self) -> &str {
        &self.method
    }
    /// The raw request target (path and query) as sent.
    pub fn target(&self) -> &str {
        &self.target
    }
    /// The percent-decoded path.
    pub fn path(&self) -> &str {
        &self.path
    }
    /// The first value of a query parameter.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
    /// Every value of a query parameter, in order (`command=a&command=b`).
    pub fn query_all(&self, name: &str) -> Vec<&str> {
        self.query
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }
    pub fn query_pairs(&self) -> &[(String, String)] {
        &self.query
    }
    /// A header's first value (names are case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        header_value(&self.headers, name)
    }
    pub fn header_all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
    /// All headers, names lower-cased.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }
    pub fn body(&self) -> &[u8] {
        &self.body
    }
    pub fn take_body(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.body)
    }
    /// The authenticated user; None on the read-only port.
    pub fn user(&self) -> Option<&UserInfo> {
        self.user.as_ref()
    }
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }
    /// `Connection: Upgrade` with an `Upgrade` header (SPDY, WebSocket).
    pub fn is_upgrade(&self) -> bool {
        let conn_upgrade = self.header_all("connection").iter().any(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        });
        conn_upgrade && self.header("upgrade").is_some()
    }

    pub(crate) fn wants_close(&self) -> bool {
        match self.header("connection") {
            Some(v) if v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")) => true,
            Some(v)
                if v.split(',')
                    .any(|t| t.trim().eq_ignore_ascii_case("keep-alive")) =>
            {
                false
            }
            _ => self.http10,
        }
    }
}

/// Splits an origin-form target into decoded path and query pairs.
fn split_target(target: &str) -> Result<(String, Vec<(String, String)>), String> {
    if !target.starts_with('/') {
        return Err(format!("unsupported request target {target:?}"));
    }
    let (raw_path, raw_query) = target.split_once('?').unwrap_or((target, ""));
    let path = percent_decode(raw_path, false)?;
    if path.contains('\0') {
        return Err("NUL in path".into());
    }
    let mut query = Vec::new();
    for kv in raw_query.split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        query.push((percent_decode(k, true)?, percent_decode(v, true)?));
    }
    Ok((path, query))
}

/// Strict percent-decoding to UTF-8; `plus` turns '+' into ' ' (queries).
pub(crate) fn percent_decode(s: &str, plus: bool) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes.get(i + 1..i + 3).ok_or("truncated percent escape")?;
                let hex = std::str::from_utf8(hex).map_err(|_| "bad percent escape")?;
                let b = u8::from_str_radix(hex, 16)
                    .map_err(|_| format!("bad percent escape %{hex}"))?;
                out.push(b);
                i += 3;
            }
            b'+' if plus => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| "escaped bytes are not UTF-8".to_string())
}

pub(crate) fn reason(code: u16) -> &'static str {
    match code {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Request Entity Too Large",
        422 => "Unprocessable Entity",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

fn http_date() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(now.as_secs()).unwrap_or(0);
    k8s_openapi::jiff::Timestamp::from_second(secs)
        .ok()
        .and_then(|ts| {
            k8s_openapi::jiff::fmt::rfc2822::DateTimePrinter::new()
                .timestamp_to_rfc9110_string(&ts)
                .ok()
        })
        .unwrap_or_default()
}

/// Where a response is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing sent yet.
    Pending,
    /// Head sent with Content-Length; this many body bytes still due.
    Fixed(u64),
    Chunked,
    /// HTTP/1.0 streaming: body delimited by closing the connection.
    UntilClose,
    Done,
    /// The stream was handed to the handler.
    Taken,
}

/// Buffered body bytes are sent as a chunk once this large.
const CHUNK: usize = 16 << 10;

/// The response to one request. Set status and headers, then either call
/// [`ResponseWriter::send`] (whole body) or write through [`Write`]
/// (streams chunked; set a `Content-Length` header first for a fixed length).
pub struct ResponseWriter<'a> {
    conn: &'a mut Conn,
    status: u16,
    headers: Vec<(String, String)>,
    state: State,
    head_only: bool,
    http10: bool,
    close: bool,
    buf: Vec<u8>,
    stopping: Arc<AtomicBool>,
}

impl<'a> ResponseWriter<'a> {
    pub(crate) fn new(conn: &'a mut Conn, req: &Request, stopping: Arc<AtomicBool>) -> Self {
        ResponseWriter {
            conn,
            status: 200,
            headers: Vec::new(),
            state: State::Pending,
            head_only: req.method == "HEAD",
            http10: req.http10,
            close: req.wants_close(),
            buf: Vec::new(),
            stopping,
        }
    }

    pub fn set_status(&mut self, code: u16) {
        self.status = code;
    }

    /// Sets a header, replacing any of the same name.
    pub fn set_header(&mut self, name: &str, value: &str) {
        self.headers.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
        self.add_header(name, value);
    }

    /// Adds a header (repeatable names such as Set-Cookie).
    pub fn add_header(&mut self, name: &str, value: &str) {
        // CR/LF in a value would split the response.
        let clean: String = value.chars().filter(|c| *c != '\r' && *c != '\n').collect();
        self.headers.push((name.to_string(), clean));
    }

    /// True once the status line has gone out.
    pub fn headers_sent(&self) -> bool {
        self.state != State::Pending
    }

    /// Closes the connection after this response (no keep-alive).
    pub fn close_after(&mut self) {
        self.close = true;
    }

    /// Sends a complete response with a Content-Length.
    pub fn send(&mut self, code: u16, content_type: &str, body: &[u8]) -> io::Result<()> {
        if self.headers_sent() {
            return Err(io::Error::other("response already started"));
        }
        self.status = code;
        if !content_type.is_empty() {
            self.set_header("Content-Type", content_type);
        }
        self.set_header("Content-Length", &body.len().to_string());
        self.write_head()?;
        if !self.head_only {
            self.io()?.write_all(body)?;
        }
        self.state = State::Done;
        self.io()?.flush()
    }

    /// A plain-text response, as Go's http.Error writes it.
    pub fn send_text(&mut self, code: u16, text: &str) -> io::Result<()> {
        self.set_header("X-Content-Type-Options", "nosniff");
        self.send(code, "text/plain; charset=utf-8", text.as_bytes())
    }

    pub fn send_json<T: serde::Serialize + ?Sized>(
        &mut self,
        code: u16,
        value: &T,
    ) -> io::Result<()> {
        let body = serde_json::to_vec(value).map_err(io::Error::other)?;
        self.send(code, "application/json", &body)
    }

    /// A token that turns true when the server stops or the client hangs up.
    pub fn cancel_token(&self) -> CancelToken {
        let tcp = self
            .conn
            .io
            .as_ref()
            .and_then(|io| io.sock().tcp().try_clone().ok())
            .map(Arc::new);
        CancelToken {
            stopping: self.stopping.clone(),
            tcp,
        }
    }

    /// Hands the raw stream to the handler without writing anything (it
    /// writes its own `101 Switching Protocols`). The connection is not
    /// reused afterwards; the read timeout is cleared and the socket's
    /// write timeout left at the server's value.
    pub fn take_stream(&mut self) -> io::Result<Upgraded> {
        if self.headers_sent() {
            return Err(io::Error::other("response already started"));
        }
        let io = self.conn.io.take().ok_or_else(taken)?;
        self.state = State::Taken;
        Ok(Upgraded {
            stream: RawStream::from_transport(io)?,
            buffered: std::mem::take(&mut self.conn.buf),
        })
    }

    /// Writes `101 Switching Protocols` with `headers` and hands over the stream.
    pub fn switch_protocols(&mut self, headers: &[(&str, &str)]) -> io::Result<Upgraded> {
        let mut head = String::from("HTTP/1.1 101 Switching Protocols\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        let mut up = self.take_stream()?;
        up.stream.write_all(head.as_bytes())?;
        up.stream.flush()?;
        Ok(up)
    }

    fn io(&mut self) -> io::Result<&mut Transport> {
        self.conn.io.as_mut().ok_or_else(taken)
    }

    fn write_head(&mut self) -> io::Result<()> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!("Date: {}\r\n", http_date()));
        if self.close {
            head.push_str("Connection: close\r\n");
        }
        head.push_str("\r\n");
        self.io()?.write_all(head.as_bytes())
    }

    /// Sends the head for a streamed body, choosing its framing.
    fn start_stream(&mut self) -> io::Result<()> {
        let fixed = self
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse::<u64>().ok());
        self.state = match fixed {
            Some(n) => State::Fixed(n),
            None if self.http10 => {
                self.close = true;
                State::UntilClose
            }
            None => {
                self.set_header("Transfer-Encoding", "chunked");
                State::Chunked
            }
        };
        if self.head_only && self.state == State::Chunked {
            self.headers
                .retain(|(k, _)| !k.eq_ignore_ascii_case("transfer-encoding"));
        }
        self.write_head()
    }

    fn emit(&mut self) -> io::Result<()> {
        if self.buf.is_empty() || self.head_only {
            self.buf.clear();
            return Ok(());
        }
        let data = std::mem::take(&mut self.buf);
        match self.state {
            State::Chunked => {
                let mut out = format!("{:x}\r\n", data.len()).into_bytes();
                out.extend_from_slice(&data);
                out.extend_from_slice(b"\r\n");
                self.io()?.write_all(&out)
            }
            State::Fixed(left) => {
                let n = (data.len() as u64).min(left);
                self.state = State::Fixed(left - n);
                // usize::try_from cannot fail: n <= data.len().
                let n = usize::try_from(n).unwrap_or(data.len());
                self.io()?.write_all(&data[..n])
            }
            State::UntilClose => self.io()?.write_all(&data),
            _ => Err(io::Error::other("response is finished")),
        }
    }

    /// Completes the response: an empty one if nothing was written, the last
    /// chunk if streaming. Returns whether the connection can be reused.
    pub(crate) fn finish(&mut self) -> io::Result<bool> {
        match self.state {
            State::Taken => return Ok(false),
            State::Done => {}
            State::Pending => {
                let code = self.status;
                self.send(code, "", &[])?;
            }
            State::Chunked | State::Fixed(_) | State::UntilClose => {
                self.emit()?;
                if self.state == State::Chunked && !self.head_only {
                    self.io()?.write_all(b"0\r\n\r\n")?;
                }
                if matches!(self.state, State::Fixed(left) if left > 0 && !self.head_only) {
                    self.close = true;
                }
                self.state = State::Done;
                self.io()?.flush()?;
            }
        }
        Ok(!self.close)
    }
}

impl Write for ResponseWriter<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.state == State::Pending {
            self.start_stream()?;
        }
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.emit()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.state == State::Pending {
            self.start_stream()?;
        }
        self.emit()?;
        self.io()?.flush()
    }
}

/// Writes a whole error response on a connection about to close.
pub(crate) fn write_error(io: &mut dyn Write, code: u16, text: &str) -> io::Result<()> {
    let resp = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        reason(code),
        text.len()
    );
    io.write_all(resp.as_bytes())?;
    io.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits::default()
    }

    #[test]
    fn parses_head_and_framing() {
        let raw = b"GET /containerLogs/ns/p/c?tailLines=2&x=a%20b+c HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc";
        let (head, n) = parse_head(raw, &limits()).unwrap().unwrap();
        assert_eq!(&raw[n..], b"abc");
        assert_eq!(head.content_length, Some(3));
        let req = Request::from_head(head, vec![], None).unwrap();
        assert_eq!(req.path(), "/containerLogs/ns/p/c");
        assert_eq!(req.query("tailLines"), Some("2"));
        assert_eq!(req.query("x"), Some("a b c"));
        assert_eq!(req.header("HOST"), Some("h"));
    }

    #[test]
    fn rejects_ambiguous_or_bad_requests() {
        let both = b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(matches!(
            parse_head(both, &limits()),
            Err(ReadError::Bad(_))
        ));
        let garbage = b"\x00\x01\x02 garbage\r\n\r\n";
        assert!(matches!(
            parse_head(garbage, &limits()),
            Err(ReadError::Bad(_))
        ));
        assert!(parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n", &limits())
            .unwrap()
            .is_none());
        assert!(split_target("/a%zz").is_err());
        assert!(split_target("/a?b=%ff").is_err());
        assert!(split_target("*").is_err());
        assert_eq!(percent_decode("/a%2Fb", false).unwrap(), "/a/b");
    }
}
