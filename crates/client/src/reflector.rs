//! List+watch on its own thread (client-go's tools/cache Reflector).
//!
//! list → `Replace(items)` → watch from the list's resourceVersion with
//! bookmarks and a random 5–10 min server timeout; events go to the handler
//! as typed objects. What happens next:
//! - watch closed by the server: watch again from the last resourceVersion
//!   (after a backoff if it was a "very short watch": < 1 s and no events);
//! - 410 Gone/Expired (on watch start or as an ERROR event): relist, with a
//!   consistent read (`resourceVersion=""`), after the backoff;
//! - 429 or a transport error (broken or idle stream, connect failure):
//!   back off, then watch again from the last resourceVersion;
//! - any other error (malformed event, 5xx after the client's retries,
//!   403...): back off, then relist.
//!
//! The backoff is 800 ms doubling to 30 s with jitter, reset after a watch
//! that delivered events or 2 min without failures. Every wait is a
//! `select!` on the shutdown channel (a message or a dropped sender stops the
//! reflector); a request already in flight finishes first (bounded by the
//! client's timeout).

use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use rkubelet_util::backoff::Exponential;
use rkubelet_util::random_unit;

use super::paths::with_query;
use super::{ApiError, Client, WatchEvent, WatchEventType, WatchStream};

/// What the handler is told.
#[derive(Debug, Clone, PartialEq)]
pub enum ReflectorEvent<T> {
    /// The full set after each successful list.
    Replace(Vec<T>),
    Added(T),
    Modified(T),
    Deleted(T),
}

/// client-go's minWatchTimeout; each watch asks for [1, 2) times it.
const MIN_WATCH_TIMEOUT: Duration = Duration::from_secs(300);
const BACKOFF_INITIAL: Duration = Duration::from_millis(800);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
const BACKOFF_RESET: Duration = Duration::from_secs(120);
const BACKOFF_JITTER: f64 = 1.0;
/// A watch that ends this fast with no events is a failure, not a timeout.
const VERY_SHORT_WATCH: Duration = Duration::from_secs(1);
/// How often a back-off looks for a new client certificate.
const GENERATION_CHECK: Duration = Duration::from_secs(1);

pub type Handler<T> = Box<dyn FnMut(ReflectorEvent<T>) + Send>;

/// Starts the list+watch loop of `list_path` on a thread named `name`. It
/// runs until `shutdown` receives a message or its sender is dropped (pass
/// `crossbeam_channel::never()` to run for the life of the process).
pub fn start_reflector<T: DeserializeOwned + Send + 'static>(
    name: &str,
    client: Client,
    list_path: String,
    handler: Handler<T>,
    shutdown: Receiver<()>,
) -> std::io::Result<JoinHandle<()>> {
    let reflector = Reflector {
        name: name.to_string(),
        client,
        list_path,
        handler,
        shutdown,
        last_rv: String::new(),
        rv_unavailable: false,
        backoff: Exponential::new(BACKOFF_INITIAL, BACKOFF_MAX)
            .jitter(BACKOFF_JITTER)
            .reset_after(BACKOFF_RESET),
    };
    thread::Builder::new()
        .name(name.to_string())
        .spawn(move || reflector.run())
}

struct Reflector<T> {
    name: String,
    client: Client,
    list_path: String,
    handler: Handler<T>,
    shutdown: Receiver<()>,
    /// The last resourceVersion seen (list, event or bookmark).
    last_rv: String,
    /// The last RV is too old: the next list must be a consistent read.
    rv_unavailable: bool,
    backoff: Exponential,
}

/// What to do after a watch ends.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    Rewatch,
    BackoffRewatch,
    BackoffRelist,
    Stop,
}

/// The list shape every resource list shares; items decode one by one.
#[derive(Deserialize)]
struct RawList {
    #[serde(default)]
    metadata: RawListMeta,
    #[serde(default)]
    items: Option<Vec<serde_json::Value>>,
}

#[derive(Default, Deserialize)]
struct RawListMeta {
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl<T: DeserializeOwned> Reflector<T> {
    fn run(mut self) {
        log::debug!("{}: starting reflector for {}", self.name, self.list_path);
        'relist: while !self.stopped() {
            if let Err(e) = self.list() {
                log::warn!("{}: list failed: {e}", self.name);
                self.mark_if_gone(&e);
                if !self.wait_backoff() {
                    return;
                }
                continue;
            }
            loop {
                match self.watch_once() {
                    Next::Stop => return,
                    Next::Rewatch => {}
                    Next::BackoffRewatch if self.wait_backoff() => {}
                    Next::BackoffRelist if self.wait_backoff() => continue 'relist,
                    Next::BackoffRewatch | Next::BackoffRelist => return,
                }
            }
        }
    }

    fn stopped(&self) -> bool {
        !matches!(
            self.shutdown.try_recv(),
            Err(crossbeam_channel::TryRecvError::Empty)
        )
    }

    /// Sleeps the next backoff delay; false when shut down meanwhile. A
    /// new client certificate (the client's connection generation moved,
    /// e.g. the TLS bootstrap finished) ends the wait within a second and
    /// resets the back-off: what failed for want of it may work now.
    fn wait_backoff(&mut self) -> bool {
        let until = Instant::now() + self.backoff.next_delay();
        let generation = self.client.connection_generation();
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            select! {
                recv(self.shutdown) -> _ => return false,
                default(left.min(GENERATION_CHECK)) => {}
            }
            if self.client.connection_generation() != generation {
                self.backoff.reset();
                return true;
            }
        }
    }

    /// client-go's relistResourceVersion: "0" (watch cache) the first time,
    /// the last RV after, "" (etcd) once the last RV has expired.
    fn list_rv(&self) -> &str {
        if self.rv_unavailable {
            ""
        } else if self.last_rv.is_empty() {
            "0"
        } else {
            &self.last_rv
        }
    }

    fn list(&mut self) -> Result<(), ApiError> {
        let path = match self.list_rv() {
            "" => self.list_path.clone(),
            rv => with_query(&self.list_path, &[("resourceVersion", rv)]),
        };
        let list: RawList = self.client.list(&path)?;
        let items = list.items.unwrap_or_default();
        let typed: Vec<T> = items.into_iter().filter_map(|v| self.decode(v)).collect();
        log::debug!("{}: listed {} objects", self.name, typed.len());
        self.last_rv = list.metadata.resource_version.unwrap_or_default();
        self.rv_unavailable = false;
        (self.handler)(ReflectorEvent::Replace(typed));
        Ok(())
    }

    fn mark_if_gone(&mut self, e: &ApiError) {
        if e.is_gone() {
            self.rv_unavailable = true;
        }
    }

    fn watch_path(&self) -> String {
        let timeout = MIN_WATCH_TIMEOUT.as_secs_f64() * (1.0 + random_unit());
        let timeout = (timeout as u64).to_string();
        with_query(
            &self.list_path,
            &[
                ("watch", "1"),
                ("resourceVersion", &self.last_rv),
                ("allowWatchBookmarks", "true"),
                ("timeoutSeconds", &timeout),
            ],
        )
    }

    /// One watch, from start to end, and what to do next.
    fn watch_once(&mut self) -> Next {
        if self.stopped() {
            return Next::Stop;
        }
        let started = Instant::now();
        let stream = match self.client.watch(&self.watch_path()) {
            Ok(s) => s,
            Err(e) => return self.after_error(e, "starting watch"),
        };
        match self.consume(stream) {
            Ok(None) => Next::Stop,
            Ok(Some(0)) if started.elapsed() < VERY_SHORT_WATCH => {
                log::warn!(
                    "{}: very short watch: ended in {:?} without events",
                    self.name,
                    started.elapsed()
                );
                Next::BackoffRelist
            }
            Ok(Some(_)) => Next::Rewatch,
            Err(e) => self.after_error(e, "watch"),
        }
    }

    /// Classifies a watch error (see the module comment).
    fn after_error(&mut self, e: ApiError, what: &str) -> Next {
        if e.is_gone() {
            log::info!("{}: {what}: {e}; relisting", self.name);
            self.rv_unavailable = true;
            return Next::BackoffRelist;
        }
        log::warn!("{}: {what} failed: {e}", self.name);
        if matches!(e, ApiError::Transport(_)) || e.is_too_many_requests() {
            Next::BackoffRewatch
        } else {
            Next::BackoffRelist
        }
    }

    /// Feeds events to the handler until the stream ends. Ok(Some(n)) after a
    /// clean end with n events, Ok(None) on shutdown.
    fn consume(&mut self, stream: WatchStream) -> Result<Option<usize>, ApiError> {
        let mut events = 0;
        loop {
            select! {
                recv(self.shutdown) -> _ => return Ok(None),
                recv(stream.events()) -> msg => match msg {
                    Err(_) => return Ok(Some(events)),
                    Ok(Err(e)) => return Err(e),
                    Ok(Ok(ev)) => {
                        events += 1;
                        self.backoff.reset();
                        self.handle(ev);
                    }
                },
            }
        }
    }

    fn handle(&mut self, ev: WatchEvent) {
        if let Some(rv) = ev.resource_version() {
            self.last_rv = rv.to_string();
        }
        let wrap: fn(T) -> ReflectorEvent<T> = match ev.kind {
            WatchEventType::Added => ReflectorEvent::Added,
            WatchEventType::Modified => ReflectorEvent::Modified,
            WatchEventType::Deleted => ReflectorEvent::Deleted,
            // Bookmarks only move the resourceVersion; errors never get here.
            WatchEventType::Bookmark | WatchEventType::Error => return,
        };
        if let Some(obj) = self.decode(ev.object) {
            (self.handler)(wrap(obj));
        }
    }

    /// One object into T; a failure is logged and the object skipped.
    fn decode(&self, mut v: serde_json::Value) -> Option<T> {
        strip_managed_fields(&mut v);
        match serde_json::from_value::<T>(v) {
            Ok(obj) => Some(obj),
            Err(e) => {
                log::warn!(
                    "{}: skipping an object that does not decode: {e}",
                    self.name
                );
                None
            }
        }
    }
}

/// Drops `metadata.managedFields` before decoding (client-go's
/// TransformStripManagedFields): server-side-apply bookkeeping the kubelet
/// never reads, often the largest part of a pod's metadata, and kept in
/// every cached copy otherwise.
fn strip_managed_fields(v: &mut serde_json::Value) {
    if let Some(meta) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        meta.remove("managedFields");
    }
}

#[cfg(test)]
mod strip_tests {
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    #[test]
    fn managed_fields_are_dropped_before_decoding() {
        let mut v = json!({
            "metadata": {
                "name": "a",
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {"containers": []},
        });
        super::strip_managed_fields(&mut v);
        let pod: Pod = serde_json::from_value(v).expect("decodes");
        assert_eq!(pod.metadata.name.as_deref(), Some("a"));
        assert!(pod.metadata.managed_fields.is_none());
        // Objects without metadata pass untouched.
        let mut other = json!({"kind": "Status"});
        super::strip_managed_fields(&mut other);
        assert_eq!(other, json!({"kind": "Status"}));
    }
}
