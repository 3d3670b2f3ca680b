//! `/healthz` (upstream healthz handler on healthzBindAddress:healthzPort):
//! `ok` while every check passes; otherwise 500 naming the failed checks.
//! The same handler answers /healthz on the kubelet's API ports.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::ServerError;
use rkubelet_http::{Limits, Request, ResponseWriter, Server, Service, Settings};
use rkubelet_util::shutdown::Shutdown;

/// Open healthz connections, each on its own thread; more get a 503. Its
/// clients are local probes that make one request at a time.
const MAX_CONNECTIONS: usize = 16;

pub type Check = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// A named health check, as upstream's healthz.HealthChecker.
pub struct NamedCheck {
    pub name: &'static str,
    pub check: Check,
}

pub struct Healthz {
    checks: Vec<NamedCheck>,
}

impl Healthz {
    pub fn new(checks: Vec<NamedCheck>) -> Arc<Self> {
        Arc::new(Healthz { checks })
    }

    /// Runs the checks named in `names` (the watchdog's subset): the
    /// first failure, named.
    pub fn check(&self, names: &[&str]) -> Result<(), String> {
        for c in self.checks.iter().filter(|c| names.contains(&c.name)) {
            (c.check)().map_err(|e| format!("{}: {e}", c.name))?;
        }
        Ok(())
    }

    /// Answers a path: (status code, body).
    pub fn handle(&self, url: &str) -> (u16, String) {
        let (path, query) = url.split_once('?').unwrap_or((url, ""));
        let verbose = query
            .split('&')
            .any(|kv| kv == "verbose" || kv == "verbose=true" || kv == "verbose=1");
        if let Some(name) = path.strip_prefix("/healthz/") {
            return match self.checks.iter().find(|c| c.name == name) {
                Some(c) => match (c.check)() {
                    Ok(()) => (200, "ok".into()),
                    Err(e) => (500, format!("internal server error: {e}\n")),
                },
                None => (404, "404 page not found\n".into()),
            };
        }
        if path != "/healthz" {
            return (404, "404 page not found\n".into());
        }
        let results: Vec<(&str, Result<(), String>)> =
            self.checks.iter().map(|c| (c.name, (c.check)())).collect();
        let failed = results.iter().any(|(_, r)| r.is_err());
        if !failed && !verbose {
            return (200, "ok".into());
        }
        let mut body = String::new();
        for (name, r) in &results {
            match r {
                Ok(()) => body.push_str(&format!("[+]{name} ok\n")),
                Err(e) => body.push_str(&format!("[-]{name} failed: {e}\n")),
            }
        }
        if failed {
            body.push_str("healthz check failed\n");
            (500, body)
        } else {
            body.push_str("healthz check passed\n");
            (200, body)
        }
    }

    /// Answers `req` with [`Healthz::handle`]'s status and body.
    pub fn respond<U>(&self, req: &Request<U>, resp: &mut ResponseWriter<'_>) -> io::Result<()> {
        let (code, body) = self.handle(req.target());
        resp.set_header("X-Content-Type-Options", "nosniff");
        resp.send(code, "text/plain; charset=utf-8", body.as_bytes())
    }

    /// Serves on `addr`: the acceptor is the thread named "healthz", each
    /// connection a "healthz-conn" thread; they stop when `shutdown`
    /// comes.
    pub fn serve(
        self: &Arc<Self>,
        addr: SocketAddr,
        shutdown: Shutdown,
    ) -> Result<JoinHandle<()>, ServerError> {
        let listener = TcpListener::bind(addr)
            .map_err(ServerError::io(format!("listen for healthz on {addr}")))?;
        log::info!("healthz server listening on http://{addr}/healthz");
        let settings = Settings {
            name: "healthz",
            conn_thread: "healthz-conn",
            reject_thread: "healthz-reject",
            tls: None,
            limits: Limits {
                max_connections: MAX_CONNECTIONS,
                ..Limits::default()
            },
        };
        Server::new(settings, HealthzService(Arc::clone(self)))
            .spawn(listener, shutdown)
            .map_err(ServerError::io("spawn healthz thread"))
    }
}

/// The healthz port: every path to [`Healthz::respond`], nobody asked who.
struct HealthzService(Arc<Healthz>);

impl Service for HealthzService {
    type Peer = ();
    type User = ();

    fn connected(&self, _client_cert: Option<&[u8]>) {}

    fn serve(&self, _: &(), req: &mut Request, resp: &mut ResponseWriter<'_>) -> io::Result<()> {
        self.0.respond(req, resp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthz(fail: bool) -> Arc<Healthz> {
        Healthz::new(vec![
            NamedCheck {
                name: "ping",
                check: Box::new(|| Ok(())),
            },
            NamedCheck {
                name: "pleg",
                check: Box::new(move || {
                    if fail {
                        Err("relist stuck".into())
                    } else {
                        Ok(())
                    }
                }),
            },
        ])
    }

    #[test]
    fn ok_when_all_pass() {
        assert_eq!(healthz(false).handle("/healthz"), (200, "ok".into()));
        let (code, body) = healthz(false).handle("/healthz?verbose");
        assert_eq!(code, 200);
        assert!(body.contains("[+]pleg ok"));
    }

    #[test]
    fn names_the_failed_check() {
        let (code, body) = healthz(true).handle("/healthz");
        assert_eq!(code, 500);
        assert!(body.contains("[+]ping ok"));
        assert!(body.contains("[-]pleg failed: relist stuck"));
        assert_eq!(healthz(true).handle("/healthz/pleg").0, 500);
        assert_eq!(healthz(true).handle("/healthz/ping").0, 200);
        assert_eq!(healthz(true).handle("/nope").0, 404);
    }

    #[test]
    fn serves_on_its_port_until_shutdown() {
        use std::io::{Read, Write};
        // A free port: bound and let go (serve binds the address it is given).
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap();
        let (trigger, shutdown) = rkubelet_util::shutdown::channel().unwrap();
        let thread = healthz(true).serve(addr, shutdown).unwrap();
        assert_eq!(thread.thread().name(), Some("healthz"));
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s.write_all(b"GET /healthz/pleg HTTP/1.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(
            out.starts_with("HTTP/1.1 500 Internal Server Error\r\n"),
            "{out}"
        );
        assert!(
            out.contains("Content-Type: text/plain; charset=utf-8\r\n"),
            "{out}"
        );
        assert!(
            out.ends_with("\r\n\r\ninternal server error: relist stuck\n"),
            "{out}"
        );
        drop(trigger);
        thread.join().unwrap();
    }
}
