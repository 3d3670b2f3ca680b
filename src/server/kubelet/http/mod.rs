//! HTTP/1.1 over a TCP or TLS stream: request heads parsed with httparse
//! under a deadline and size limits, bodies read whole (bounded), responses
//! with Content-Length, chunked streaming, or a hand-over of the raw stream.
//!
//! This file holds the limits and the byte streams (a deadline-bound
//! socket, plain or TLS, and the raw stream a handler takes over);
//! `conn` reads request heads and bodies off a connection, `request` is
//! the parsed [`Request`], `response` the [`ResponseWriter`].

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::{ServerConnection, StreamOwned};

mod conn;
mod request;
mod response;
#[cfg(test)]
mod tests;

pub(crate) use conn::{Conn, Head, ReadError};
pub use request::Request;
pub(crate) use response::write_error;
pub use response::ResponseWriter;

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

/// The fuzz targets' way in: a request head as the listener parses it,
/// then its target split and decoded as a Request does.
#[cfg(feature = "fuzzing")]
pub(super) fn fuzz_head(buf: &[u8]) -> Option<String> {
    let (head, _) = conn::parse_head(buf, &Limits::default()).ok()??;
    let (path, _query) = request::split_target(&head.target).ok()?;
    Some(path)
}
