//! The recorder that sends events to the kube-apiserver, as the kubelet's
//! client-go `tools/record` broadcaster does (event.go, events_cache.go).
//!
//! Recording never blocks: an event is logged, then queued on a bounded
//! channel ([`QUEUE_CAPACITY`]; when full it is dropped with a rate-limited
//! warning). The "events" thread takes each one through the
//! [`Correlator`] — spam filter, aggregation of similar events, and
//! de-duplication of identical ones into a count — and writes it: a POST for
//! a new event, a strategic-merge PATCH of `count`/`lastTimestamp`/`message`
//! for a repeat. A send that fails below HTTP is retried up to
//! [`MAX_TRIES_PER_EVENT`] times [`RETRY_SLEEP`] apart (the first sleep
//! randomised); an error status from the server is final, as upstream.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, RecvTimeoutError, Sender, TrySendError};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use rkubelet_util::lock;

use super::{EventRecorder, EventType};
use crate::client::flowcontrol::random_unit;
use crate::client::version::ServerVersion;
use crate::client::{paths, ApiError, Client, PatchType};
use crate::podutil::PodExt;

mod correlator;
mod lru;
#[cfg(test)]
mod tests;
mod worker;

use correlator::*;
use lru::*;
use worker::*;

/// `source.component` and `reportingComponent` of every event.
pub const COMPONENT: &str = "kubelet";
/// Events waiting for the sender thread (client-go's maxQueuedEvents).
pub const QUEUE_CAPACITY: usize = 1000;
/// client-go's maxTriesPerEvent.
pub const MAX_TRIES_PER_EVENT: u32 = 12;
/// client-go's defaultSleepDuration between tries.
pub const RETRY_SLEEP: Duration = Duration::from_secs(10);

/// Entries in each correlation cache (client-go's maxLruCacheEntries).
pub(super) const LRU_CACHE_ENTRIES: usize = 4096;
/// Similar events (differing only in message) seen this often within
/// [`AGGREGATE_INTERVAL`] are combined into one.
pub(super) const AGGREGATE_MAX_EVENTS: usize = 10;
pub(super) const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
pub(super) const AGGREGATE_MESSAGE_PREFIX: &str = "(combined from similar events): ";
/// Per source+object: a burst of 25 events, then one every 5 minutes.
pub(super) const SPAM_BURST: f64 = 25.0;
pub(super) const SPAM_QPS: f64 = 1.0 / 300.0;
/// At most one "queue full" warning this often.
pub(super) const DROP_WARN_INTERVAL: Duration = Duration::from_secs(10);
/// Namespace of events about cluster-scoped objects (the node).
pub(super) const DEFAULT_NAMESPACE: &str = "default";

/// Where events are written: the apiserver ([`Client`]), or a fake in tests.
pub trait EventSink: Send + Sync {
    /// POST into the event's namespace; returns the stored event.
    fn create(&self, event: &Event) -> Result<Event, ApiError>;
    /// Strategic-merge PATCH of the named event in its namespace.
    fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, ApiError>;
}

impl EventSink for Client {
    fn create(&self, event: &Event) -> Result<Event, ApiError> {
        let path = paths::events(event_namespace(event));
        match older_wording(self, event) {
            Some(message) => {
                let mut event = event.clone();
                event.message = Some(message);
                Client::create(self, &path, &event)
            }
            None => Client::create(self, &path, event),
        }
    }

    fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, ApiError> {
        let name = event.metadata.name.as_deref().unwrap_or("");
        let path = paths::event(event_namespace(event), name);
        match (older_wording(self, event), patch.get("message")) {
            (Some(message), Some(_)) => {
                let mut patch = patch.clone();
                patch["message"] = serde_json::Value::String(message);
                Client::patch(self, &path, PatchType::StrategicMerge, &patch)
            }
            _ => Client::patch(self, &path, PatchType::StrategicMerge, patch),
        }
    }
}

/// The message as the server's own release's kubelet worded it, where
/// that differs from the newest wording.
fn older_wording(client: &Client, event: &Event) -> Option<String> {
    let reason = event.reason.as_deref()?;
    let message = event.message.as_deref()?;
    if !ServerVersion::event_wording_varies(reason) {
        return None;
    }
    client.server_version().adapt_event_message(reason, message)
}

pub(super) fn event_namespace(event: &Event) -> &str {
    match event.metadata.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns,
        _ => DEFAULT_NAMESPACE,
    }
}

/// Sends the kubelet's events to the apiserver; see the module docs.
pub struct ApiRecorder {
    node_name: String,
    sink: Arc<dyn EventSink>,
    /// Boxed: a bounded channel allocates all its slots up front, and an
    /// Event is about a kilobyte (1 MB for the queue, unboxed).
    tx: Sender<Queued>,
    /// Taken by [`ApiRecorder::start`].
    rx: Mutex<Option<Receiver<Queued>>>,
    drops: DropWarner,
    retry_sleep: Duration,
}

impl ApiRecorder {
    /// A recorder posting through `client` behind its own rate limit
    /// (the kubelet's eventRecordQPS / eventBurst, 50 / 100 by default).
    ///
    /// `node_uid` is not used: like upstream, events about the node carry
    /// the node *name* as `involvedObject.uid` (the node may not be known
    /// yet when the kubelet starts, and `kubectl describe node` matches on it).
    pub fn new(client: Client, node_name: String, qps: f32, burst: u32) -> Arc<ApiRecorder> {
        let sink: Arc<dyn EventSink> = Arc::new(client.with_rate_limit(qps, burst));
        ApiRecorder::with_sink(sink, node_name)
    }

    /// A recorder writing to any sink (a fake, in tests).
    pub fn with_sink(sink: Arc<dyn EventSink>, node_name: String) -> Arc<ApiRecorder> {
        Arc::new(ApiRecorder::build(sink, node_name, RETRY_SLEEP))
    }

    pub(super) fn build(
        sink: Arc<dyn EventSink>,
        node_name: String,
        retry_sleep: Duration,
    ) -> ApiRecorder {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE_CAPACITY);
        ApiRecorder {
            node_name,
            sink,
            tx,
            rx: Mutex::new(Some(rx)),
            drops: DropWarner::default(),
            retry_sleep,
        }
    }

    /// Starts the "events" thread, which sends queued events until
    /// `shutdown` receives a message or all its senders are dropped. Events
    /// still queued then are not sent. Fails if already started.
    pub fn start(
        self: &Arc<Self>,
        shutdown: Receiver<()>,
    ) -> io::Result<crate::util::worker::Worker> {
        let rx = lock(&self.rx).take().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                "event recorder already started",
            )
        })?;
        let worker = Worker {
            sink: self.sink.clone(),
            correlator: Correlator::new(),
            rx,
            retry_sleep: self.retry_sleep,
        };
        crate::util::worker::spawn(
            "events",
            crate::util::worker::ShutdownStage::Status,
            move || worker.run(&shutdown),
        )
    }

    /// Events waiting to be sent.
    #[cfg(test)]
    pub fn queued(&self) -> usize {
        self.tx.len()
    }

    /// An event about `reference`, stamped now, from this kubelet (client-go's makeEvent).
    pub(super) fn make_event(
        &self,
        reference: ObjectReference,
        kind: EventType,
        reason: &str,
        message: &str,
    ) -> Event {
        let now = Timestamp::now();
        let namespace = match reference.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => ns.to_string(),
            _ => DEFAULT_NAMESPACE.to_string(),
        };
        let object_name = reference.name.as_deref().unwrap_or("");
        Event {
            metadata: ObjectMeta {
                name: Some(unique_name(object_name, now)),
                namespace: Some(namespace),
                ..ObjectMeta::default()
            },
            involved_object: reference,
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            type_: Some(kind.as_str().to_string()),
            source: Some(EventSource {
                component: Some(COMPONENT.to_string()),
                host: Some(self.node_name.clone()),
            }),
            reporting_component: Some(COMPONENT.to_string()),
            reporting_instance: Some(self.node_name.clone()),
            ..Event::default()
        }
    }

    /// The kubelet's nodeRef: the node name doubles as its UID.
    pub(super) fn node_reference(&self) -> ObjectReference {
        ObjectReference {
            kind: Some("Node".to_string()),
            name: Some(self.node_name.clone()),
            uid: Some(self.node_name.clone()),
            ..ObjectReference::default()
        }
    }

    /// Queues without blocking; a full queue drops the event.
    pub(super) fn enqueue(&self, event: Event) {
        match self.tx.try_send(Queued::Event(Box::new(event))) {
            Ok(()) => {}
            Err(TrySendError::Full(Queued::Event(event))) => self.drops.dropped(&event),
            Err(TrySendError::Full(Queued::Forget(_))) => {}
            // The recorder owns the receiver until start hands it to the
            // thread; it is gone only once that thread has stopped.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

impl EventRecorder for ApiRecorder {
    fn pod_event(&self, pod: &Pod, kind: EventType, reason: &str, message: &str) {
        super::LogRecorder.pod_event(pod, kind, reason, message);
        self.enqueue(self.make_event(pod_reference(pod, None), kind, reason, message));
    }

    fn pod_container_event(
        &self,
        pod: &Pod,
        container: &str,
        kind: EventType,
        reason: &str,
        message: &str,
    ) {
        super::LogRecorder.pod_container_event(pod, container, kind, reason, message);
        let reference = pod_reference(pod, Some(container));
        self.enqueue(self.make_event(reference, kind, reason, message));
    }

    fn node_event(&self, kind: EventType, reason: &str, message: &str) {
        let target = &self.node_name;
        match kind {
            EventType::Normal => log::info!("event: node {target}: {reason}: {message}"),
            EventType::Warning => log::warn!("event: node {target}: {reason}: {message}"),
        }
        self.enqueue(self.make_event(self.node_reference(), kind, reason, message));
    }

    /// Queued behind the pod's last events, so those are still counted.
    /// Not sent when the queue is full: the caches stay bounded anyway.
    fn forget_pod(&self, uid: &str) {
        let _ = self.tx.try_send(Queued::Forget(uid.into()));
    }
}

/// What the events thread is handed, in order.
pub(super) enum Queued {
    Event(Box<Event>),
    /// The object with this UID is gone for good: drop its cache entries.
    Forget(Box<str>),
}

/// A reference to the pod (client-go's GetReference), or to one of its
/// containers by field path (the kubelet's GenerateContainerRef). A
/// container not in the spec gets the pod-level reference.
pub(super) fn pod_reference(pod: &Pod, container: Option<&str>) -> ObjectReference {
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_string());
    ObjectReference {
        kind: Some("Pod".to_string()),
        api_version: Some("v1".to_string()),
        namespace: Some(pod.namespace().to_string()),
        name: Some(pod.name().to_string()),
        uid: non_empty(pod.uid()),
        resource_version: pod.metadata.resource_version.as_deref().and_then(non_empty),
        field_path: container.and_then(|c| container_field_path(pod, c)),
    }
}

pub(super) fn container_field_path(pod: &Pod, container: &str) -> Option<String> {
    let spec = pod.spec_or_default();
    if spec.containers.iter().any(|c| c.name == container) {
        return Some(format!("spec.containers{{{container}}}"));
    }
    if pod.init_containers().iter().any(|c| c.name == container) {
        return Some(format!("spec.initContainers{{{container}}}"));
    }
    let ephemeral = spec.ephemeral_containers.as_deref().unwrap_or(&[]);
    if ephemeral.iter().any(|c| c.name == container) {
        return Some(format!("spec.ephemeralContainers{{{container}}}"));
    }
    None
}

/// `<object name>.<now in ns as hex>`, client-go's `"%v.%x"`.
pub(super) fn unique_name(object_name: &str, now: Timestamp) -> String {
    format!("{object_name}.{:x}", now.as_nanosecond().max(0))
}

/// Counts dropped events; warns at most every [`DROP_WARN_INTERVAL`].
#[derive(Default)]
pub(super) struct DropWarner {
    pub(super) dropped: AtomicU64,
    pub(super) last_warning: Mutex<Option<Instant>>,
}

impl DropWarner {
    pub(super) fn dropped(&self, event: &Event) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        // Whoever holds the lock is warning already: never wait for it.
        let Ok(mut last) = self.last_warning.try_lock() else {
            return;
        };
        let now = Instant::now();
        if last.is_some_and(|t| now.saturating_duration_since(t) < DROP_WARN_INTERVAL) {
            return;
        }
        *last = Some(now);
        let n = self.dropped.swap(0, Ordering::Relaxed);
        log::warn!(
            "Unable to record event: too many queued events, dropped {n} event(s) \
             (latest: {} {}: {})",
            describe_object(&event.involved_object),
            event.reason.as_deref().unwrap_or(""),
            event.message.as_deref().unwrap_or(""),
        );
    }
}

pub(super) fn describe_object(r: &ObjectReference) -> String {
    let kind = r.kind.as_deref().unwrap_or("");
    let name = r.name.as_deref().unwrap_or("");
    match r.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}
