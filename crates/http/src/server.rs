//! Accepting connections: one acceptor thread per port, one thread per
//! connection up to a bound (extra connections get a quick 503 from a few
//! short-lived threads, or are dropped), keep-alive, and each request
//! handed to the [`Service`].

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rkubelet_util::shutdown::{wait_readable, Shutdown, Wake};

use crate::conn::{Conn, Head, ReadError};
use crate::response::write_error;
use crate::stream::{accept_tls, Sock, Transport};
use crate::{Limits, Request, ResponseWriter};

/// The longest one wait for a connection lasts. A connection or shutdown
/// (the shutdown descriptor is in the same poll) ends it at once, so the
/// bound only keeps the wait finite; each idle wakeup costs CPU (at 1 s,
/// healthz and the kubelet server took about 3 ms a minute each).
const IDLE_WAIT: Duration = Duration::from_secs(60);
/// The pause after a failed accept (EMFILE and friends).
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// Threads answering 503 to connections over the bound.
const MAX_REJECTERS: usize = 8;
const REJECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a closing connection drains unread client data, so the
/// response is not lost to a reset.
const LINGER: Duration = Duration::from_millis(500);

/// What a server does with each request.
pub trait Service: Send + Sync + 'static {
    /// What a connection's client certificate says, worked out once per
    /// connection and shown to each of its requests.
    type Peer: Send;
    /// Who sent a request ([`Request::user`]), as the service decides.
    type User;

    /// A connection is up: `client_cert` is the leaf certificate (DER) the
    /// TLS verifier accepted, None on plain HTTP or without one.
    fn connected(&self, client_cert: Option<&[u8]>) -> Self::Peer;

    /// Answers one request. Err before anything was sent yields a 500;
    /// after, the connection closes.
    fn serve(
        &self,
        peer: &Self::Peer,
        req: &mut Request<Self::User>,
        resp: &mut ResponseWriter<'_>,
    ) -> io::Result<()>;
}

/// A server's threads, transport and limits.
#[derive(Clone)]
pub struct Settings {
    /// The acceptor thread's name, also the prefix of the server's log lines.
    pub name: &'static str,
    /// The name of each connection's thread.
    pub conn_thread: &'static str,
    /// The name of the threads that answer 503 over the bound.
    pub reject_thread: &'static str,
    /// TLS, or None for plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub limits: Limits,
}

/// A service on a port: its settings and its connection counts.
pub struct Server<S: Service> {
    settings: Settings,
    service: S,
    /// Set once the acceptor saw the shutdown; ends keep-alive loops and
    /// cancels long-running handlers.
    stopping: Arc<AtomicBool>,
    active: AtomicUsize,
    rejecting: AtomicUsize,
}

impl<S: Service> Server<S> {
    pub fn new(settings: Settings, service: S) -> Arc<Server<S>> {
        Arc::new(Server {
            settings,
            service,
            stopping: Arc::new(AtomicBool::new(false)),
            active: AtomicUsize::new(0),
            rejecting: AtomicUsize::new(0),
        })
    }

    /// Connections being served now.
    pub fn active_connections(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Starts the acceptor thread on `listener`; it stops at once when
    /// `shutdown` comes. Connections already open finish their request.
    pub fn spawn(
        self: &Arc<Self>,
        listener: TcpListener,
        shutdown: Shutdown,
    ) -> io::Result<JoinHandle<()>> {
        listener.set_nonblocking(true)?;
        let server = Arc::clone(self);
        std::thread::Builder::new()
            .name(self.settings.name.to_string())
            .spawn(move || accept_loop(&server, &listener, &shutdown))
    }

    fn name(&self) -> &'static str {
        self.settings.name
    }
}

/// Holds one unit of a counter until dropped (panics included).
struct Slot<S: Service> {
    server: Arc<Server<S>>,
    rejecter: bool,
}

impl<S: Service> Drop for Slot<S> {
    fn drop(&mut self) {
        let counter = if self.rejecter {
            &self.server.rejecting
        } else {
            &self.server.active
        };
        counter.fetch_sub(1, Ordering::SeqCst);
    }
}

fn acquire<S: Service>(server: &Arc<Server<S>>, rejecter: bool) -> Option<Slot<S>> {
    let (counter, max) = if rejecter {
        (&server.rejecting, MAX_REJECTERS)
    } else {
        (&server.active, server.settings.limits.max_connections)
    };
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()?;
    Some(Slot {
        server: server.clone(),
        rejecter,
    })
}

fn accept_loop<S: Service>(server: &Arc<Server<S>>, listener: &TcpListener, shutdown: &Shutdown) {
    loop {
        if shutdown.came() {
            server.stopping.store(true, Ordering::SeqCst);
            log::info!("{}: shutting down", server.name());
            return;
        }
        match wait_readable(&[listener.as_fd()], &shutdown.fd, IDLE_WAIT) {
            Ok(Wake::Ready) => {}
            // Shutdown: the channel is closed already, seen above.
            Ok(Wake::Shutdown | Wake::Timeout) => continue,
            Err(e) => {
                log::warn!("{}: poll: {e}", server.name());
                std::thread::sleep(ACCEPT_BACKOFF);
                continue;
            }
        }
        match listener.accept() {
            Ok((tcp, peer)) => dispatch(server, tcp, peer),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                log::warn!("{}: accept: {e}", server.name());
                std::thread::sleep(ACCEPT_BACKOFF);
            }
        }
    }
}

fn dispatch<S: Service>(server: &Arc<Server<S>>, tcp: TcpStream, peer: SocketAddr) {
    if tcp.set_nonblocking(false).is_err() {
        return;
    }
    if let Some(slot) = acquire(server, false) {
        let spawned = std::thread::Builder::new()
            .name(server.settings.conn_thread.into())
            .spawn(move || serve_guarded(slot, tcp, peer));
        if let Err(e) = spawned {
            log::warn!("{}: spawn connection thread: {e}", server.name());
        }
        return;
    }
    log::warn!(
        "{}: {} connections open, rejecting {peer}",
        server.name(),
        server.settings.limits.max_connections
    );
    if let Some(slot) = acquire(server, true) {
        let _ = std::thread::Builder::new()
            .name(server.settings.reject_thread.into())
            .spawn(move || {
                reject(&slot.server, tcp);
                drop(slot);
            });
    }
}

/// Answers 503 to a connection over the bound, within a short deadline.
fn reject<S: Service>(server: &Server<S>, tcp: TcpStream) {
    let deadline = Instant::now() + REJECT_TIMEOUT;
    let _ = tcp.set_write_timeout(Some(REJECT_TIMEOUT));
    let sock = Sock::new(tcp, Some(deadline));
    let mut io = match &server.settings.tls {
        Some(cfg) => match accept_tls(cfg, sock, deadline) {
            Ok(io) => io,
            Err(_) => return,
        },
        None => Transport::Plain(sock),
    };
    // Read (some of) the request first so the client sees the answer.
    let _ = io::Read::read(&mut io, &mut [0u8; 4096]);
    let _ = write_error(&mut io, 503, "too many open connections\n");
    close(&mut io);
}

fn serve_guarded<S: Service>(slot: Slot<S>, tcp: TcpStream, peer: SocketAddr) {
    let server = slot.server.clone();
    let outcome = catch_unwind(AssertUnwindSafe(|| serve_connection(&server, tcp, peer)));
    if outcome.is_err() {
        log::error!(
            "{}: panic while serving {peer}; connection dropped",
            server.name()
        );
    }
    drop(slot);
}

fn serve_connection<S: Service>(server: &Arc<Server<S>>, tcp: TcpStream, peer: SocketAddr) {
    let limits = &server.settings.limits;
    let deadline = Instant::now() + limits.header_timeout;
    let _ = tcp.set_nodelay(true);
    if tcp.set_write_timeout(Some(limits.write_timeout)).is_err() {
        return;
    }
    let sock = Sock::new(tcp, Some(deadline));
    let io = match &server.settings.tls {
        Some(cfg) => match accept_tls(cfg, sock, deadline) {
            Ok(io) => io,
            Err(e) => {
                log::debug!("{}: TLS handshake with {peer}: {e}", server.name());
                return;
            }
        },
        None => Transport::Plain(sock),
    };
    let client = server.service.connected(io.peer_certificate());
    let mut conn = Conn::new(io, Some(peer));
    let mut head_deadline = Some(deadline);
    loop {
        let head = match conn.read_head(head_deadline, limits) {
            Ok(h) => h,
            Err(e) => {
                answer_read_error(&mut conn, e, Some(peer));
                break;
            }
        };
        head_deadline = None;
        let reuse = serve_request(server, &mut conn, head, &client);
        if !reuse || server.stopping.load(Ordering::SeqCst) {
            break;
        }
    }
    if let Some(io) = conn.io.as_mut() {
        close(io);
    }
}

/// Closes after a read failure, with the status it calls for.
fn answer_read_error(conn: &mut Conn, e: ReadError, peer: Option<SocketAddr>) {
    let (code, text) = match e {
        ReadError::Closed => return,
        ReadError::Io(e) => {
            log::debug!("reading request from {peer:?}: {e}");
            return;
        }
        ReadError::TimedOut => (408, "request timed out\n".to_string()),
        ReadError::Bad(msg) => (400, format!("400 Bad Request: {msg}\n")),
        ReadError::HeadTooLarge => (431, "431 Request Header Fields Too Large\n".into()),
        ReadError::BodyTooLarge => (413, "413 Request Entity Too Large\n".into()),
    };
    log::debug!("request from {peer:?}: {code} {}", text.trim_end());
    if let Some(io) = conn.io.as_mut() {
        let _ = write_error(io, code, &text);
    }
}

/// Serves one request; true if the connection can take another.
fn serve_request<S: Service>(
    server: &Arc<Server<S>>,
    conn: &mut Conn,
    head: Head,
    client: &S::Peer,
) -> bool {
    let peer = conn.peer;
    let body = match conn.read_body(&head, &server.settings.limits) {
        Ok(b) => b,
        Err(e) => {
            answer_read_error(conn, e, peer);
            return false;
        }
    };
    let mut req = match Request::from_head(head, body, peer) {
        Ok(r) => r,
        Err(msg) => {
            if let Some(io) = conn.io.as_mut() {
                let _ = write_error(io, 400, &format!("400 Bad Request: {msg}\n"));
            }
            return false;
        }
    };
    let stopping = server.stopping.clone();
    let mut resp = ResponseWriter::new(conn, &req, stopping);
    match server.service.serve(client, &mut req, &mut resp) {
        Ok(()) => resp.finish().unwrap_or(false),
        Err(e) => {
            log::debug!("{} {}: {e}", req.method(), req.path());
            if !resp.headers_sent() {
                resp.close_after();
                let _ = resp.send_text(500, &format!("Internal Server Error: {e}\n"));
            }
            false
        }
    }
}

/// Orderly close: TLS close_notify, half-close, then a short drain of
/// unread client data so a final response is not lost to a reset.
fn close(io: &mut Transport) {
    io.close_write();
    let sock = io.sock_mut();
    if sock.set_deadline(Some(Instant::now() + LINGER)).is_err() {
        return;
    }
    let mut buf = [0u8; 8192];
    let mut drained = 0usize;
    while drained < (256 << 10) {
        match io::Read::read(sock, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
}
