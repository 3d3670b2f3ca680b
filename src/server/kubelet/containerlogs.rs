//! `/containerLogs/{namespace}/{pod}/{container}` (upstream getContainerLogs):
//! PodLogOptions from the query, the file from the host, the text streamed
//! chunked.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::jiff::Timestamp;

use super::crilog::{copy_logs, FollowControl, FollowTiming, LogOptions, Streams};
use super::routes::{method_not_allowed, not_found};
use super::{CancelToken, Handler, HostError, KubeletHost, Request, ResponseWriter};

/// How often a follower asks the host whether the container still runs.
const STATUS_EVERY: Duration = Duration::from_secs(1);

pub(crate) struct ContainerLogs {
    pub host: Arc<dyn KubeletHost>,
    pub timing: FollowTiming,
}

type QueryError = (u16, String);

fn decode_error() -> QueryError {
    (400, r#"{"message": "Unable to decode query."}"#.into())
}

fn invalid() -> QueryError {
    (422, r#"{"message": "Invalid request."}"#.into())
}

/// Go's query bool: absent is false, "0"/"false" false, anything else true.
fn flag(req: &Request, name: &str) -> bool {
    req.query(name)
        .is_some_and(|v| !(v == "0" || v.eq_ignore_ascii_case("false")))
}

fn int(req: &Request, name: &str) -> Result<Option<i64>, QueryError> {
    match req.query(name) {
        None | Some("") => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| decode_error()),
    }
}

fn now_nanos() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

/// PodLogOptions as the kubelet decodes and validates them; also `previous`.
pub(crate) fn parse_options(req: &Request) -> Result<(LogOptions, bool), QueryError> {
    let mut tail = int(req, "tailLines")?;
    // Backwards compatibility: "tail", where "all" means no limit.
    match req.query("tail") {
        None | Some("") => {}
        Some("all") => tail = None,
        Some(t) => tail = Some(t.parse().map_err(|_| decode_error())?),
    }
    let limit = int(req, "limitBytes")?;
    let since_seconds = int(req, "sinceSeconds")?;
    let since_time = match req.query("sinceTime") {
        None | Some("") | Some("null") => None,
        Some(t) => Some(t.parse::<Timestamp>().map_err(|_| decode_error())?),
    };
    let streams = match req.query("stream") {
        None | Some("All") => Streams::All,
        Some("Stdout") => Streams::Stdout,
        Some("Stderr") => Streams::Stderr,
        Some(other) => return Err((400, format!("invalid stream type {other:?}"))),
    };
    let negative = |v: Option<i64>, min: i64| v.is_some_and(|n| n < min);
    if negative(tail, 0) || negative(limit, 1) || negative(since_seconds, 1) {
        return Err(invalid());
    }
    if (since_seconds.is_some() && since_time.is_some())
        || (streams != Streams::All && tail.is_some())
    {
        return Err(invalid());
    }
    let since_nanos = since_time
        .map(|t| t.as_nanosecond())
        .or_else(|| since_seconds.map(|s| now_nanos() - i128::from(s) * 1_000_000_000));
    let opts = LogOptions {
        follow: flag(req, "follow"),
        timestamps: flag(req, "timestamps"),
        tail_lines: tail.and_then(|t| u64::try_from(t).ok()),
        limit_bytes: limit.and_then(|l| u64::try_from(l).ok()),
        since_nanos,
        streams,
    };
    Ok((opts, flag(req, "previous")))
}

/// Follow mode backed by the host and the client connection.
struct Control {
    host: Arc<dyn KubeletHost>,
    target: [String; 3],
    path: PathBuf,
    running: bool,
    checked: Instant,
    cancel: CancelToken,
}

impl FollowControl for Control {
    fn cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    fn running(&mut self) -> bool {
        if self.running && self.checked.elapsed() >= STATUS_EVERY {
            self.checked = Instant::now();
            let [ns, pod, c] = &self.target;
            self.running = matches!(
                self.host.container_log(ns, pod, c, false),
                Ok((p, true)) if p == self.path
            );
        }
        self.running
    }
}

impl Handler for ContainerLogs {
    fn handle(&self, req: &mut Request, resp: &mut ResponseWriter<'_>) -> io::Result<()> {
        if req.method() != "GET" {
            return method_not_allowed(resp, "GET");
        }
        let rest = req.path().strip_prefix("/containerLogs/").unwrap_or("");
        let parts: Vec<&str> = rest.split('/').collect();
        let [ns, pod, container] = parts[..] else {
            return not_found(resp);
        };
        for (value, what) in [
            (pod, "podID"),
            (container, "container name"),
            (ns, "podNamespace"),
        ] {
            if value.is_empty() {
                return resp.send_text(400, &format!(r#"{{"message": "Missing {what}."}}"#));
            }
        }
        let (opts, previous) = match parse_options(req) {
            Ok(o) => o,
            Err((code, msg)) => return resp.send_text(code, &msg),
        };
        let (path, running) = match self.host.container_log(ns, pod, container, previous) {
            Ok(found) => found,
            Err(HostError::NotFound(msg)) => return resp.send_text(404, &msg),
            Err(HostError::Invalid(msg)) => return resp.send_text(400, &msg),
        };
        // Fail before the 200 when the file cannot be read.
        if let Err(e) = File::open(&path) {
            return resp.send_text(
                400,
                &format!("failed to open log file {}: {e}", path.display()),
            );
        }
        let mut ctl = Control {
            host: self.host.clone(),
            target: [ns.to_string(), pod.to_string(), container.to_string()],
            path: path.clone(),
            running,
            checked: Instant::now(),
            cancel: resp.cancel_token(),
        };
        resp.set_header("Content-Type", "text/plain; charset=utf-8");
        copy_logs(&path, &opts, resp, &mut ctl, &self.timing)
    }
}
