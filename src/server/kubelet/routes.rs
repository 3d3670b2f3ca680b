//! Routing (Go ServeMux rules: a pattern ending in `/` matches its subtree,
//! others match exactly, the longest wins, `/x` redirects to a registered
//! `/x/`) and the built-in endpoints.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::List;

use super::containerlogs::ContainerLogs;
use super::crilog::FollowTiming;
use super::nodelogs::NodeLogs;
use super::{Handler, KubeletHost, Request, ResponseWriter, ServerConfig};
use crate::server::healthz::Healthz;

/// Where a path goes.
pub(crate) enum Route<'a> {
    Handler(&'a Arc<dyn Handler>),
    Redirect(String),
    NotFound,
}

#[derive(Default)]
pub(crate) struct Router {
    routes: Vec<(String, Arc<dyn Handler>)>,
}

impl Router {
    /// Registers `pattern`, replacing an earlier handler for it.
    pub fn add(&mut self, pattern: &str, handler: Arc<dyn Handler>) {
        self.routes.retain(|(p, _)| p != pattern);
        self.routes.push((pattern.to_string(), handler));
    }

    pub fn route(&self, path: &str) -> Route<'_> {
        let best = self
            .routes
            .iter()
            .filter(|(p, _)| matches(p, path))
            .max_by_key(|(p, _)| p.len());
        if let Some((_, h)) = best {
            return Route::Handler(h);
        }
        let with_slash = format!("{path}/");
        if self.routes.iter().any(|(p, _)| *p == with_slash) {
            return Route::Redirect(with_slash);
        }
        Route::NotFound
    }
}

fn matches(pattern: &str, path: &str) -> bool {
    if pattern.ends_with('/') {
        path.starts_with(pattern)
    } else {
        path == pattern
    }
}

pub(crate) fn not_found(resp: &mut ResponseWriter<'_>) -> io::Result<()> {
    resp.send_text(404, "404 page not found\n")
}

pub(crate) fn method_not_allowed(resp: &mut ResponseWriter<'_>, allow: &str) -> io::Result<()> {
    resp.set_header("Allow", allow);
    resp.send_text(405, "Method Not Allowed")
}

/// A handler from a closure.
struct FnHandler<F>(F);

impl<F> Handler for FnHandler<F>
where
    F: Fn(&mut Request, &mut ResponseWriter<'_>) -> io::Result<()> + Send + Sync,
{
    fn handle(&self, req: &mut Request, resp: &mut ResponseWriter<'_>) -> io::Result<()> {
        (self.0)(req, resp)
    }
}

/// Wraps a closure as a route handler.
pub fn handler<F>(f: F) -> Arc<dyn Handler>
where
    F: Fn(&mut Request, &mut ResponseWriter<'_>) -> io::Result<()> + Send + Sync + 'static,
{
    Arc::new(FnHandler(f))
}

/// 405 with `message`, for endpoints that are switched off.
fn disabled(message: &'static str) -> Arc<dyn Handler> {
    handler(move |_, resp| resp.send_text(405, message))
}

fn healthz_handler(healthz: Arc<Healthz>) -> Arc<dyn Handler> {
    handler(move |req, resp| healthz.respond(req, resp))
}

fn pod_list(pods: Vec<Pod>) -> List<Pod> {
    List {
        items: pods,
        ..Default::default()
    }
}

fn pods_handler(host: Arc<dyn KubeletHost>, running: bool) -> Arc<dyn Handler> {
    handler(move |req, resp| {
        if req.method() != "GET" {
            return method_not_allowed(resp, "GET");
        }
        let pods = if running {
            host.running_pods()
        } else {
            host.pods()
        };
        resp.send_json(200, &pod_list(pods))
    })
}

fn configz_handler(host: Arc<dyn KubeletHost>) -> Arc<dyn Handler> {
    handler(move |_, resp| {
        let body = serde_json::json!({ "kubeletconfig": host.config_json() });
        resp.send_json(200, &body)
    })
}

/// Debug endpoints answered with 405 when enableDebuggingHandlers is off.
const DEBUG_PATHS: [&str; 8] = [
    "/run/",
    "/exec/",
    "/attach/",
    "/portForward/",
    "/containerLogs/",
    "/runningpods/",
    "/debug/pprof/",
    "/logs/",
];

/// Whether an extra route is a debug endpoint (served only with debugging on).
fn is_debug_route(pattern: &str) -> bool {
    let p = pattern.trim_end_matches('/');
    DEBUG_PATHS
        .iter()
        .chain(&["/checkpoint/", "/configz", "/debug/"])
        .any(|d| {
            let d = d.trim_end_matches('/');
            p == d || p.starts_with(&format!("{d}/"))
        })
}

/// Routes served on both ports.
fn common(host: &Arc<dyn KubeletHost>, healthz: &Arc<Healthz>) -> Router {
    let mut r = Router::default();
    let h = healthz_handler(healthz.clone());
    r.add("/healthz", h.clone());
    r.add("/healthz/", h);
    r.add("/pods", pods_handler(host.clone(), false));
    for p in DEBUG_PATHS {
        r.add(p, disabled("Debug endpoints are disabled."));
    }
    r
}

/// The authenticated port's routes; `extra` (stats, metrics, streaming)
/// replace built-ins of the same pattern.
pub(crate) fn secure(
    cfg: &ServerConfig,
    host: &Arc<dyn KubeletHost>,
    healthz: &Arc<Healthz>,
    extra: &[(String, Arc<dyn Handler>)],
) -> Router {
    let mut r = common(host, healthz);
    if cfg.enable_debugging_handlers {
        debug_routes(&mut r, cfg, host);
    }
    for (pattern, h) in extra {
        if is_debug_route(pattern) && !cfg.enable_debugging_handlers {
            log::info!("debugging handlers are disabled: not serving {pattern}");
            continue;
        }
        r.add(pattern, h.clone());
    }
    r
}

fn debug_routes(r: &mut Router, cfg: &ServerConfig, host: &Arc<dyn KubeletHost>) {
    let timing = FollowTiming {
        poll: Duration::from_millis(200),
        idle_timeout: cfg.streaming_idle_timeout,
    };
    r.add(
        "/containerLogs/",
        Arc::new(ContainerLogs {
            host: host.clone(),
            timing,
        }),
    );
    r.add("/runningpods/", pods_handler(host.clone(), true));
    r.add("/configz", configz_handler(host.clone()));
    if cfg.enable_system_log_handler {
        r.add(
            "/logs/",
            Arc::new(NodeLogs {
                root: cfg.node_logs_dir.clone(),
            }),
        );
    } else {
        r.add("/logs/", disabled("logs endpoint is disabled."));
    }
    r.add("/debug/flags/v", handler(put_verbosity));
    // Streaming endpoints answer 404 until their handlers are plugged in;
    // Go's pprof profiles have no counterpart here (404).
    for p in [
        "/run/",
        "/exec/",
        "/attach/",
        "/portForward/",
        "/debug/pprof/",
    ] {
        r.add(p, handler(|_, resp| not_found(resp)));
    }
}

/// `PUT /debug/flags/v` with a number sets the log verbosity (upstream's
/// klog setter, same answers).
fn put_verbosity(req: &mut Request, resp: &mut ResponseWriter<'_>) -> io::Result<()> {
    if req.method() != "PUT" {
        resp.set_header("Allow", "PUT");
        return resp.send_text(405, "only PUT is allowed\n");
    }
    let body = String::from_utf8_lossy(req.body()).trim().to_string();
    match body.parse::<u8>() {
        Ok(v) => {
            crate::util::logging::set_verbosity(v);
            log::info!("log verbosity set to {v} through /debug/flags/v");
            resp.send_text(
                200,
                &format!("successfully set klog.logging.verbosity to {v}\n"),
            )
        }
        Err(e) => resp.send_text(400, &format!("error: {body:?} is not a verbosity: {e}\n")),
    }
}

/// The read-only port: healthz, pods, and the stats/metrics extras.
pub(crate) fn read_only(
    host: &Arc<dyn KubeletHost>,
    healthz: &Arc<Healthz>,
    extra: &[(String, Arc<dyn Handler>)],
) -> Router {
    let mut r = common(host, healthz);
    for (pattern, h) in extra {
        if pattern.starts_with("/stats") || pattern.starts_with("/metrics") {
            r.add(pattern, h.clone());
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servemux_matching() {
        let mut r = Router::default();
        let a = handler(|_, resp| resp.send_text(200, "a"));
        r.add("/stats/", a.clone());
        r.add("/stats/summary", a.clone());
        r.add("/metrics", a);
        assert!(matches!(r.route("/stats/summary"), Route::Handler(_)));
        assert!(matches!(r.route("/stats/x/y"), Route::Handler(_)));
        assert!(matches!(r.route("/metrics"), Route::Handler(_)));
        assert!(matches!(r.route("/metrics/x"), Route::NotFound));
        assert!(matches!(r.route("/stats"), Route::Redirect(p) if p == "/stats/"));
        assert!(matches!(r.route("/nope"), Route::NotFound));
        assert!(is_debug_route("/exec/"));
        assert!(is_debug_route("/checkpoint/"));
        assert!(!is_debug_route("/stats/"));
        assert!(!is_debug_route("/metrics/resource"));
    }
}
