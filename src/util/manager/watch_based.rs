//! Upstream `pkg/kubelet/util/manager/watch_based_manager.go`
//! (`objectCache`): one list+watch per referenced object, started by the
//! first reference and stopped with the last. Where upstream runs a
//! reflector goroutine per object, every watch here is multiplexed on the
//! one `object-watches` thread ([`crate::client::multiwatch`]).
//!
//! An object seen with `immutable: true` stops being watched and is served
//! from its last copy for as long as it stays referenced.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use rkubelet_util::lock;
use serde::de::DeserializeOwned;

use super::{Kind, ManagerError, ObjectRef, ObjectStore, OnChange};
use crate::client::multiwatch::{Flow, MultiWatch, WatchId, WatchSink, WatchTarget};
use crate::client::{WatchEvent, WatchEventType};

/// Upstream polls `hasSynced` for up to a second before failing a Get.
pub const SYNC_WAIT: Duration = Duration::from_secs(1);

type Key = (String, String);

struct Item<T> {
    /// Reference count per referencing pod UID.
    refs: HashMap<String, usize>,
    watch: Option<WatchId>,
    synced: bool,
    object: Option<Arc<T>>,
    resource_version: Option<String>,
    immutable: bool,
}

struct State<T> {
    items: HashMap<Key, Item<T>>,
    by_watch: HashMap<WatchId, Key>,
}

pub struct WatchBasedStore<T> {
    kind: Kind,
    mux: Arc<MultiWatch>,
    state: Mutex<State<T>>,
    synced: Condvar,
    on_change: Option<OnChange>,
    me: Weak<WatchBasedStore<T>>,
}

impl<T: DeserializeOwned + Send + Sync + 'static> WatchBasedStore<T> {
    /// `on_change` is told when a watched object changes.
    pub fn new(kind: Kind, mux: Arc<MultiWatch>, on_change: Option<OnChange>) -> Arc<Self> {
        Arc::new_cyclic(|me| WatchBasedStore {
            kind,
            mux,
            state: Mutex::new(State {
                items: HashMap::new(),
                by_watch: HashMap::new(),
            }),
            synced: Condvar::new(),
            on_change,
            me: me.clone(),
        })
    }

    /// Starts the object's watch (under the state lock: the mux thread only
    /// reads its change queue, so this cannot deadlock).
    fn start_watch(&self, state: &mut State<T>, key: &Key) {
        let me: Weak<dyn WatchSink> = self.me.clone();
        let target = WatchTarget {
            collection: self.kind.collection(&key.0),
            field_selector: format!("metadata.name={}", key.1),
        };
        match self.mux.watch(target, me) {
            Ok(id) => {
                state.by_watch.insert(id, key.clone());
                if let Some(item) = state.items.get_mut(key) {
                    item.watch = Some(id);
                }
            }
            Err(e) => log::error!("watching {} {}/{}: {e}", self.kind.kind, key.0, key.1),
        }
    }

    /// Applies the object's new state (None: it does not exist); tells the
    /// callback when it changed; Stop once the object is immutable.
    fn apply(&self, id: WatchId, object: Option<serde_json::Value>) -> Flow {
        let mut state = lock(&self.state);
        let Some(key) = state.by_watch.get(&id).cloned() else {
            return Flow::Stop; // unwatched meanwhile
        };
        let Some(item) = state.items.get_mut(&key) else {
            return Flow::Stop;
        };
        let (rv, immutable, typed) = match object {
            None => (None, false, None),
            Some(v) => {
                let rv = v["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_string);
                let immutable = v["immutable"].as_bool() == Some(true);
                match serde_json::from_value::<T>(v) {
                    Ok(t) => (rv, immutable, Some(Arc::new(t))),
                    Err(e) => {
                        log::warn!("decoding {} {}/{}: {e}", self.kind.kind, key.0, key.1);
                        return Flow::Continue;
                    }
                }
            }
        };
        let changed = rv != item.resource_version || typed.is_some() != item.object.is_some();
        item.object = typed;
        item.resource_version = rv;
        let first = !item.synced;
        item.synced = true;
        let mut flow = Flow::Continue;
        if immutable {
            log::debug!(
                "stopped watching {} {}/{}: immutable",
                self.kind.kind,
                key.0,
                key.1
            );
            item.immutable = true;
            item.watch = None;
            state.by_watch.remove(&id);
            flow = Flow::Stop;
        }
        drop(state);
        if first {
            self.synced.notify_all();
        }
        if changed {
            if let Some(cb) = &self.on_change {
                cb(ObjectRef {
                    kind: self.kind.kind,
                    namespace: key.0,
                    name: key.1,
                });
            }
        }
        flow
    }
}

impl<T: DeserializeOwned + Send + Sync + 'static> WatchSink for WatchBasedStore<T> {
    fn replace(&self, id: WatchId, items: Vec<serde_json::Value>) -> Flow {
        // The field selector leaves at most the one object.
        self.apply(id, items.into_iter().next())
    }

    fn event(&self, id: WatchId, event: WatchEvent) -> Flow {
        match event.kind {
            WatchEventType::Added | WatchEventType::Modified => self.apply(id, Some(event.object)),
            WatchEventType::Deleted => self.apply(id, None),
            WatchEventType::Bookmark | WatchEventType::Error => Flow::Continue,
        }
    }
}

impl<T: DeserializeOwned + Send + Sync + 'static> ObjectStore<T> for WatchBasedStore<T> {
    fn add_reference(&self, namespace: &str, name: &str, referenced_from: &str) {
        let key = (namespace.to_string(), name.to_string());
        let mut state = lock(&self.state);
        let item = state.items.entry(key.clone()).or_insert_with(|| Item {
            refs: HashMap::new(),
            watch: None,
            synced: false,
            object: None,
            resource_version: None,
            immutable: false,
        });
        *item.refs.entry(referenced_from.to_string()).or_default() += 1;
        if item.watch.is_none() && !item.immutable {
            self.start_watch(&mut state, &key);
        }
    }

    fn delete_reference(&self, namespace: &str, name: &str, referenced_from: &str) {
        let key = (namespace.to_string(), name.to_string());
        let mut state = lock(&self.state);
        let Some(item) = state.items.get_mut(&key) else {
            return;
        };
        if let Some(n) = item.refs.get_mut(referenced_from) {
            *n -= 1;
            if *n == 0 {
                item.refs.remove(referenced_from);
            }
        }
        if !item.refs.is_empty() {
            return;
        }
        let watch = item.watch;
        state.items.remove(&key);
        if let Some(id) = watch {
            state.by_watch.remove(&id);
            self.mux.unwatch(id);
        }
    }

    fn get(&self, namespace: &str, name: &str) -> Result<Arc<T>, ManagerError> {
        let key = (namespace.to_string(), name.to_string());
        let deadline = Instant::now() + SYNC_WAIT;
        let mut state = lock(&self.state);
        loop {
            let Some(item) = state.items.get(&key) else {
                return Err(ManagerError::NotRegistered {
                    namespace: key.0,
                    name: key.1,
                });
            };
            if item.synced {
                return item.object.clone().ok_or(ManagerError::NotFound {
                    resource: self.kind.resource,
                    name: key.1,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ManagerError::NotSynced {
                    singular: self.kind.singular,
                });
            }
            state = self
                .synced
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// The counts the tests check.
#[cfg(test)]
impl<T> WatchBasedStore<T> {
    pub(crate) fn watch_count(&self) -> usize {
        lock(&self.state).by_watch.len()
    }
}
