//! HTTP GET probes (upstream `pkg/probe/http`): success for a status in
//! 200..400. Certificates are not verified; redirects are followed up to 10
//! times on the same host, and a redirect to another host is not followed
//! but counts as a success with a warning.

use std::io::Read;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, HTTPGetAction};

use super::{join_host_port, resolve_port, truncate, Outcome, MAX_PROBE_OUTPUT, USER_AGENT};
use crate::prober::ProbeResult;

/// Requests per probe, the first included (Go's http.Client stops at 10).
const MAX_REQUESTS: usize = 10;

/// Where an httpGet probe or hook goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    /// `http` or `https`.
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// Path and query; empty means `/`.
    pub path: String,
    /// Extra headers; a `Host` header overrides the request's Host.
    pub headers: Vec<(String, String)>,
}

impl HttpTarget {
    pub fn url(&self) -> String {
        let path = if self.path.starts_with('/') {
            self.path.clone()
        } else {
            format!("/{}", self.path)
        };
        format!(
            "{}://{}{}",
            self.scheme,
            join_host_port(&self.host, self.port),
            path
        )
    }
}

/// The target of an httpGet action; the host defaults to the pod IP
/// (upstream NewRequestForHTTPGetAction).
pub fn http_target(
    action: &HTTPGetAction,
    container: &Container,
    pod_ip: Option<&str>,
) -> Result<HttpTarget, String> {
    let scheme = action
        .scheme
        .as_deref()
        .unwrap_or("http")
        .to_ascii_lowercase();
    let host = match action.host.as_deref().filter(|h| !h.is_empty()) {
        Some(h) => h.to_string(),
        None => pod_ip
            .filter(|ip| !ip.is_empty())
            .ok_or("the pod has no IP yet")?
            .to_string(),
    };
    Ok(HttpTarget {
        scheme,
        host,
        port: resolve_port(&action.port, container)?,
        path: action.path.clone().unwrap_or_default(),
        headers: action
            .http_headers
            .iter()
            .flatten()
            .map(|h| (h.name.clone(), h.value.clone()))
            .collect(),
    })
}

/// GETs the target within `timeout` (redirects included).
#[cfg(test)]
pub fn run_http_get(target: &HttpTarget, timeout: Duration) -> (ProbeResult, String) {
    let o = http_get(target, timeout);
    (o.result, o.output)
}

/// A lifecycle hook's GET (upstream `runHTTPHandler`): only a request that
/// gets no response fails it. Any status passes, since Go's client reports
/// none as an error; a redirect is not followed (upstream follows it, and
/// the answer's status still does not matter).
pub fn hook_get(target: &HttpTarget, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    get(&target.url(), target, true, deadline).map(|resp| drop(read_body(resp)))
}

pub(crate) fn http_get(target: &HttpTarget, timeout: Duration) -> Outcome {
    let deadline = Instant::now() + timeout;
    let origin = hostname(&target.url());
    let mut url = target.url();
    let mut keep_host = true;
    for sent in 1..=MAX_REQUESTS {
        let resp = match get(&url, target, keep_host, deadline) {
            Ok(resp) => resp,
            Err(msg) => return Outcome::new(ProbeResult::Failure, msg),
        };
        let Some(next) = redirect_location(&resp, &url) else {
            return verdict(resp);
        };
        if hostname(&next) != origin {
            return verdict(resp);
        }
        if sent == MAX_REQUESTS {
            break;
        }
        // Go keeps an overridden Host only across relative redirects.
        keep_host &= !has_scheme(resp.header("location").unwrap_or_default());
        url = next;
    }
    Outcome::new(
        ProbeResult::Failure,
        format!("Get {url:?}: stopped after {MAX_REQUESTS} redirects"),
    )
}

/// The agent every probe shares: no redirects (followed by hand), no
/// connection reuse (upstream disables keep-alives), no certificate checks.
fn agent() -> &'static ureq::Agent {
    static AGENT: OnceLock<ureq::Agent> = OnceLock::new();
    AGENT.get_or_init(|| {
        let builder = ureq::AgentBuilder::new()
            .redirects(0)
            .max_idle_connections(0);
        let insecure =
            crate::client::tls::client_config(crate::client::tls::ServerTrust::Insecure, None);
        match insecure {
            Ok((tls, _)) => builder.tls_config(tls),
            Err(_) => builder,
        }
        .build()
    })
}

fn get(
    url: &str,
    target: &HttpTarget,
    keep_host: bool,
    deadline: Instant,
) -> Result<ureq::Response, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(format!("Get {url:?}: context deadline exceeded"));
    }
    let mut req = agent().get(url).timeout(left);
    for (name, value) in &target.headers {
        if keep_host || !name.eq_ignore_ascii_case("host") {
            req = req.set(name, value);
        }
    }
    if !has_header(target, "user-agent") {
        req = req.set("User-Agent", USER_AGENT);
    }
    match req.call() {
        Ok(resp) | Err(ureq::Error::Status(_, resp)) => Ok(resp),
        Err(e) => Err(format!("Get {url:?}: {e}")),
    }
}

fn has_header(target: &HttpTarget, name: &str) -> bool {
    target
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case(name))
}

/// The next URL when `resp` is a redirect Go's client would follow.
fn redirect_location(resp: &ureq::Response, url: &str) -> Option<String> {
    if !matches!(resp.status(), 301 | 302 | 303 | 307 | 308) {
        return None;
    }
    let location = resp.header("location").filter(|l| !l.is_empty())?;
    Some(resolve_location(url, location))
}

/// The verdict on a final response; the body is read up to 10 KiB.
fn verdict(resp: ureq::Response) -> Outcome {
    let status = resp.status();
    let body = read_body(resp);
    match status {
        200..=299 => Outcome::new(ProbeResult::Success, body),
        300..=399 => Outcome {
            result: ProbeResult::Success,
            warning: true,
            output: format!("Probe terminated redirects, Response body: {body}"),
        },
        // The body stays out of user-facing messages (upstream issue 99425).
        _ => Outcome::new(
            ProbeResult::Failure,
            format!("HTTP probe failed with statuscode: {status}"),
        ),
    }
}

fn read_body(resp: ureq::Response) -> String {
    let mut buf = Vec::new();
    // A body cut short by the deadline still lets the status decide.
    let _ = resp
        .into_reader()
        .take(MAX_PROBE_OUTPUT as u64)
        .read_to_end(&mut buf);
    truncate(String::from_utf8_lossy(&buf).into_owned(), MAX_PROBE_OUTPUT)
}

fn has_scheme(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

/// `location` resolved against `base` (absolute, scheme-relative,
/// absolute-path or relative-path references).
fn resolve_location(base: &str, location: &str) -> String {
    if has_scheme(location) {
        return location.to_string();
    }
    let (scheme, rest) = base.split_once("://").unwrap_or(("http", base));
    if let Some(authority_path) = location.strip_prefix("//") {
        return format!("{scheme}://{authority_path}");
    }
    let path_at = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(path_at);
    if location.starts_with('/') {
        return format!("{scheme}://{authority}{location}");
    }
    let path = path.split(['?', '#']).next().unwrap_or_default();
    let dir = path.rfind('/').map_or("/", |i| &path[..=i]);
    format!("{scheme}://{authority}{dir}{location}")
}

/// The lower-cased host of an absolute URL, without port or brackets.
fn hostname(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    host.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_locations() {
        let base = "http://10.0.0.1:8080/a/b?x=1";
        assert_eq!(resolve_location(base, "/c"), "http://10.0.0.1:8080/c");
        assert_eq!(resolve_location(base, "c"), "http://10.0.0.1:8080/a/c");
        assert_eq!(resolve_location(base, "//h:1/p"), "http://h:1/p");
        assert_eq!(resolve_location(base, "HTTPS://x/"), "HTTPS://x/");
        assert_eq!(hostname("http://[::1]:80/x"), "::1");
        assert_eq!(hostname("https://User@Example.com:443"), "example.com");
    }

    #[test]
    fn url_of_target() {
        let t = HttpTarget {
            scheme: "http".into(),
            host: "fd00::1".into(),
            port: 80,
            path: "healthz?full=1".into(),
            headers: vec![],
        };
        assert_eq!(t.url(), "http://[fd00::1]:80/healthz?full=1");
    }
}
