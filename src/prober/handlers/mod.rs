//! Probe handlers (upstream `pkg/probe/{exec,http,tcp,grpc}`), also used by
//! lifecycle hooks. Each returns the verdict and a message: the command's
//! output, the response body, or why it failed. `Unknown` means the check
//! could not be run (a probe error, which upstream retries and reports as
//! "errored").

mod exec;
mod grpc;
mod http;
mod port;
mod tcp;

#[cfg(test)]
mod tests;

use super::ProbeResult;

pub use exec::{exec_verdict, run_exec};
pub use grpc::run_grpc;
pub(crate) use http::http_get;
#[cfg(test)]
pub use http::run_http_get;
pub use http::{hook_get, http_target, HttpTarget};
pub use port::resolve_port;
pub use tcp::run_tcp;

/// Upstream reads at most 10 KiB of command output or response body.
pub const MAX_PROBE_OUTPUT: usize = 10 * 1024;

/// The User-Agent of HTTP and gRPC probes (upstream `kube-probe/<major>.<minor>`).
pub const USER_AGENT: &str = "kube-probe/1.34";

/// A check's verdict; `warning` is a success upstream reports with a
/// ProbeWarning event (a redirect to another host that was not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub result: ProbeResult,
    pub warning: bool,
    pub output: String,
}

impl Outcome {
    pub fn new(result: ProbeResult, output: String) -> Self {
        Outcome {
            result,
            warning: false,
            output,
        }
    }

    pub fn error(message: impl Into<String>) -> Self {
        Outcome::new(ProbeResult::Unknown, message.into())
    }
}

impl From<(ProbeResult, String)> for Outcome {
    fn from((result, output): (ProbeResult, String)) -> Self {
        Outcome::new(result, output)
    }
}

/// Cuts `s` to at most `max` bytes, on a character boundary.
pub(crate) fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// `host:port`, with brackets around an IPv6 address (Go net.JoinHostPort).
pub(crate) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
