//! Upstream `pkg/kubelet/util/manager/cache_based_manager.go`
//! (`objectStore`): referenced objects fetched with a GET and kept for a
//! TTL (upstream takes it from the node's `node.alpha.kubernetes.io/ttl`
//! annotation, default 1 min; here the caller passes it). Registering a pod
//! that references an object invalidates it, so a new pod sees fresh data.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rkubelet_util::lock;
use serde::de::DeserializeOwned;

use super::{from_api, Kind, ManagerError, ObjectStore};
use crate::client::Client;

/// Upstream's `defaultTTL`.
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);

/// How an item is fetched; a trait so tests can count calls.
pub trait Fetch<T>: Send + Sync {
    fn fetch(&self, namespace: &str, name: &str) -> Result<T, ManagerError>;
}

/// GETs through the API client.
pub struct ClientFetch<T> {
    client: Client,
    kind: Kind,
    _t: PhantomData<fn() -> T>,
}

impl<T> ClientFetch<T> {
    pub fn new(client: &Client, kind: Kind) -> Self {
        ClientFetch {
            client: client.clone(),
            kind,
            _t: PhantomData,
        }
    }
}

impl<T: DeserializeOwned> Fetch<T> for ClientFetch<T> {
    fn fetch(&self, namespace: &str, name: &str) -> Result<T, ManagerError> {
        self.client
            .get::<T>(&self.kind.object_path(namespace, name))
            .map_err(|e| from_api(self.kind, name, e))
    }
}

struct Data<T> {
    result: Result<Arc<T>, ManagerError>,
    fetched: Instant,
}

struct Item<T> {
    refs: HashMap<String, usize>,
    /// Held while fetching, so concurrent Gets of one object make one GET.
    data: Arc<Mutex<Option<Data<T>>>>,
}

pub struct CacheBasedStore<T> {
    fetch: Box<dyn Fetch<T>>,
    ttl: Duration,
    is_immutable: fn(&T) -> bool,
    items: Mutex<HashMap<(String, String), Item<T>>>,
}

impl<T: Send + Sync + 'static> CacheBasedStore<T> {
    pub fn new(fetch: Box<dyn Fetch<T>>, ttl: Duration, is_immutable: fn(&T) -> bool) -> Self {
        CacheBasedStore {
            fetch,
            ttl,
            is_immutable,
            items: Mutex::default(),
        }
    }
}

impl<T: Send + Sync + 'static> ObjectStore<T> for CacheBasedStore<T> {
    fn add_reference(&self, namespace: &str, name: &str, referenced_from: &str) {
        let key = (namespace.to_string(), name.to_string());
        let mut items = lock(&self.items);
        let item = items.entry(key).or_insert_with(|| Item {
            refs: HashMap::new(),
            data: Arc::default(),
        });
        *item.refs.entry(referenced_from.to_string()).or_default() += 1;
        // A new item rather than clearing the old one: a Get in flight holds
        // the old one's lock and must not block this registration.
        item.data = Arc::default();
    }

    fn delete_reference(&self, namespace: &str, name: &str, referenced_from: &str) {
        let key = (namespace.to_string(), name.to_string());
        let mut items = lock(&self.items);
        let Some(item) = items.get_mut(&key) else {
            return;
        };
        if let Some(n) = item.refs.get_mut(referenced_from) {
            *n -= 1;
            if *n == 0 {
                item.refs.remove(referenced_from);
            }
        }
        if item.refs.is_empty() {
            items.remove(&key);
        }
    }

    fn get(&self, namespace: &str, name: &str) -> Result<Arc<T>, ManagerError> {
        let data = {
            let items = lock(&self.items);
            match items.get(&(namespace.to_string(), name.to_string())) {
                Some(item) => item.data.clone(),
                None => {
                    return Err(ManagerError::NotRegistered {
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                    })
                }
            }
        };
        let mut data = lock(&data);
        if let Some(d) = data.as_ref() {
            let immutable = d.result.as_ref().is_ok_and(|o| (self.is_immutable)(o));
            if immutable || d.fetched.elapsed() < self.ttl {
                return d.result.clone();
            }
        }
        let fetched = self.fetch.fetch(namespace, name).map(Arc::new);
        // A failed refresh (other than NotFound) keeps serving the last good
        // object, as upstream does.
        if let (
            Err(e),
            Some(Data {
                result: Ok(old), ..
            }),
        ) = (&fetched, data.as_ref())
        {
            if !e.is_not_found() {
                log::info!("refreshing {namespace}/{name}: {e}; serving the cached copy");
                return Ok(old.clone());
            }
        }
        *data = Some(Data {
            result: fetched.clone(),
            fetched: Instant::now(),
        });
        fetched
    }
}
