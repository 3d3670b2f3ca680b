//! Accepting connections: one acceptor thread per port, one thread per
//! connection up to a bound (extra connections get a quick 503 from a few
//! short-lived threads, or are dropped), keep-alive, and per-request
//! authentication, authorization and routing.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};

use super::auth::{Auth, Decision, UserInfo};
use super::http::{
    write_error, Conn, Head, Limits, ReadError, Request, ResponseWriter, Sock, Transport,
};
use super::routes::{not_found, Route, Router};
use super::tls;
use crate::util::worker::{self, ShutdownStage, Worker};

/// How often the acceptor looks at the shutdown channel.
const POLL: Duration = Duration::from_millis(200);
/// Threads answering 503 to connections over the bound.
const MAX_REJECTERS: usize = 8;
const REJECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a closing connection drains unread client data, so the
/// response is not lost to a reset.
const LINGER: Duration = Duration::from_millis(500);

pub(crate) struct Server {
    /// The acceptor thread's name.
    pub name: &'static str,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// None on the read-only port.
    pub auth: Option<Arc<Auth>>,
    pub router: Router,
    pub limits: Limits,
    pub stopping: Arc<AtomicBool>,
    pub active: AtomicUsize,
    pub rejecting: AtomicUsize,
}

/// Holds one unit of a counter until dropped (panics included).
struct Slot {
    server: Arc<Server>,
    rejecter: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let counter = if self.rejecter {
            &self.server.rejecting
        } else {
            &self.server.active
        };
        counter.fetch_sub(1, Ordering::SeqCst);
    }
}

fn acquire(server: &Arc<Server>, rejecter: bool) -> Option<Slot> {
    let (counter, max) = if rejecter {
        (&server.rejecting, MAX_REJECTERS)
    } else {
        (&server.active, server.limits.max_connections)
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

/// Starts the acceptor for `listener`; it stops when `shutdown` fires or closes.
pub(crate) fn spawn(
    server: Arc<Server>,
    listener: TcpListener,
    shutdown: Receiver<()>,
) -> io::Result<Worker> {
    listener.set_nonblocking(true)?;
    let name = server.name;
    worker::spawn(name, ShutdownStage::Servers, move || {
        accept_loop(&server, &listener, &shutdown)
    })
}

fn accept_loop(server: &Arc<Server>, listener: &TcpListener, shutdown: &Receiver<()>) {
    loop {
        if !matches!(shutdown.try_recv(), Err(TryRecvError::Empty)) {
            server.stopping.store(true, Ordering::SeqCst);
            log::info!("{}: shutting down", server.name);
            return;
        }
        if !readable(listener, POLL) {
            continue;
        }
        match listener.accept() {
            Ok((tcp, peer)) => dispatch(server, tcp, peer),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                log::warn!("{}: accept: {e}", server.name);
                std::thread::sleep(POLL);
            }
        }
    }
}

/// Waits up to `timeout` for a pending connection.
fn readable(listener: &TcpListener, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: one valid pollfd for the listener's open descriptor.
    let n = unsafe { libc::poll(&mut pfd, 1, ms) };
    n > 0
}

fn dispatch(server: &Arc<Server>, tcp: TcpStream, peer: SocketAddr) {
    if tcp.set_nonblocking(false).is_err() {
        return;
    }
    if let Some(slot) = acquire(server, false) {
        let spawned = worker::spawn_helper("kubelet-conn", move || serve_guarded(slot, tcp, peer));
        if let Err(e) = spawned {
            log::warn!("{}: spawn connection thread: {e}", server.name);
        }
        return;
    }
    log::warn!(
        "{}: {} connections open, rejecting {peer}",
        server.name,
        server.limits.max_connections
    );
    if let Some(slot) = acquire(server, true) {
        let _ = worker::spawn_helper("kubelet-reject", move || {
            reject(&slot.server, tcp);
            drop(slot);
        });
    }
}

/// Answers 503 to a connection over the bound, within a short deadline.
fn reject(server: &Arc<Server>, tcp: TcpStream) {
    let deadline = Instant::now() + REJECT_TIMEOUT;
    let _ = tcp.set_write_timeout(Some(REJECT_TIMEOUT));
    let sock = Sock::new(tcp, Some(deadline));
    let mut io = match &server.tls {
        Some(cfg) => match tls::accept(cfg, sock, deadline) {
            Ok((io, _)) => io,
            Err(_) => return,
        },
        None => Transport::Plain(sock),
    };
    // Read (some of) the request first so the client sees the answer.
    let _ = io::Read::read(&mut io, &mut [0u8; 4096]);
    let _ = write_error(&mut io, 503, "too many open connections\n");
    close(&mut io);
}

fn serve_guarded(slot: Slot, tcp: TcpStream, peer: SocketAddr) {
    let server = slot.server.clone();
    let outcome = catch_unwind(AssertUnwindSafe(|| serve_connection(&server, tcp, peer)));
    if outcome.is_err() {
        log::error!(
            "{}: panic while serving {peer}; connection dropped",
            server.name
        );
    }
    drop(slot);
}

fn serve_connection(server: &Arc<Server>, tcp: TcpStream, peer: SocketAddr) {
    let limits = &server.limits;
    let deadline = Instant::now() + limits.header_timeout;
    let _ = tcp.set_nodelay(true);
    if tcp.set_write_timeout(Some(limits.write_timeout)).is_err() {
        return;
    }
    let sock = Sock::new(tcp, Some(deadline));
    let (io, cert_user) = match &server.tls {
        Some(cfg) => match tls::accept(cfg, sock, deadline) {
            Ok(accepted) => accepted,
            Err(e) => {
                log::debug!("{}: TLS handshake with {peer}: {e}", server.name);
                return;
            }
        },
        None => (Transport::Plain(sock), None),
    };
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
        let reuse = serve_request(server, &mut conn, head, cert_user.as_ref());
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
fn serve_request(
    server: &Arc<Server>,
    conn: &mut Conn,
    head: Head,
    cert_user: Option<&UserInfo>,
) -> bool {
    let peer = conn.peer;
    let body = match conn.read_body(&head, &server.limits) {
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
    // Upstream's ServeHTTP counts every request, refused ones included.
    let server_type = if server.tls.is_some() {
        "readwrite"
    } else {
        "readonly"
    };
    let _metrics = crate::metrics::http_request_start(req.method(), req.path(), server_type);
    let stopping = server.stopping.clone();
    let mut resp = ResponseWriter::new(conn, &req, stopping);
    let result = match admit(server, &mut req, cert_user) {
        Some((code, text)) => resp.send_text(code, &text),
        None => dispatch_request(&server.router, &mut req, &mut resp),
    };
    match result {
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

/// Authenticates and authorizes; Some((code, body)) refuses the request.
fn admit(
    server: &Server,
    req: &mut Request,
    cert_user: Option<&UserInfo>,
) -> Option<(u16, String)> {
    let auth = server.auth.as_ref()?;
    let user = match auth.authenticate(cert_user, &req.headers) {
        Ok(Some(u)) => u,
        Ok(None) => return Some((401, "Unauthorized".into())),
        Err(e) => {
            log::info!("unable to authenticate the request: {e}");
            return Some((401, "Unauthorized".into()));
        }
    };
    let decision = auth.authorize(&user, req.method(), req.path());
    req.user = Some(user);
    match decision {
        Decision::Allow => None,
        Decision::Forbidden(msg) => Some((403, msg)),
        Decision::Error(msg) => Some((500, msg)),
    }
}

/// Runs the route's handler; a panic becomes a 500 when nothing was sent.
fn dispatch_request(
    router: &Router,
    req: &mut Request,
    resp: &mut ResponseWriter<'_>,
) -> io::Result<()> {
    match router.route(req.path()) {
        Route::Handler(h) => {
            let run = catch_unwind(AssertUnwindSafe(|| h.handle(req, resp)));
            run.unwrap_or_else(|_| {
                log::error!("handler for {} {} panicked", req.method(), req.path());
                Err(io::Error::other("handler panicked"))
            })
        }
        Route::Redirect(to) => {
            let location = match req.target().split_once('?') {
                Some((_, q)) => format!("{to}?{q}"),
                None => to,
            };
            resp.set_header("Location", &location);
            resp.send(301, "", &[])
        }
        Route::NotFound => not_found(resp),
    }
}

/// Orderly close: TLS close_notify, half-close, then a short drain of
/// unread client data so a final response is not lost to a reset.
pub(crate) fn close(io: &mut Transport) {
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
