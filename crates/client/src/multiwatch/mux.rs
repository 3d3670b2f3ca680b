//! The `object-watches` thread: one poll(2) loop over every watch's
//! connection, the eventfd, and the watches' timers (backoff, rate limit,
//! request and idle deadlines).

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::{Duration, Instant};

use rkubelet_util::backoff::Exponential;
use rkubelet_util::{jitter, lock};

use super::chunked::LineSplitter;
use super::conn::{Conn, Endpoint};
use super::{Flow, Shared, WatchId, WatchSink, WatchTarget};
use crate::paths::with_query;
use crate::watch::{into_result, parse_event, MAX_EVENT_LINE};
use crate::{ApiError, WatchEventType};

/// client-go's minWatchTimeout; each watch asks for [1, 2) times it.
const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);
/// Added to `timeoutSeconds` for the no-data deadline of a watch.
const WATCH_IDLE_SLACK: Duration = Duration::from_secs(30);
const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const BACKOFF_RESET: Duration = Duration::from_secs(120);
/// A watch that ends this fast with no events is a failure, not a timeout.
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);
/// Largest LIST body (one object: Secrets and ConfigMaps are at most 1 MiB).
const MAX_LIST_BODY: usize = 16 << 20;
const MAX_ERROR_BODY: usize = 1 << 20;
/// Longest poll(2) sleep, so a missed wakeup costs little.
const MAX_POLL: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    List,
    Watch,
}

enum Phase {
    /// Waiting for a backoff or a rate-limiter token; `reserved` once the
    /// token is taken.
    Pending {
        at: Instant,
        action: Action,
        reserved: bool,
    },
    Request {
        action: Action,
        /// Boxed: a TLS connection's state is large.
        conn: Box<Conn>,
        status: Option<u16>,
        body: Vec<u8>,
        lines: LineSplitter,
        started: Instant,
        /// Lists: the request timeout. Watches: the no-data deadline.
        deadline: Instant,
        idle: Duration,
        events: u64,
    },
}

struct Watch {
    target: WatchTarget,
    sink: Weak<dyn WatchSink>,
    /// Resume point; empty until the first list.
    rv: String,
    phase: Phase,
    backoff: Exponential,
}

/// Why a watch's request ended.
enum End {
    /// Keep going with the next phase (already set).
    Continue,
    /// Remove the watch (Flow::Stop or the sink is gone).
    Remove,
}

pub(crate) fn run(shared: &Shared) {
    let client = &shared.client;
    let ep = match Endpoint::parse(client.server(), client.tls_config()) {
        Ok(ep) => ep,
        Err(e) => {
            log::error!("object watches cannot start: {e}");
            return;
        }
    };
    let mut watches: HashMap<WatchId, Watch> = HashMap::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut ids: Vec<WatchId> = Vec::new();
    let mut generation = client.connection_generation();
    while !shared.stop.load(Ordering::SeqCst) {
        apply_changes(shared, &mut watches);
        if client.connection_generation() != generation {
            generation = client.connection_generation();
            reconnect_all(&mut watches);
        }
        let now = Instant::now();
        let mut next = now + MAX_POLL;
        watches.retain(|_, w| {
            let keep = matches!(w.on_timer(shared, &ep, now), End::Continue);
            next = next.min(w.due());
            keep
        });
        fds.clear();
        ids.clear();
        fds.push(pollfd(shared.wake.as_raw_fd(), libc::POLLIN));
        for (id, w) in &watches {
            if let Phase::Request { conn, .. } = &w.phase {
                fds.push(pollfd(conn.fd(), conn.interest()));
                ids.push(*id);
            }
        }
        let wait = next.saturating_duration_since(Instant::now());
        // Rounded up so a timer is never polled for just before it is due.
        let ms = i32::try_from(wait.as_millis() + 1).unwrap_or(i32::MAX);
        let nfds = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
        // SAFETY: fds is a valid, initialised array of nfds pollfd structs.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), nfds, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                log::warn!("object watches: poll: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        if fds[0].revents != 0 {
            drain_eventfd(shared);
        }
        for (pfd, id) in fds[1..].iter().zip(&ids) {
            if pfd.revents == 0 {
                continue;
            }
            let Some(w) = watches.get_mut(id) else {
                continue;
            };
            if let End::Remove = w.on_ready(*id) {
                watches.remove(id);
            }
        }
    }
}

/// After a certificate rotation (the client closed its connections): every
/// open request is dropped and every watch starts again at once, without
/// its back-off, so each connection presents the new certificate (upstream's
/// rotating transport closes all connections; the reflectors reconnect).
fn reconnect_all(watches: &mut HashMap<WatchId, Watch>) {
    let mut open = 0;
    for w in watches.values_mut() {
        if matches!(w.phase, Phase::Request { .. }) {
            open += 1;
        }
        let next = match &w.phase {
            Phase::Request {
                action: Action::Watch,
                ..
            } if !w.rv.is_empty() => Action::Watch,
            Phase::Pending { action, .. } => *action,
            Phase::Request { .. } => Action::List,
        };
        w.backoff.reset();
        w.start_now(next);
    }
    log::info!(
        "object watches: the client certificate changed; reconnecting {} watches ({open} open)",
        watches.len()
    );
}

fn pollfd(fd: i32, events: i16) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

fn drain_eventfd(shared: &Shared) {
    if let Ok(fd) = shared.wake.try_clone() {
        let mut buf = [0u8; 8];
        let _ = File::from(fd).read(&mut buf);
    }
}

fn apply_changes(shared: &Shared, watches: &mut HashMap<WatchId, Watch>) {
    let changes = std::mem::take(&mut *lock(&shared.changes));
    for (id, change) in changes {
        match change {
            None => {
                watches.remove(&id);
            }
            Some((target, sink)) => {
                let w = Watch {
                    target,
                    sink,
                    rv: String::new(),
                    phase: Phase::Pending {
                        at: Instant::now(),
                        action: Action::List,
                        reserved: false,
                    },
                    backoff: Exponential::new(BACKOFF_INITIAL, BACKOFF_MAX)
                        .jitter(1.0)
                        .reset_after(BACKOFF_RESET),
                };
                watches.insert(id, w);
            }
        }
    }
}

impl Watch {
    /// When this watch next needs the loop without socket activity.
    fn due(&self) -> Instant {
        match &self.phase {
            Phase::Pending { at, .. } => *at,
            Phase::Request { deadline, .. } => *deadline,
        }
    }

    fn retry(&mut self, action: Action) {
        self.phase = Phase::Pending {
            at: Instant::now() + self.backoff.next_delay(),
            action,
            reserved: false,
        };
    }

    fn on_timer(&mut self, shared: &Shared, ep: &Endpoint, now: Instant) -> End {
        if self.sink.strong_count() == 0 {
            return End::Remove;
        }
        match &mut self.phase {
            Phase::Pending { at, .. } if *at > now => {}
            Phase::Pending {
                at,
                reserved: reserved @ false,
                ..
            } => {
                // Wait for the token in the loop rather than sleeping here.
                *reserved = true;
                let delay = shared.client.reserve_token();
                if !delay.is_zero() {
                    *at = now + delay;
                }
                if delay.is_zero() {
                    return self.on_timer(shared, ep, now);
                }
            }
            Phase::Pending { action, .. } => {
                let action = *action;
                self.start(action, shared, ep);
            }
            Phase::Request {
                deadline, action, ..
            } if *deadline <= now => {
                let action = *action;
                let what = match action {
                    Action::List => "list timed out",
                    Action::Watch => "watch idle: no data within its timeout",
                };
                log::info!("{}: {what}", self.describe());
                self.retry(action);
            }
            Phase::Request { .. } => {}
        }
        End::Continue
    }

    fn describe(&self) -> String {
        format!("{} {}", self.target.collection, self.target.field_selector)
    }

    fn start(&mut self, action: Action, shared: &Shared, ep: &Endpoint) {
        let client = &shared.client;
        let selector = ("fieldSelector", self.target.field_selector.as_str());
        let (path, idle) = match action {
            Action::List => (
                with_query(&self.target.collection, &[selector]),
                client.timeout(),
            ),
            Action::Watch => {
                let timeout = jitter(MIN_WATCH_TIMEOUT, 1.0);
                let secs = timeout.as_secs().to_string();
                let params = [
                    selector,
                    ("watch", "1"),
                    ("resourceVersion", self.rv.as_str()),
                    ("allowWatchBookmarks", "true"),
                    ("timeoutSeconds", secs.as_str()),
                ];
                let idle = Duration::from_secs(timeout.as_secs()) + WATCH_IDLE_SLACK;
                (with_query(&self.target.collection, &params), idle)
            }
        };
        let opened = request_bytes(client, ep, &path).and_then(|req| Conn::open(ep, req));
        match opened {
            Ok(conn) => {
                let now = Instant::now();
                // Until the head arrives, a watch is held to the request timeout too.
                let deadline = now + idle.min(client.timeout());
                self.phase = Phase::Request {
                    action,
                    conn: Box::new(conn),
                    status: None,
                    body: Vec::new(),
                    lines: LineSplitter::new(MAX_EVENT_LINE),
                    started: now,
                    deadline,
                    idle,
                    events: 0,
                };
            }
            Err(e) => {
                log::info!("GET {path}: {e}");
                self.retry(action);
            }
        }
    }

    fn on_ready(&mut self, id: WatchId) -> End {
        let desc = self.describe();
        let Phase::Request {
            action,
            conn,
            status,
            body,
            lines,
            started,
            deadline,
            idle,
            events,
        } = &mut self.phase
        else {
            return End::Continue;
        };
        let action = *action;
        let progress = match conn.advance() {
            Ok(p) => p,
            Err(e) => {
                log::info!("{desc}: {e}");
                let next = if action == Action::List || self.rv.is_empty() {
                    Action::List
                } else {
                    Action::Watch
                };
                self.retry(next);
                return End::Continue;
            }
        };
        if progress.status.is_some() {
            *status = progress.status;
        }
        let ok = status.is_some_and(|s| (200..300).contains(&s));
        if action == Action::Watch && ok {
            if progress.status.is_some() || !progress.body.is_empty() {
                *deadline = Instant::now() + *idle;
            }
            let result = lines.push(&progress.body);
            let (started, n) = (*started, *events);
            let mut delivered = 0;
            let end = match result {
                Ok(ls) => self.deliver_lines(id, ls, &mut delivered),
                Err(e) => Err(Failure::Other(e)),
            };
            if let Phase::Request { events, .. } = &mut self.phase {
                *events += delivered;
            }
            return match end {
                Ok(Flow::Stop) => End::Remove,
                Ok(Flow::Continue) if progress.done => {
                    // The server ended the watch (its timeout): resume at once
                    // unless it was a very short one without events.
                    if n + delivered == 0 && started.elapsed() < VERY_SHORT_WATCH {
                        self.retry(Action::Watch);
                    } else {
                        self.backoff.reset();
                        self.start_now(Action::Watch);
                    }
                    End::Continue
                }
                Ok(Flow::Continue) => End::Continue,
                Err(f) => {
                    log::info!("{}: {}", self.describe(), f.message());
                    self.retry(f.next_action());
                    End::Continue
                }
            };
        }
        let limit = if ok { MAX_LIST_BODY } else { MAX_ERROR_BODY };
        if body.len() + progress.body.len() > limit {
            log::warn!("{desc}: response larger than {limit} bytes");
            self.retry(Action::List);
            return End::Continue;
        }
        body.extend_from_slice(&progress.body);
        if !progress.done {
            return End::Continue;
        }
        let code = status.unwrap_or(0);
        let body = std::mem::take(body);
        if !ok {
            let err = ApiError::from_response(code, &body, &desc);
            log::info!("{err}");
            // 410 on a watch: the resourceVersion is too old; relist. A
            // failed list or any other watch error: back off, then list or
            // resume as the reflector does.
            let next = match action {
                Action::Watch if !err.is_gone() && (err.is_too_many_requests() || code >= 500) => {
                    Action::Watch
                }
                _ => Action::List,
            };
            self.retry(next);
            return End::Continue;
        }
        self.on_list(id, &body)
    }

    fn start_now(&mut self, action: Action) {
        self.phase = Phase::Pending {
            at: Instant::now(),
            action,
            reserved: false,
        };
    }

    fn on_list(&mut self, id: WatchId, body: &[u8]) -> End {
        let parsed: Result<serde_json::Value, _> = serde_json::from_slice(body);
        let mut list = match parsed {
            Ok(v) if v.get("items").is_some_and(|i| i.is_array() || i.is_null()) => v,
            Ok(_) => {
                log::warn!("{}: list response has no items", self.describe());
                self.retry(Action::List);
                return End::Continue;
            }
            Err(e) => {
                log::warn!("{}: decoding list: {e}", self.describe());
                self.retry(Action::List);
                return End::Continue;
            }
        };
        let rv = list["metadata"]["resourceVersion"].as_str().unwrap_or("");
        self.rv = rv.to_string();
        let items = match list["items"].take() {
            serde_json::Value::Array(items) => items,
            _ => Vec::new(),
        };
        let Some(sink) = self.sink.upgrade() else {
            return End::Remove;
        };
        if sink.replace(id, items) == Flow::Stop {
            return End::Remove;
        }
        self.backoff.reset();
        self.start_now(Action::Watch);
        End::Continue
    }

    /// Hands complete event lines to the sink, tracking the resourceVersion.
    fn deliver_lines(
        &mut self,
        id: WatchId,
        lines: Vec<Vec<u8>>,
        delivered: &mut u64,
    ) -> Result<Flow, Failure> {
        let request = self.describe();
        for line in lines {
            let text = line.trim_ascii();
            if text.is_empty() {
                continue;
            }
            let ev = parse_event(text, &request)
                .and_then(|ev| into_result(ev, &request))
                .map_err(Failure::Api)?;
            if let Some(rv) = ev.resource_version() {
                self.rv = rv.to_string();
            }
            if ev.kind == WatchEventType::Bookmark {
                continue;
            }
            *delivered += 1;
            let Some(sink) = self.sink.upgrade() else {
                return Ok(Flow::Stop);
            };
            if sink.event(id, ev) == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }
}

enum Failure {
    Api(ApiError),
    Other(String),
}

impl Failure {
    fn message(&self) -> String {
        match self {
            Failure::Api(e) => e.to_string(),
            Failure::Other(s) => s.clone(),
        }
    }

    /// 410 Gone (ERROR event) relists; a malformed event relists too, as
    /// the reflector does for errors it does not know.
    fn next_action(&self) -> Action {
        match self {
            Failure::Api(e) if e.is_too_many_requests() || e.code().is_some_and(|c| c >= 500) => {
                Action::Watch
            }
            _ => Action::List,
        }
    }
}

/// The GET request head: `Connection: close`, since every request has its
/// own connection; uncompressed so events are readable as they arrive.
fn request_bytes(client: &crate::Client, ep: &Endpoint, path: &str) -> Result<Vec<u8>, String> {
    if client.waiting_for_cert() {
        return Err(crate::NO_CERT_YET.to_string());
    }
    let mut head = format!(
        "GET {}{} HTTP/1.1\r\nHost: {}\r\nUser-Agent: {}\r\nAccept: application/json\r\nAccept-Encoding: identity\r\nConnection: close\r\n",
        ep.prefix,
        path,
        ep.host,
        client.user_agent()
    );
    if let Some(auth) = client.auth_header()? {
        head.push_str(&format!("Authorization: {auth}\r\n"));
    }
    head.push_str("\r\n");
    Ok(head.into_bytes())
}
