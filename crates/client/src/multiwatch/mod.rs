//! Many single-object list+watch loops on ONE thread (`object-watches`):
//! the transport behind upstream's `pkg/kubelet/util/manager`
//! watch-based object cache, which runs one reflector goroutine per
//! referenced Secret/ConfigMap. Threads must not grow with objects here, so
//! every watch is a non-blocking socket in one poll(2) set (rustls' sans-IO
//! client for https), with an eventfd that wakes the thread when another
//! thread adds or removes a watch.
//!
//! Each watch follows client-go's reflector (see [`super::reflector`]): LIST
//! with a field selector, then WATCH from its resourceVersion with bookmarks
//! and a random 5–10 min `timeoutSeconds`; a closed stream resumes from the
//! last resourceVersion; 410 Gone relists; other failures back off (100 ms
//! doubling to 30 s, jittered) and retry. Lists use the same non-blocking
//! connections rather than the blocking [`super::Client`], so a slow list
//! stalls nothing; what stays blocking is DNS and TCP connect, bounded by
//! [`conn::CONNECT_TIMEOUT`] per address. Lists and watch starts take a token
//! from the client's rate limiter without sleeping (they wait their turn in
//! the poll loop's timers).

mod chunked;
mod conn;
mod mux;

#[cfg(feature = "fuzzing")]
pub use chunked::fuzz_watch_chunked;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use rkubelet_util::lock;

use super::watch::WatchEvent;
use super::{ApiError, Client};

/// Name of the one thread that runs every object watch.
pub const THREAD_NAME: &str = "object-watches";

/// Identifies one watch within its [`MultiWatch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WatchId(u64);

#[cfg(any(test, feature = "test-util"))]
impl WatchId {
    /// An id for sinks driven by hand in tests.
    pub fn for_tests(n: u64) -> WatchId {
        WatchId(n)
    }
}

/// What to list and watch: a collection path narrowed by a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchTarget {
    /// e.g. `/api/v1/namespaces/default/secrets`.
    pub collection: String,
    /// e.g. `metadata.name=db-password`.
    pub field_selector: String,
}

/// Whether a watch should go on after delivering to its sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Close the watch for good (e.g. the object is immutable).
    Stop,
}

/// Receives a watch's results, on the `object-watches` thread: keep it short
/// and never call back into [`MultiWatch`] while holding a lock it needs.
pub trait WatchSink: Send + Sync {
    /// The items of a successful LIST (a full replacement of what was known).
    fn replace(&self, id: WatchId, items: Vec<serde_json::Value>) -> Flow;
    /// ADDED, MODIFIED or DELETED (bookmarks are handled internally).
    fn event(&self, id: WatchId, event: WatchEvent) -> Flow;
}

/// A pending change for the mux thread: Some adds a watch, None removes it.
type Change = Option<(WatchTarget, Weak<dyn WatchSink>)>;

pub(crate) struct Shared {
    pub(crate) client: Client,
    /// Coalesced by id, so the queue is bounded by the number of watches.
    pub(crate) changes: Mutex<HashMap<WatchId, Change>>,
    pub(crate) wake: OwnedFd,
    pub(crate) stop: AtomicBool,
}

impl Shared {
    fn wake(&self) {
        // An eventfd adds the value to its counter; a full counter (never in
        // practice) would still leave it readable, which is all that matters.
        let mut f = match self.wake.try_clone() {
            Ok(fd) => File::from(fd),
            Err(e) => {
                log::warn!("object watches: waking the watch thread: {e}");
                return;
            }
        };
        let _ = f.write_all(&1u64.to_ne_bytes());
    }
}

/// Handle to the multiplexer. The thread starts on the first
/// [`MultiWatch::watch`] and ends once the handle is dropped.
pub struct MultiWatch {
    shared: Arc<Shared>,
    next_id: AtomicU64,
    started: Mutex<bool>,
}

impl MultiWatch {
    pub fn new(client: &Client) -> Result<Arc<MultiWatch>, ApiError> {
        // SAFETY: eventfd takes no pointers; a valid result is a new fd we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(ApiError::Transport(format!("object watches: eventfd: {e}")));
        }
        // SAFETY: fd was just returned by eventfd and is owned by nobody else.
        let wake = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Arc::new(MultiWatch {
            shared: Arc::new(Shared {
                client: client.clone(),
                changes: Mutex::default(),
                wake,
                stop: AtomicBool::new(false),
            }),
            next_id: AtomicU64::new(1),
            started: Mutex::new(false),
        }))
    }

    /// Starts list+watch of `target`, delivering to `sink` until
    /// [`MultiWatch::unwatch`], a [`Flow::Stop`], or the sink being dropped.
    pub fn watch(
        &self,
        target: WatchTarget,
        sink: Weak<dyn WatchSink>,
    ) -> Result<WatchId, ApiError> {
        self.ensure_thread()?;
        let id = WatchId(self.next_id.fetch_add(1, Ordering::Relaxed));
        self.change(id, Some((target, sink)));
        Ok(id)
    }

    /// Starts the thread now rather than at the first watch, so the
    /// kubelet's thread count does not change when pods arrive.
    pub fn start(&self) -> Result<(), ApiError> {
        self.ensure_thread()
    }

    /// Stops a watch (a no-op for an unknown or already stopped one).
    pub fn unwatch(&self, id: WatchId) {
        self.change(id, None);
    }

    fn change(&self, id: WatchId, change: Change) {
        let mut changes = lock(&self.shared.changes);
        changes.insert(id, change);
        drop(changes);
        self.shared.wake();
    }

    fn ensure_thread(&self) -> Result<(), ApiError> {
        let mut started = lock(&self.started);
        if *started {
            return Ok(());
        }
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name(THREAD_NAME.to_string())
            .spawn(move || mux::run(&shared))
            .map_err(|e| ApiError::Transport(format!("starting {THREAD_NAME}: {e}")))?;
        *started = true;
        Ok(())
    }
}

impl Drop for MultiWatch {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
    }
}
