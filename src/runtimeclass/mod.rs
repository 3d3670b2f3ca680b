//! RuntimeClasses (upstream `pkg/kubelet/runtimeclass`): a cache of every
//! `node.k8s.io/v1` RuntimeClass, kept by one list+watch, that resolves a
//! pod's `runtimeClassName` to the CRI `runtime_handler` of RunPodSandbox.
//!
//! Upstream runs a shared informer (a goroutine) for it; here the watch is
//! one more stream on the `object-watches` thread
//! ([`crate::client::multiwatch`]), so no thread is added for it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use rkubelet_util::lock;

use crate::client::multiwatch::{Flow, MultiWatch, WatchId, WatchSink, WatchTarget};
use crate::client::{ApiError, WatchEvent, WatchEventType};

/// How long a lookup waits for the first list (as the object managers do).
const SYNC_WAIT: Duration = Duration::from_secs(1);

/// Why a pod's RuntimeClass gives no handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupError {
    /// Upstream's apierrors.NotFound for the group resource.
    NotFound(String),
    /// The first list has not completed yet.
    NotSynced,
    /// Standalone mode: nowhere to look the class up.
    NoApiServer(String),
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::NotFound(name) => {
                write!(f, "runtimeclasses.node.k8s.io {name:?} not found")
            }
            LookupError::NotSynced => write!(
                f,
                "failed to sync RuntimeClass cache: timed out waiting for the condition"
            ),
            LookupError::NoApiServer(name) => write!(
                f,
                "runtimeClassName {name:?} cannot be resolved: RuntimeClasses come from the API \
                 server and this kubelet runs without one (standalone mode)"
            ),
        }
    }
}

impl std::error::Error for LookupError {}

#[derive(Default)]
struct State {
    synced: bool,
    /// RuntimeClass name -> handler.
    handlers: HashMap<String, String>,
}

/// The RuntimeClass cache (upstream `runtimeclass.Manager`).
#[derive(Default)]
pub struct Manager {
    state: Mutex<State>,
    synced: Condvar,
    /// Keeps the watch thread alive whatever the object-manager strategy.
    _watches: Option<Arc<MultiWatch>>,
}

impl Manager {
    /// Starts the list+watch of every RuntimeClass on `watches`' thread.
    pub fn start(watches: &Arc<MultiWatch>) -> Result<Arc<Manager>, ApiError> {
        let m = Arc::new(Manager {
            _watches: Some(Arc::clone(watches)),
            ..Manager::default()
        });
        let sink: Weak<dyn WatchSink> = Arc::downgrade(&(Arc::clone(&m) as Arc<dyn WatchSink>));
        let target = WatchTarget {
            collection: crate::client::paths::runtime_classes(),
            field_selector: String::new(),
        };
        watches.watch(target, sink)?;
        Ok(m)
    }

    /// Upstream `LookupRuntimeHandler`: no class (or "") is the runtime's
    /// default handler, "".
    pub fn lookup_runtime_handler(&self, name: Option<&str>) -> Result<String, LookupError> {
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Ok(String::new());
        };
        let deadline = Instant::now() + SYNC_WAIT;
        let mut state = lock(&self.state);
        while !state.synced {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(LookupError::NotSynced);
            }
            state = self
                .synced
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        state
            .handlers
            .get(name)
            .cloned()
            .ok_or_else(|| LookupError::NotFound(name.to_string()))
    }

    fn mark_synced(&self, mut state: std::sync::MutexGuard<'_, State>) {
        let first = !state.synced;
        state.synced = true;
        drop(state);
        if first {
            self.synced.notify_all();
        }
    }
}

/// A RuntimeClass as (name, handler); v1 keeps the handler at the top level.
fn name_and_handler(v: &serde_json::Value) -> Option<(String, String)> {
    let name = v["metadata"]["name"].as_str()?;
    let handler = v["handler"].as_str().unwrap_or_default();
    Some((name.to_string(), handler.to_string()))
}

impl WatchSink for Manager {
    fn replace(&self, _id: WatchId, items: Vec<serde_json::Value>) -> Flow {
        let mut state = lock(&self.state);
        state.handlers = items.iter().filter_map(name_and_handler).collect();
        self.mark_synced(state);
        Flow::Continue
    }

    fn event(&self, _id: WatchId, event: WatchEvent) -> Flow {
        let Some((name, handler)) = name_and_handler(&event.object) else {
            return Flow::Continue;
        };
        let mut state = lock(&self.state);
        match event.kind {
            WatchEventType::Added | WatchEventType::Modified => {
                state.handlers.insert(name, handler);
            }
            WatchEventType::Deleted => {
                state.handlers.remove(&name);
            }
            WatchEventType::Bookmark | WatchEventType::Error => {}
        }
        Flow::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rc(name: &str, handler: &str) -> serde_json::Value {
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
               "metadata": {"name": name}, "handler": handler})
    }

    fn ev(kind: WatchEventType, object: serde_json::Value) -> WatchEvent {
        WatchEvent { kind, object }
    }

    #[test]
    fn resolves_classes_from_the_list_and_follows_the_watch() {
        let m = Manager::default();
        let id = WatchId::for_tests(1);
        m.replace(id, vec![rc("gvisor", "runsc"), rc("kata", "kata-qemu")]);
        assert_eq!(m.lookup_runtime_handler(None).unwrap(), "");
        assert_eq!(m.lookup_runtime_handler(Some("")).unwrap(), "");
        assert_eq!(m.lookup_runtime_handler(Some("gvisor")).unwrap(), "runsc");
        m.event(id, ev(WatchEventType::Added, rc("test", "runc-test")));
        assert_eq!(m.lookup_runtime_handler(Some("test")).unwrap(), "runc-test");
        m.event(id, ev(WatchEventType::Deleted, rc("gvisor", "runsc")));
        let err = m.lookup_runtime_handler(Some("gvisor")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "runtimeclasses.node.k8s.io \"gvisor\" not found"
        );
        // A relist replaces everything known.
        m.replace(id, vec![rc("kata", "kata-fc")]);
        assert_eq!(m.lookup_runtime_handler(Some("kata")).unwrap(), "kata-fc");
        assert!(m.lookup_runtime_handler(Some("test")).is_err());
    }

    #[test]
    fn unsynced_lookups_fail_after_the_wait_but_the_default_does_not() {
        let m = Manager::default();
        assert_eq!(m.lookup_runtime_handler(None).unwrap(), "");
        let t = Instant::now();
        assert_eq!(
            m.lookup_runtime_handler(Some("x")),
            Err(LookupError::NotSynced)
        );
        assert!(t.elapsed() >= SYNC_WAIT);
    }
}
