//! The byte streams under a connection: a deadline-bound socket, plain or
//! TLS (with the handshake under the same deadline), the raw stream a
//! handler takes over, and the token that tells a handler to stop.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rustls::{ServerConfig, ServerConnection, StreamOwned};

/// A TCP socket whose reads fail once a deadline passes, however slowly the
/// peer trickles bytes (a per-read timeout alone would not bound that).
pub(crate) struct Sock {
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
pub(crate) enum Transport {
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

    /// The client's leaf certificate (DER), as the verifier accepted it.
    pub fn peer_certificate(&self) -> Option<&[u8]> {
        match self {
            Transport::Plain(_) => None,
            Transport::Tls(t) => t.conn.peer_certificates()?.first().map(|c| c.as_ref()),
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

    pub(crate) fn from_transport(io: Transport) -> io::Result<RawStream> {
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
    pub(crate) stopping: Arc<AtomicBool>,
    pub(crate) tcp: Option<Arc<TcpStream>>,
}

impl CancelToken {
    pub fn is_cancelled(&self) -> bool {
        self.stopping.load(Ordering::Relaxed) || self.tcp.as_deref().is_some_and(peer_hung_up)
    }
}

/// Completes the TLS handshake by `deadline`.
pub(crate) fn accept_tls(
    cfg: &Arc<ServerConfig>,
    mut sock: Sock,
    deadline: Instant,
) -> io::Result<Transport> {
    sock.set_deadline(Some(deadline))?;
    let conn = ServerConnection::new(cfg.clone()).map_err(io::Error::other)?;
    let mut tls = StreamOwned::new(conn, sock);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock)?;
    }
    Ok(Transport::Tls(Box::new(tls)))
}
