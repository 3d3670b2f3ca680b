//! rkubelet's HTTP/1.1 server, synchronous, over TCP or rustls: one
//! acceptor thread per port and one thread per connection up to
//! [`Limits::max_connections`] (extra connections get a quick 503 from a
//! few short-lived threads, or are dropped). Request heads are parsed with
//! httparse under a deadline and size limits, with framing that refuses
//! smuggling; bodies are read whole and bounded; responses go out with a
//! Content-Length, chunked, or the raw stream is handed over (upgrades).
//!
//! # Serving
//!
//! A [`Service`] answers requests; [`Server::new`] pairs it with its
//! [`Settings`] and [`Server::spawn`] starts the acceptor on a bound
//! listener until the shutdown channel fires or closes:
//!
//! ```ignore
//! struct Hello;
//! impl Service for Hello {
//!     type Peer = ();
//!     type User = ();
//!     fn connected(&self, _client_cert: Option<&[u8]>) {}
//!     fn serve(&self, _: &(), _req: &mut Request, resp: &mut ResponseWriter<'_>) -> io::Result<()> {
//!         resp.send_text(200, "hello")
//!     }
//! }
//! let settings = Settings {
//!     name: "hello",
//!     conn_thread: "hello-conn",
//!     reject_thread: "hello-reject",
//!     tls: None,
//!     limits: Limits::default(),
//! };
//! let server = Server::new(settings, Hello);
//! let thread = server.spawn(TcpListener::bind("127.0.0.1:0")?, shutdown)?;
//! ```
//!
//! # Handlers
//!
//! [`Request`]: `method()`, `path()` (percent-decoded), `target()` (raw),
//! `query(name)`, `query_all(name)` (repeated `command=`), `query_pairs()`,
//! `header(name)` / `header_all(name)` (case-insensitive), `headers()`,
//! `body()` / `take_body()` (read whole beforehand, at most
//! [`Limits::max_body`]), `user()` (whatever the service put there with
//! `set_user`), `peer_addr()`, `is_upgrade()`.
//!
//! [`ResponseWriter`]: `send(code, content_type, body)`, `send_text`,
//! `send_json`, or `set_status` / `set_header` then `io::Write` (chunked,
//! or fixed if a `Content-Length` header was set; `flush()` pushes a chunk
//! out now). `cancel_token()` gives a [`CancelToken`] whose `is_cancelled()`
//! turns true when the client hangs up or the server stops. A service
//! returning Err before anything was sent yields a 500; after, the
//! connection closes.
//!
//! Upgrades (SPDY/3.1, WebSocket): `resp.switch_protocols(&[("Connection",
//! "Upgrade"), ("Upgrade", "SPDY/3.1"), ...])` writes the 101 and returns an
//! [`Upgraded`] `{ stream: RawStream, buffered: Vec<u8> }`; or
//! `resp.take_stream()` to write the 101 yourself. `buffered` holds bytes
//! the client already sent after the request head: consume them first.
//! [`RawStream`] is `Plain(TcpStream)` or
//! `Tls(Box<rustls::StreamOwned<ServerConnection, TcpStream>>)` (Read +
//! Write; `tcp()` for timeouts and shutdown), with no read timeout and the
//! write timeout at [`Limits::write_timeout`]. The handler may move it to
//! other threads and return at once; the server never touches it again.
//!
//! `stream` holds the byte streams, `conn` reads request heads and bodies
//! off a connection, `request` is the parsed [`Request`], `response` the
//! [`ResponseWriter`], `server` the acceptor and the connection loop.

use std::time::Duration;

mod conn;
mod request;
mod response;
mod server;
mod stream;
#[cfg(test)]
mod tests;

pub use request::Request;
pub use response::ResponseWriter;
pub use server::{Server, Service, Settings};
pub use stream::{CancelToken, RawStream, Upgraded};

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

/// The fuzz targets' way in: a request head as the listener parses it,
/// then its target split and decoded as a Request does.
#[cfg(feature = "fuzzing")]
pub fn fuzz_head(buf: &[u8]) -> Option<String> {
    let (head, _) = conn::parse_head(buf, &Limits::default()).ok()??;
    let (path, _query) = request::split_target(&head.target).ok()?;
    Some(path)
}
