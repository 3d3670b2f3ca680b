//! Upstream `pkg/kubelet/util/manager`: caches of API objects (Secrets,
//! ConfigMaps) referenced by the pods on this node. [`CacheBasedManager`]
//! (upstream `cacheBasedManager`) tracks which objects registered pods
//! reference and keeps an [`ObjectStore`] in step: [`watch_based`] (one
//! watch per object, all on one thread) or [`cache_based`] (TTL + GET).
//! [`GetManager`] is upstream's "Get" strategy: a GET per lookup.

// Wired into the kubelet separately; until then parts are unused.

pub mod cache_based;
pub mod watch_based;

#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use rkubelet_util::lock;
use serde::de::DeserializeOwned;

use crate::client::{ApiError, Client};

/// `configMapAndSecretChangeDetectionStrategy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Watch,
    Cache,
    Get,
}

impl Strategy {
    /// The KubeletConfiguration value ("Watch", "Cache", "Get").
    pub fn parse(value: &str) -> Option<Strategy> {
        match value {
            "Watch" => Some(Strategy::Watch),
            "Cache" => Some(Strategy::Cache),
            "Get" => Some(Strategy::Get),
            _ => None,
        }
    }
}

/// The object a change callback is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// "Secret" or "ConfigMap".
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

/// Called (on the `object-watches` thread) when a watched object is added,
/// modified or deleted.
pub type OnChange = Arc<dyn Fn(ObjectRef) + Send + Sync>;

/// One kind of object: how to name it in paths and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// "Secret".
    pub kind: &'static str,
    /// "secrets", the path segment and apimachinery's qualified resource.
    pub resource: &'static str,
    /// "secret", as upstream names its caches in errors.
    pub singular: &'static str,
}

impl Kind {
    pub fn collection(&self, namespace: &str) -> String {
        // paths::secret(ns, "") ends in "/secrets/"; trim the empty name.
        let path = match self.resource {
            "secrets" => crate::client::paths::secret(namespace, ""),
            _ => crate::client::paths::configmap(namespace, ""),
        };
        path.trim_end_matches('/').to_string()
    }

    pub fn object_path(&self, namespace: &str, name: &str) -> String {
        match self.resource {
            "secrets" => crate::client::paths::secret(namespace, name),
            _ => crate::client::paths::configmap(namespace, name),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManagerError {
    /// No registered pod references the object (upstream: `object "ns"/"name" not registered`).
    NotRegistered { namespace: String, name: String },
    /// The object does not exist (`secrets "name" not found`).
    NotFound {
        resource: &'static str,
        name: String,
    },
    /// The first list did not complete in time.
    NotSynced { singular: &'static str },
    /// The API request failed.
    Api(ApiError),
}

impl ManagerError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, ManagerError::NotFound { .. })
    }
}

impl fmt::Display for ManagerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManagerError::NotRegistered { namespace, name } => {
                write!(f, "object {namespace:?}/{name:?} not registered")
            }
            ManagerError::NotFound { resource, name } => write!(f, "{resource} {name:?} not found"),
            ManagerError::NotSynced { singular } => write!(
                f,
                "failed to sync {singular} cache: timed out waiting for the condition"
            ),
            ManagerError::Api(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ManagerError {}

/// Maps a GET's error, keeping NotFound distinct.
pub(crate) fn from_api(kind: Kind, name: &str, err: ApiError) -> ManagerError {
    if err.is_not_found() {
        ManagerError::NotFound {
            resource: kind.resource,
            name: name.to_string(),
        }
    } else {
        ManagerError::Api(err)
    }
}

/// Upstream's `Manager` interface, per object type.
pub trait Manager<T>: Send + Sync {
    fn get_object(&self, namespace: &str, name: &str) -> Result<Arc<T>, ManagerError>;
    /// Starts tracking the objects `pod` references (a re-registration with
    /// new references swaps them).
    fn register_pod(&self, pod: &Pod);
    fn unregister_pod(&self, pod: &Pod);
}

/// Upstream's `Store`: reference-counted objects, counted per referencing pod UID.
pub trait ObjectStore<T>: Send + Sync {
    fn add_reference(&self, namespace: &str, name: &str, referenced_from: &str);
    fn delete_reference(&self, namespace: &str, name: &str, referenced_from: &str);
    fn get(&self, namespace: &str, name: &str) -> Result<Arc<T>, ManagerError>;
}

/// The names of objects of one kind a pod references.
pub type ReferencedNames = fn(&Pod) -> BTreeSet<String>;

/// (namespace, name, uid) of a registered pod.
type PodKey = (String, String, String);

/// Upstream `cacheBasedManager`: maps pod registrations onto store references.
pub struct CacheBasedManager<T> {
    store: Arc<dyn ObjectStore<T>>,
    referenced: ReferencedNames,
    registered: Mutex<HashMap<PodKey, BTreeSet<String>>>,
}

impl<T> CacheBasedManager<T> {
    pub fn new(store: Arc<dyn ObjectStore<T>>, referenced: ReferencedNames) -> Self {
        CacheBasedManager {
            store,
            referenced,
            registered: Mutex::default(),
        }
    }
}

fn pod_key(pod: &Pod) -> PodKey {
    let m = &pod.metadata;
    (
        m.namespace.clone().unwrap_or_default(),
        m.name.clone().unwrap_or_default(),
        m.uid.clone().unwrap_or_default(),
    )
}

impl<T: Send + Sync> Manager<T> for CacheBasedManager<T> {
    fn get_object(&self, namespace: &str, name: &str) -> Result<Arc<T>, ManagerError> {
        self.store.get(namespace, name)
    }

    fn register_pod(&self, pod: &Pod) {
        let names = (self.referenced)(pod);
        let key = pod_key(pod);
        let (ns, uid) = (key.0.clone(), key.2.clone());
        // Held across the store calls so registrations apply in order, as upstream.
        let mut registered = lock(&self.registered);
        for name in &names {
            self.store.add_reference(&ns, name, &uid);
        }
        // Added before removing so objects in both sets are never dropped.
        if let Some(prev) = registered.insert(key, names) {
            for name in &prev {
                self.store.delete_reference(&ns, name, &uid);
            }
        }
    }

    fn unregister_pod(&self, pod: &Pod) {
        let key = pod_key(pod);
        let mut registered = lock(&self.registered);
        if let Some(prev) = registered.remove(&key) {
            for name in &prev {
                self.store.delete_reference(&key.0, name, &key.2);
            }
        }
    }
}

/// Upstream's "Get" strategy (`NewSimpleSecretManager`): every lookup is a GET.
pub struct GetManager<T> {
    client: Client,
    kind: Kind,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> GetManager<T> {
    pub fn new(client: &Client, kind: Kind) -> Self {
        GetManager {
            client: client.clone(),
            kind,
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: DeserializeOwned + Send + Sync> Manager<T> for GetManager<T> {
    fn get_object(&self, namespace: &str, name: &str) -> Result<Arc<T>, ManagerError> {
        self.client
            .get::<T>(&self.kind.object_path(namespace, name))
            .map(Arc::new)
            .map_err(|e| from_api(self.kind, name, e))
    }

    fn register_pod(&self, _pod: &Pod) {}

    fn unregister_pod(&self, _pod: &Pod) {}
}

/// What a manager needs to know about its kind.
pub struct KindSpec<T> {
    pub kind: Kind,
    /// Which objects of the kind a pod references.
    pub referenced: ReferencedNames,
    pub is_immutable: fn(&T) -> bool,
}

/// The manager of one kind for `strategy` (upstream NewWatchingSecretManager,
/// NewCachingSecretManager, NewSimpleSecretManager and their ConfigMap
/// twins): Watch shares `watches` (one thread for every kind) and calls
/// `on_change` when a watched object changes; Cache keeps objects for `ttl`.
pub fn new_manager<T>(
    strategy: Strategy,
    client: &Client,
    watches: &Arc<crate::client::multiwatch::MultiWatch>,
    ttl: std::time::Duration,
    on_change: Option<OnChange>,
    spec: KindSpec<T>,
) -> Arc<ObjectManager<T>>
where
    T: serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let KindSpec {
        kind,
        referenced,
        is_immutable,
    } = spec;
    let inner: Box<dyn Manager<T>> = match strategy {
        Strategy::Watch => {
            let store = watch_based::WatchBasedStore::<T>::new(kind, watches.clone(), on_change);
            Box::new(CacheBasedManager::new(store, referenced))
        }
        Strategy::Cache => {
            let fetch = Box::new(cache_based::ClientFetch::<T>::new(client, kind));
            let store = Arc::new(cache_based::CacheBasedStore::new(fetch, ttl, is_immutable));
            Box::new(CacheBasedManager::new(store, referenced))
        }
        Strategy::Get => Box::new(GetManager::<T>::new(client, kind)),
    };
    Arc::new(ObjectManager(inner))
}

/// One kind's manager as the kubelet holds it: lookups, and pod
/// registration through the pod manager (upstream's RegisterPod and
/// UnregisterPod), the same for Secrets and ConfigMaps.
pub struct ObjectManager<T>(Box<dyn Manager<T>>);

impl<T> ObjectManager<T> {
    pub fn get(&self, namespace: &str, name: &str) -> Result<Arc<T>, ManagerError> {
        self.0.get_object(namespace, name)
    }
}

impl<T> crate::pod::PodRegistrar for ObjectManager<T> {
    fn register_pod(&self, pod: &Pod) {
        self.0.register_pod(pod)
    }

    fn unregister_pod(&self, pod: &Pod) {
        self.0.unregister_pod(pod)
    }
}
