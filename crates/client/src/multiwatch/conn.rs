//! One HTTP/1.1 request per non-blocking connection, over plain TCP or
//! rustls' sans-IO `ClientConnection`: the caller polls [`Conn::fd`] for
//! [`Conn::interest`] and calls [`Conn::advance`] when it is ready.
//!
//! Connecting (DNS and TCP) is the one blocking step, bounded by
//! [`CONNECT_TIMEOUT`] per address; the TLS handshake, request and response
//! are non-blocking.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;

use super::chunked::ChunkedDecoder;

/// Bound on each TCP connect attempt: the mux thread waits on it.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Response heads larger than this are refused.
const MAX_HEAD: usize = 64 << 10;
const MAX_HEADERS: usize = 64;
const READ_CHUNK: usize = 32 << 10;

/// Where requests go: parsed once from the client's server URL.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub(crate) tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    /// `host:port` for connecting.
    pub(crate) addr: String,
    /// The Host header.
    pub(crate) host: String,
    /// Path prefix from the URL, without a trailing slash.
    pub(crate) prefix: String,
}

impl Endpoint {
    pub(crate) fn parse(server: &str, tls: Arc<rustls::ClientConfig>) -> Result<Endpoint, String> {
        let (scheme, rest) = server
            .split_once("://")
            .ok_or_else(|| format!("server {server:?} is not a URL"))?;
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
            None => (rest, ""),
        };
        let default_port = match scheme {
            "https" => 443,
            "http" => 80,
            _ => return Err(format!("server {server:?}: unsupported scheme")),
        };
        // `[v6]:port`, `[v6]`, `host:port` or `host`.
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("server {server:?}: bad IPv6 address"))?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        let port: u16 = match port {
            Some(p) => p
                .parse()
                .map_err(|_| format!("server {server:?}: bad port"))?,
            None => default_port,
        };
        if host.is_empty() {
            return Err(format!("server {server:?}: no host"));
        }
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let tls = if scheme == "https" {
            let name = ServerName::try_from(host.to_string())
                .map_err(|e| format!("server {server:?}: {e}"))?;
            Some((tls, name))
        } else {
            None
        };
        Ok(Endpoint {
            tls,
            host: authority.to_string(),
            addr,
            prefix: prefix.to_string(),
        })
    }
}

/// How the response body is delimited.
#[derive(Debug)]
enum Framing {
    Chunked(ChunkedDecoder),
    Length(u64),
    UntilClose,
}

/// What one [`Conn::advance`] produced.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// The status code, the first time the response head is complete.
    pub(crate) status: Option<u16>,
    /// Decoded body bytes.
    pub(crate) body: Vec<u8>,
    /// The body is complete; the connection is no longer needed.
    pub(crate) done: bool,
}

pub(crate) struct Conn {
    sock: TcpStream,
    tls: Option<rustls::ClientConnection>,
    /// Plain TCP: request bytes not yet written.
    out: Vec<u8>,
    /// Received, not yet parsed (head) or decoded (body).
    inbuf: Vec<u8>,
    framing: Option<Framing>,
    eof: bool,
}

impl Conn {
    /// Connects (blocking, bounded) and queues `request`.
    pub(crate) fn open(ep: &Endpoint, request: Vec<u8>) -> Result<Conn, String> {
        let sock = connect(&ep.addr)?;
        sock.set_nonblocking(true)
            .map_err(|e| format!("setting {} non-blocking: {e}", ep.addr))?;
        let _ = sock.set_nodelay(true);
        let (tls, out) = match &ep.tls {
            Some((cfg, name)) => {
                let mut c = rustls::ClientConnection::new(cfg.clone(), name.clone())
                    .map_err(|e| format!("TLS to {}: {e}", ep.addr))?;
                // Buffered by rustls until the handshake completes.
                c.writer()
                    .write_all(&request)
                    .map_err(|e| format!("TLS to {}: {e}", ep.addr))?;
                (Some(c), Vec::new())
            }
            None => (None, request),
        };
        Ok(Conn {
            sock,
            tls,
            out,
            inbuf: Vec::new(),
            framing: None,
            eof: false,
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// poll(2) events this connection waits for.
    pub(crate) fn interest(&self) -> i16 {
        match &self.tls {
            Some(c) => {
                let mut ev = 0;
                if c.wants_read() {
                    ev |= libc::POLLIN;
                }
                if c.wants_write() {
                    ev |= libc::POLLOUT;
                }
                ev
            }
            None if !self.out.is_empty() => libc::POLLOUT | libc::POLLIN,
            None => libc::POLLIN,
        }
    }

    /// Moves bytes both ways without blocking, then parses what arrived.
    pub(crate) fn advance(&mut self) -> Result<Progress, String> {
        match self.tls.is_some() {
            true => self.io_tls(),
            false => self.io_plain(),
        }
        .map_err(|e| format!("connection: {e}"))?;
        self.parse()
    }

    fn io_plain(&mut self) -> io::Result<()> {
        while !self.out.is_empty() {
            match self.sock.write(&self.out) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => drop(self.out.drain(..n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let mut buf = [0u8; READ_CHUNK];
        // Bounded so one busy connection cannot starve the others.
        for _ in 0..16 {
            match self.sock.read(&mut buf) {
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn io_tls(&mut self) -> io::Result<()> {
        let Some(tls) = self.tls.as_mut() else {
            return Ok(());
        };
        let mut buf = [0u8; READ_CHUNK];
        for _ in 0..16 {
            while tls.wants_write() {
                match tls.write_tls(&mut self.sock) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            let mut got = false;
            if tls.wants_read() {
                match tls.read_tls(&mut self.sock) {
                    Ok(0) => self.eof = true,
                    Ok(_) => got = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                tls.process_new_packets()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
            loop {
                match tls.reader().read(&mut buf) {
                    Ok(0) => {
                        self.eof = true; // close_notify
                        break;
                    }
                    Ok(n) => self.inbuf.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    // TCP closed without close_notify: the framing decides
                    // whether the body was complete.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        self.eof = true;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            if !got || self.eof {
                break;
            }
        }
        // A handshake message produced by the last read goes out now.
        while tls.wants_write() {
            match tls.write_tls(&mut self.sock) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn parse(&mut self) -> Result<Progress, String> {
        let mut p = Progress::default();
        if self.framing.is_none() {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&self.inbuf) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = resp.code.unwrap_or(0);
                    self.framing = Some(framing(resp.headers)?);
                    p.status = Some(status);
                    self.inbuf.drain(..n);
                }
                Ok(httparse::Status::Partial) if self.inbuf.len() > MAX_HEAD => {
                    return Err("response head too large".to_string())
                }
                Ok(httparse::Status::Partial) if self.eof => {
                    return Err("connection closed before the response head".to_string())
                }
                Ok(httparse::Status::Partial) => return Ok(p),
                Err(e) => return Err(format!("malformed response head: {e}")),
            }
        }
        let data = std::mem::take(&mut self.inbuf);
        match self.framing.as_mut() {
            Some(Framing::Chunked(d)) => {
                d.decode(&data, &mut p.body)?;
                p.done = d.is_done();
            }
            Some(Framing::Length(left)) => {
                let n = (data.len() as u64).min(*left);
                p.body.extend_from_slice(&data[..n as usize]);
                *left -= n;
                p.done = *left == 0;
            }
            Some(Framing::UntilClose) => {
                p.body = data;
                p.done = self.eof;
            }
            None => {}
        }
        if self.eof && !p.done {
            return Err("connection closed before the end of the response".to_string());
        }
        Ok(p)
    }
}

fn framing(headers: &[httparse::Header<'_>]) -> Result<Framing, String> {
    let value = |name: &str| {
        headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).trim().to_ascii_lowercase())
    };
    if value("transfer-encoding").is_some_and(|te| te.ends_with("chunked")) {
        return Ok(Framing::Chunked(ChunkedDecoder::new()));
    }
    match value("content-length") {
        Some(len) => len
            .parse()
            .map(Framing::Length)
            .map_err(|_| format!("invalid Content-Length {len:?}")),
        None => Ok(Framing::UntilClose),
    }
}

/// Resolves and connects, trying each address with [`CONNECT_TIMEOUT`].
fn connect(addr: &str) -> Result<TcpStream, String> {
    let addrs = addr
        .to_socket_addrs()
        .map_err(|e| format!("resolving {addr}: {e}"))?;
    let mut last = format!("resolving {addr}: no addresses");
    for a in addrs {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(s) => return Ok(s),
            Err(e) => last = format!("connecting to {a}: {e}"),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(url: &str) -> Endpoint {
        Endpoint::parse(url, crate::tls::default_config()).expect("parse")
    }

    #[test]
    fn parses_endpoints() {
        let e = ep("https://10.0.0.1:6443/prefix/");
        assert_eq!(
            (e.addr.as_str(), e.prefix.as_str()),
            ("10.0.0.1:6443", "/prefix")
        );
        assert!(e.tls.is_some());
        let e = ep("http://[::1]:8080");
        assert_eq!(
            (e.addr.as_str(), e.host.as_str()),
            ("[::1]:8080", "[::1]:8080")
        );
        assert!(e.tls.is_none());
        assert_eq!(ep("https://api.example").addr, "api.example:443");
        let tls = crate::tls::default_config();
        assert!(Endpoint::parse("ftp://x", tls.clone()).is_err());
        assert!(Endpoint::parse("http://x:notaport", tls).is_err());
    }
}
