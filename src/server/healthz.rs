//! `/healthz` (upstream healthz handler on healthzBindAddress:healthzPort):
//! `ok` while every check passes; otherwise 500 naming the failed checks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use crossbeam_channel::Receiver;
use tiny_http::{Header, Response, Server};

/// How often the server thread looks at the shutdown channel.
const POLL: Duration = Duration::from_millis(500);

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

    /// Serves on `addr` from a thread named "healthz" until `shutdown` closes.
    pub fn serve(
        self: &Arc<Self>,
        addr: SocketAddr,
        shutdown: Receiver<()>,
    ) -> anyhow::Result<JoinHandle<()>> {
        let server = Server::http(addr)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("listen for healthz on {addr}"))?;
        log::info!("healthz server listening on http://{addr}/healthz");
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("healthz".into())
            .spawn(move || loop {
                if let Err(crossbeam_channel::TryRecvError::Disconnected) = shutdown.try_recv() {
                    return;
                }
                match server.recv_timeout(POLL) {
                    Ok(Some(req)) => {
                        let (code, body) = me.handle(req.url());
                        let mut resp = Response::from_string(body).with_status_code(code);
                        if let Ok(h) =
                            Header::from_bytes("Content-Type", "text/plain; charset=utf-8")
                        {
                            resp = resp.with_header(h);
                        }
                        if let Err(e) = req.respond(resp) {
                            log::debug!("healthz: write response: {e}");
                        }
                    }
                    Ok(None) => {}
                    Err(e) => log::warn!("healthz: accept: {e}"),
                }
            })
            .context("spawn healthz thread")
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
}
