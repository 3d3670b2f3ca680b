//! The pod status cache PLEG fills and the pod workers read (upstream
//! `pkg/kubelet/container/cache.go`).
//!
//! A worker that just acted on a pod must not act again on a status read
//! before its own action: it asks for a status newer than the time its last
//! sync ended, and PLEG's next relist provides one; the end of each relist
//! is announced (the `on_update` of [`Cache::with_on_update`]) so a waiting
//! worker looks at once rather than polling.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use rkubelet_util::lock;

use super::PodStatus;

#[derive(Clone)]
struct Entry {
    status: PodStatus,
    error: Option<String>,
    modified: Instant,
}

#[derive(Default)]
struct Inner {
    pods: HashMap<String, Entry>,
    /// Start time of the last completed relist: everything not in `pods`
    /// is known not to exist as of then.
    timestamp: Option<Instant>,
    /// A relist failed since: the runtime went away (restarting), and what
    /// was inspected as it went may say what it no longer holds. (A relist
    /// that completed as it went is only caught if a worker has not taken
    /// its answer yet; the sandbox re-check covers the rest.)
    stale: bool,
}

/// What the cache holds for a pod: its status, or the error inspecting it.
pub type CachedStatus = (PodStatus, Option<String>);

/// Called after a relist completed, outside the cache's lock.
pub type OnUpdate = Box<dyn Fn() + Send + Sync>;

#[derive(Default)]
pub struct Cache {
    inner: Mutex<Inner>,
    on_update: Option<OnUpdate>,
}

impl Cache {
    /// A cache nobody is told about (tests).
    #[cfg(test)]
    pub fn new() -> Self {
        Self::default()
    }

    /// A cache that tells `on_update` (the pod workers) of each completed
    /// relist.
    pub fn with_on_update(on_update: OnUpdate) -> Self {
        Cache {
            inner: Mutex::default(),
            on_update: Some(on_update),
        }
    }

    pub fn get(&self, uid: &str) -> CachedStatus {
        let inner = lock(&self.inner);
        match inner.pods.get(uid) {
            Some(e) => (e.status.clone(), e.error.clone()),
            None => (empty_status(uid), None),
        }
    }

    /// The status if the cache holds one newer than `min`; `None` otherwise.
    pub fn get_if_newer(&self, uid: &str, min: Option<Instant>) -> Option<CachedStatus> {
        let inner = lock(&self.inner);
        newer_than(&inner, uid, min)
    }

    pub fn set(&self, uid: &str, mut status: PodStatus, error: Option<String>, modified: Instant) {
        // Kept until the next relist finds a change: no spare room.
        status.sandboxes.shrink_to_fit();
        status.containers.shrink_to_fit();
        let mut inner = lock(&self.inner);
        inner.pods.insert(
            uid.to_string(),
            Entry {
                status,
                error,
                modified,
            },
        );
    }

    pub fn delete(&self, uid: &str) {
        lock(&self.inner).pods.remove(uid);
    }

    /// A relist failed: no status is fresh for a worker until the next
    /// one completes.
    pub fn mark_stale(&self) {
        lock(&self.inner).stale = true;
    }

    /// Marks a completed relist that started at `timestamp`.
    pub fn update_time(&self, timestamp: Instant) {
        {
            let mut inner = lock(&self.inner);
            inner.timestamp = Some(timestamp);
            inner.stale = false;
        }
        if let Some(f) = &self.on_update {
            f();
        }
    }
}

fn empty_status(uid: &str) -> PodStatus {
    PodStatus {
        uid: uid.to_string(),
        ..Default::default()
    }
}

fn newer_than(inner: &Inner, uid: &str, min: Option<Instant>) -> Option<CachedStatus> {
    if inner.stale {
        return None;
    }
    let after = |t: Instant| min.is_none_or(|m| t > m);
    let global_newer = inner.timestamp.is_some_and(after);
    match inner.pods.get(uid) {
        Some(e) if after(e.modified) || global_newer => Some((e.status.clone(), e.error.clone())),
        None if global_newer => Some((empty_status(uid), None)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A status inspected while the runtime was going away is not served
    /// as fresh once a relist failed, until one completes again.
    #[test]
    fn a_failed_relist_holds_back_every_status_until_the_next_one() {
        let c = Cache::new();
        let t0 = Instant::now();
        c.set("a", empty_status("a"), None, t0);
        c.update_time(t0);
        assert!(c.get_if_newer("a", None).is_some());
        c.mark_stale();
        assert!(c.get_if_newer("a", None).is_none());
        assert!(c.get_if_newer("b", None).is_none());
        c.update_time(Instant::now());
        assert!(c.get_if_newer("a", Some(t0)).is_some());
    }

    #[test]
    fn nothing_before_first_relist() {
        let c = Cache::new();
        assert!(c.get_if_newer("a", None).is_none());
        let t0 = Instant::now();
        c.update_time(t0);
        let (s, e) = c.get_if_newer("a", None).unwrap();
        assert_eq!(s.uid, "a");
        assert!(e.is_none());
        // Not newer than the relist itself.
        assert!(c.get_if_newer("a", Some(t0)).is_none());
    }

    #[test]
    fn entry_newer_than_min_is_served() {
        let c = Cache::new();
        let before = Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let st = PodStatus {
            uid: "a".into(),
            name: "p".into(),
            ..Default::default()
        };
        c.set("a", st.clone(), None, Instant::now());
        assert_eq!(c.get_if_newer("a", Some(before)).unwrap().0, st);
        assert!(c.get_if_newer("b", Some(before)).is_none());
    }
}
