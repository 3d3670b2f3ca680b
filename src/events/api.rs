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
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, RecvTimeoutError, Sender, TrySendError};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::{EventRecorder, EventType};
use crate::client::flowcontrol::random_unit;
use crate::client::{paths, ApiError, Client, PatchType};
use crate::podutil::PodExt;

/// `source.component` and `reportingComponent` of every event.
pub const COMPONENT: &str = "kubelet";
/// Events waiting for the sender thread (client-go's maxQueuedEvents).
pub const QUEUE_CAPACITY: usize = 1000;
/// client-go's maxTriesPerEvent.
pub const MAX_TRIES_PER_EVENT: u32 = 12;
/// client-go's defaultSleepDuration between tries.
pub const RETRY_SLEEP: Duration = Duration::from_secs(10);

/// Entries in each correlation cache (client-go's maxLruCacheEntries).
const LRU_CACHE_ENTRIES: usize = 4096;
/// Similar events (differing only in message) seen this often within
/// [`AGGREGATE_INTERVAL`] are combined into one.
const AGGREGATE_MAX_EVENTS: usize = 10;
const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
const AGGREGATE_MESSAGE_PREFIX: &str = "(combined from similar events): ";
/// Per source+object: a burst of 25 events, then one every 5 minutes.
const SPAM_BURST: f64 = 25.0;
const SPAM_QPS: f64 = 1.0 / 300.0;
/// At most one "queue full" warning this often.
const DROP_WARN_INTERVAL: Duration = Duration::from_secs(10);
/// Namespace of events about cluster-scoped objects (the node).
const DEFAULT_NAMESPACE: &str = "default";

/// Where events are written: the apiserver ([`Client`]), or a fake in tests.
pub trait EventSink: Send + Sync {
    /// POST into the event's namespace; returns the stored event.
    fn create(&self, event: &Event) -> Result<Event, ApiError>;
    /// Strategic-merge PATCH of the named event in its namespace.
    fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, ApiError>;
}

impl EventSink for Client {
    fn create(&self, event: &Event) -> Result<Event, ApiError> {
        Client::create(self, &paths::events(event_namespace(event)), event)
    }

    fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, ApiError> {
        let name = event.metadata.name.as_deref().unwrap_or("");
        let path = paths::event(event_namespace(event), name);
        Client::patch(self, &path, PatchType::StrategicMerge, patch)
    }
}

fn event_namespace(event: &Event) -> &str {
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
    tx: Sender<Box<Event>>,
    /// Taken by [`ApiRecorder::start`].
    rx: Mutex<Option<Receiver<Box<Event>>>>,
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

    fn build(sink: Arc<dyn EventSink>, node_name: String, retry_sleep: Duration) -> ApiRecorder {
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
    pub fn start(self: &Arc<Self>, shutdown: Receiver<()>) -> io::Result<JoinHandle<()>> {
        let rx = self
            .rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| {
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
        thread::Builder::new()
            .name("events".to_string())
            .spawn(move || worker.run(&shutdown))
    }

    /// Events waiting to be sent.
    pub fn queued(&self) -> usize {
        self.tx.len()
    }

    /// An event about `reference`, stamped now, from this kubelet (client-go's makeEvent).
    fn make_event(
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
    fn node_reference(&self) -> ObjectReference {
        ObjectReference {
            kind: Some("Node".to_string()),
            name: Some(self.node_name.clone()),
            uid: Some(self.node_name.clone()),
            ..ObjectReference::default()
        }
    }

    /// Queues without blocking; a full queue drops the event.
    fn enqueue(&self, event: Event) {
        match self.tx.try_send(Box::new(event)) {
            Ok(()) => {}
            Err(TrySendError::Full(event)) => self.drops.dropped(&event),
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
}

/// A reference to the pod (client-go's GetReference), or to one of its
/// containers by field path (the kubelet's GenerateContainerRef). A
/// container not in the spec gets the pod-level reference.
fn pod_reference(pod: &Pod, container: Option<&str>) -> ObjectReference {
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

fn container_field_path(pod: &Pod, container: &str) -> Option<String> {
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
fn unique_name(object_name: &str, now: Timestamp) -> String {
    format!("{object_name}.{:x}", now.as_nanosecond().max(0))
}

/// Counts dropped events; warns at most every [`DROP_WARN_INTERVAL`].
#[derive(Default)]
struct DropWarner {
    dropped: AtomicU64,
    last_warning: Mutex<Option<Instant>>,
}

impl DropWarner {
    fn dropped(&self, event: &Event) {
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

fn describe_object(r: &ObjectReference) -> String {
    let kind = r.kind.as_deref().unwrap_or("");
    let name = r.name.as_deref().unwrap_or("");
    match r.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    }
}

/// The sender thread's state.
struct Worker {
    sink: Arc<dyn EventSink>,
    correlator: Correlator,
    rx: Receiver<Box<Event>>,
    retry_sleep: Duration,
}

impl Worker {
    fn run(mut self, shutdown: &Receiver<()>) {
        loop {
            select! {
                recv(shutdown) -> _ => break,
                recv(self.rx) -> event => match event {
                    Ok(event) => {
                        if !self.record_to_sink(*event, shutdown) {
                            break;
                        }
                    }
                    Err(_) => break,
                },
            }
        }
        let left = self.rx.len();
        if left > 0 {
            log::info!("Event recorder stopping; {left} queued event(s) not sent");
        }
    }

    /// Correlates and writes one event, retrying as client-go does.
    /// Returns false when shutdown interrupted it.
    fn record_to_sink(&mut self, event: Event, shutdown: &Receiver<()>) -> bool {
        let Some(Correlated { mut event, patch }) =
            self.correlator
                .correlate(event, Instant::now(), Timestamp::now())
        else {
            return true;
        };
        let mut tries = 0;
        loop {
            if self.record_event(&mut event, patch.as_ref()) {
                return true;
            }
            tries += 1;
            if tries >= MAX_TRIES_PER_EVENT {
                log::error!(
                    "Unable to write event {} (retry limit exceeded!)",
                    describe_event(&event)
                );
                return true;
            }
            // A random first sleep, so kubelets do not all retry in step
            // after an apiserver outage.
            let delay = if tries == 1 {
                self.retry_sleep.mul_f64(random_unit())
            } else {
                self.retry_sleep
            };
            match shutdown.recv_timeout(delay) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                    log::warn!(
                        "Unable to write event {} (recorder is shutting down)",
                        describe_event(&event)
                    );
                    return false;
                }
            }
        }
    }

    /// One try (client-go's recordEvent): true when written or given up on,
    /// false to retry.
    fn record_event(&mut self, event: &mut Event, patch: Option<&serde_json::Value>) -> bool {
        let mut result = None;
        if event.count.unwrap_or(1) > 1 {
            if let Some(patch) = patch {
                result = Some(self.sink.patch(event, patch));
            }
        }
        // The event may have expired on the server: create it afresh.
        let create = match &result {
            None => true,
            Some(Err(e)) => e.is_not_found(),
            Some(Ok(_)) => false,
        };
        if create {
            event.metadata.resource_version = None;
            result = Some(self.sink.create(event));
        }
        let err = match result {
            Some(Ok(stored)) => {
                self.correlator.update_state(&stored);
                return true;
            }
            Some(Err(e)) => e,
            None => return true,
        };
        match &err {
            ApiError::Status { message, .. } => {
                if err.is_already_exists() || message.contains("because it is being terminated") {
                    log::debug!(
                        "Server rejected event {} (will not retry!): {err}",
                        describe_event(event)
                    );
                } else {
                    log::warn!(
                        "Server rejected event {} (will not retry!): {err}",
                        describe_event(event)
                    );
                }
                true
            }
            // The same request would fail the same way (or its answer would).
            ApiError::Decode(_) => {
                log::warn!(
                    "Unable to write event {} (will not retry!): {err}",
                    describe_event(event)
                );
                true
            }
            ApiError::Transport(_) => {
                log::warn!(
                    "Unable to write event {} (may retry after sleeping): {err}",
                    describe_event(event)
                );
                false
            }
        }
    }
}

fn describe_event(e: &Event) -> String {
    format!(
        "{}/{} ({}: {})",
        event_namespace(e),
        e.metadata.name.as_deref().unwrap_or(""),
        describe_object(&e.involved_object),
        e.reason.as_deref().unwrap_or(""),
    )
}

/// An event to write; a `patch` means update the existing one (count > 1).
#[derive(Debug)]
struct Correlated {
    event: Event,
    patch: Option<serde_json::Value>,
}

/// client-go's EventCorrelator: the spam filter, the aggregator and the
/// event logger (de-duplication), with client-go's default options.
struct Correlator {
    aggregator: Lru<AggregateRecord>,
    logger: Lru<EventLog>,
    spam: Lru<SpamBucket>,
}

struct AggregateRecord {
    /// Distinct messages seen in the current interval (at most max - 1 kept).
    messages: HashSet<String>,
    last: Instant,
}

/// What the server last said about an event (client-go's eventLog).
struct EventLog {
    count: i32,
    first_timestamp: Option<Time>,
    name: String,
    resource_version: Option<String>,
}

/// A token bucket per source+object (client-go's spamRecord), refilled
/// lazily; try-accept only.
struct SpamBucket {
    tokens: f64,
    last: Instant,
}

impl Correlator {
    fn new() -> Correlator {
        Correlator {
            aggregator: Lru::new(LRU_CACHE_ENTRIES),
            logger: Lru::new(LRU_CACHE_ENTRIES),
            spam: Lru::new(LRU_CACHE_ENTRIES),
        }
    }

    /// Aggregates, counts and filters one event (client-go's EventCorrelate):
    /// None when the spam filter drops it.
    fn correlate(&mut self, event: Event, now: Instant, wall: Timestamp) -> Option<Correlated> {
        let (event, key) = self.aggregate(event, now, wall);
        let observed = self.observe(event, key);
        if self.filter(&observed.event, now) {
            log::debug!(
                "Event {} dropped by the spam filter",
                describe_event(&observed.event)
            );
            return None;
        }
        Some(observed)
    }

    /// client-go's EventAggregate: the event, or once similar events with
    /// [`AGGREGATE_MAX_EVENTS`] distinct messages were seen within the
    /// interval, a combined event; and the key to count it under.
    fn aggregate(&mut self, event: Event, now: Instant, wall: Timestamp) -> (Event, String) {
        let event_key = event_key(&event);
        let aggregate_key = aggregate_key(&event);
        let message = event.message.clone().unwrap_or_default();
        let record = self
            .aggregator
            .get_or_insert_with(&aggregate_key, || AggregateRecord {
                messages: HashSet::new(),
                last: now,
            });
        if now.saturating_duration_since(record.last) > AGGREGATE_INTERVAL {
            record.messages.clear();
        }
        record.messages.insert(message);
        record.last = now;
        if record.messages.len() < AGGREGATE_MAX_EVENTS {
            return (event, event_key);
        }
        // Do not grow the set past the max.
        if let Some(any) = record.messages.iter().next().cloned() {
            record.messages.remove(&any);
        }
        let object_name = event.involved_object.name.as_deref().unwrap_or("");
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(unique_name(object_name, wall)),
                namespace: event.metadata.namespace.clone(),
                ..ObjectMeta::default()
            },
            count: Some(1),
            first_timestamp: Some(Time(wall)),
            last_timestamp: Some(Time(wall)),
            message: Some(format!(
                "{AGGREGATE_MESSAGE_PREFIX}{}",
                event.message.as_deref().unwrap_or("")
            )),
            type_: event.type_.clone(),
            reason: event.reason.clone(),
            source: event.source.clone(),
            reporting_component: event.reporting_component.clone(),
            reporting_instance: event.reporting_instance.clone(),
            involved_object: event.involved_object,
            ..Event::default()
        };
        (combined, aggregate_key)
    }

    /// client-go's eventObserve: a repeat of a known event takes its name,
    /// first timestamp and count + 1, with the patch that updates it.
    fn observe(&mut self, mut event: Event, key: String) -> Correlated {
        let mut patch = None;
        if let Some(last) = self.logger.get(&key).filter(|l| l.count > 0) {
            event.metadata.name = Some(last.name.clone());
            event.metadata.resource_version = last.resource_version.clone();
            event.first_timestamp = last.first_timestamp.clone();
            event.count = Some(last.count.saturating_add(1));
            patch = Some(repeat_patch(&event));
        }
        self.logger.insert(key, EventLog::of(&event));
        Correlated { event, patch }
    }

    /// client-go's EventSourceObjectSpamFilter: true to drop the event.
    fn filter(&mut self, event: &Event, now: Instant) -> bool {
        let bucket = self
            .spam
            .get_or_insert_with(&spam_key(event), || SpamBucket {
                tokens: SPAM_BURST,
                last: now,
            });
        let elapsed = now.saturating_duration_since(bucket.last).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * SPAM_QPS).min(SPAM_BURST);
        bucket.last = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            false
        } else {
            true
        }
    }

    /// Records the server's copy (name, resourceVersion, count) after a write.
    fn update_state(&mut self, stored: &Event) {
        self.logger.insert(event_key(stored), EventLog::of(stored));
    }
}

impl EventLog {
    fn of(event: &Event) -> EventLog {
        EventLog {
            count: event.count.unwrap_or(0),
            first_timestamp: event.first_timestamp.clone(),
            name: event.metadata.name.clone().unwrap_or_default(),
            resource_version: event.metadata.resource_version.clone(),
        }
    }
}

/// What client-go's two-way strategic merge patch of a repeat comes to:
/// the fields that differ from the first occurrence.
fn repeat_patch(event: &Event) -> serde_json::Value {
    let mut patch = serde_json::Map::new();
    if let Some(count) = event.count {
        patch.insert("count".to_string(), count.into());
    }
    if let Some(t) = event
        .last_timestamp
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
    {
        patch.insert("lastTimestamp".to_string(), t);
    }
    if let Some(m) = event.message.as_deref().filter(|m| !m.is_empty()) {
        patch.insert("message".to_string(), m.into());
    }
    serde_json::Value::Object(patch)
}

fn join_key(parts: &[&str]) -> String {
    parts.join("\u{0}")
}

fn source_parts(e: &Event) -> [&str; 2] {
    let source = e.source.as_ref();
    [
        source.and_then(|s| s.component.as_deref()).unwrap_or(""),
        source.and_then(|s| s.host.as_deref()).unwrap_or(""),
    ]
}

fn object_parts(r: &ObjectReference) -> [&str; 5] {
    [
        r.kind.as_deref().unwrap_or(""),
        r.namespace.as_deref().unwrap_or(""),
        r.name.as_deref().unwrap_or(""),
        r.uid.as_deref().unwrap_or(""),
        r.api_version.as_deref().unwrap_or(""),
    ]
}

/// Identical events: source, object (with field path), type, reason, message.
fn event_key(e: &Event) -> String {
    let o = &e.involved_object;
    let mut parts = Vec::with_capacity(11);
    parts.extend(source_parts(e));
    parts.extend(object_parts(o));
    parts.push(o.field_path.as_deref().unwrap_or(""));
    parts.push(e.type_.as_deref().unwrap_or(""));
    parts.push(e.reason.as_deref().unwrap_or(""));
    parts.push(e.message.as_deref().unwrap_or(""));
    join_key(&parts)
}

/// Similar events (client-go's EventAggregatorByReasonFunc): all but the message.
fn aggregate_key(e: &Event) -> String {
    let mut parts = Vec::with_capacity(11);
    parts.extend(source_parts(e));
    parts.extend(object_parts(&e.involved_object));
    parts.push(e.type_.as_deref().unwrap_or(""));
    parts.push(e.reason.as_deref().unwrap_or(""));
    parts.push(e.reporting_component.as_deref().unwrap_or(""));
    parts.push(e.reporting_instance.as_deref().unwrap_or(""));
    join_key(&parts)
}

/// The spam filter's unit: one source about one object.
fn spam_key(e: &Event) -> String {
    let mut parts = Vec::with_capacity(7);
    parts.extend(source_parts(e));
    parts.extend(object_parts(&e.involved_object));
    join_key(&parts)
}

/// A map bounded to `cap` entries, evicting the least recently used.
struct Lru<V> {
    map: HashMap<String, (V, u64)>,
    /// Last-use tick → key, oldest first.
    order: BTreeMap<u64, String>,
    tick: u64,
    cap: usize,
}

impl<V> Lru<V> {
    fn new(cap: usize) -> Lru<V> {
        Lru {
            map: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
            cap: cap.max(1),
        }
    }

    fn len(&self) -> usize {
        self.map.len()
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// Marks `key` used now; returns whether it is present.
    fn touch(&mut self, key: &str) -> bool {
        let tick = self.next_tick();
        let Some((_, used)) = self.map.get_mut(key) else {
            return false;
        };
        self.order.remove(used);
        *used = tick;
        self.order.insert(tick, key.to_string());
        true
    }

    fn get(&mut self, key: &str) -> Option<&V> {
        if !self.touch(key) {
            return None;
        }
        self.map.get(key).map(|(v, _)| v)
    }

    fn get_or_insert_with(&mut self, key: &str, make: impl FnOnce() -> V) -> &mut V {
        if !self.touch(key) {
            return self.insert(key.to_string(), make());
        }
        // Present (just touched): the closure never runs.
        let tick = self.tick;
        &mut self
            .map
            .entry(key.to_string())
            .or_insert_with(|| (make(), tick))
            .0
    }

    fn insert(&mut self, key: String, value: V) -> &mut V {
        let tick = self.next_tick();
        match self.map.get(&key) {
            Some((_, used)) => {
                self.order.remove(used);
            }
            None => {
                while self.map.len() >= self.cap {
                    let Some((_, oldest)) = self.order.pop_first() else {
                        break;
                    };
                    self.map.remove(&oldest);
                }
            }
        }
        self.order.insert(tick, key.clone());
        match self.map.entry(key) {
            Entry::Occupied(o) => {
                let slot = o.into_mut();
                *slot = (value, tick);
                &mut slot.0
            }
            Entry::Vacant(v) => &mut v.insert((value, tick)).0,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;

    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use serde_json::json;

    use super::*;
    use crate::client::RestConfig;

    const NODE: &str = "node-1";

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("ns".into()),
                uid: Some("uid-1".into()),
                resource_version: Some("42".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    ..Container::default()
                }],
                init_containers: Some(vec![Container {
                    name: "init".into(),
                    ..Container::default()
                }]),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    fn recorder(sink: Arc<dyn EventSink>, retry_sleep: Duration) -> Arc<ApiRecorder> {
        Arc::new(ApiRecorder::build(sink, NODE.to_string(), retry_sleep))
    }

    fn offline() -> Arc<ApiRecorder> {
        recorder(Arc::new(FakeSink::default()), Duration::from_millis(1))
    }

    fn pod_ev(r: &ApiRecorder, reason: &str, message: &str) -> Event {
        r.make_event(
            pod_reference(&pod(), None),
            EventType::Warning,
            reason,
            message,
        )
    }

    fn wait_until(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// What the apiserver would store: the event with a resourceVersion.
    fn stored(e: &Event, rv: &str) -> Event {
        let mut e = e.clone();
        e.metadata.resource_version = Some(rv.into());
        e
    }

    #[test]
    fn identical_events_are_counted_into_one() {
        let r = offline();
        let mut c = Correlator::new();
        let t0 = Instant::now();
        let first = c
            .correlate(pod_ev(&r, "BackOff", "m"), t0, Timestamp::now())
            .expect("not filtered");
        assert!(first.patch.is_none());
        assert_eq!(first.event.count, Some(1));
        let name = first.event.metadata.name.clone().expect("name");
        c.update_state(&stored(&first.event, "1"));

        thread::sleep(Duration::from_millis(2));
        let second = c
            .correlate(pod_ev(&r, "BackOff", "m"), t0, Timestamp::now())
            .expect("not filtered");
        assert_eq!(second.event.metadata.name.as_deref(), Some(name.as_str()));
        assert_eq!(second.event.metadata.resource_version.as_deref(), Some("1"));
        assert_eq!(second.event.count, Some(2));
        assert_eq!(second.event.first_timestamp, first.event.first_timestamp);
        let patch = second.patch.clone().expect("a patch");
        assert_eq!(patch["count"], 2);
        assert_eq!(patch["message"], "m");
        assert!(patch["lastTimestamp"].is_string(), "{patch}");
        assert_eq!(patch.as_object().map(|o| o.len()), Some(3), "{patch}");
        c.update_state(&stored(&second.event, "2"));

        let third = c
            .correlate(pod_ev(&r, "BackOff", "m"), t0, Timestamp::now())
            .expect("not filtered");
        assert_eq!(third.event.count, Some(3));
        assert_eq!(third.event.metadata.resource_version.as_deref(), Some("2"));
        assert_eq!(third.patch.expect("patch")["count"], 3);

        // Another message is another event.
        let other = c
            .correlate(pod_ev(&r, "BackOff", "other"), t0, Timestamp::now())
            .expect("not filtered");
        assert!(other.patch.is_none());
        assert_ne!(other.event.metadata.name.as_deref(), Some(name.as_str()));
    }

    #[test]
    fn similar_events_are_aggregated_after_ten() {
        let r = offline();
        let mut c = Correlator::new();
        let t0 = Instant::now();
        for i in 0..9 {
            let got = c
                .correlate(pod_ev(&r, "Failed", &format!("m{i}")), t0, Timestamp::now())
                .expect("not filtered");
            assert_eq!(got.event.message.as_deref(), Some(format!("m{i}").as_str()));
            assert!(got.patch.is_none());
        }
        let tenth = c
            .correlate(pod_ev(&r, "Failed", "m9"), t0, Timestamp::now())
            .expect("not filtered");
        assert_eq!(
            tenth.event.message.as_deref(),
            Some("(combined from similar events): m9")
        );
        assert_eq!(tenth.event.count, Some(1));
        assert!(tenth.patch.is_none());
        assert_eq!(tenth.event.reason.as_deref(), Some("Failed"));
        assert_eq!(tenth.event.involved_object.name.as_deref(), Some("web-0"));
        assert_eq!(tenth.event.metadata.namespace.as_deref(), Some("ns"));
        let combined_name = tenth.event.metadata.name.clone();
        c.update_state(&stored(&tenth.event, "7"));

        // The next new message updates the combined event.
        let eleventh = c
            .correlate(pod_ev(&r, "Failed", "m10"), t0, Timestamp::now())
            .expect("not filtered");
        assert_eq!(eleventh.event.metadata.name, combined_name);
        assert_eq!(eleventh.event.count, Some(2));
        let patch = eleventh.patch.expect("patch");
        assert_eq!(patch["message"], "(combined from similar events): m10");

        // Another reason is not similar.
        let other = c
            .correlate(pod_ev(&r, "Unhealthy", "x"), t0, Timestamp::now())
            .expect("not filtered");
        assert_eq!(other.event.message.as_deref(), Some("x"));

        // After ten quiet minutes the group starts over.
        let later = t0 + AGGREGATE_INTERVAL + Duration::from_secs(1);
        let fresh = c
            .correlate(pod_ev(&r, "Failed", "m11"), later, Timestamp::now())
            .expect("not filtered");
        assert_eq!(fresh.event.message.as_deref(), Some("m11"));
    }

    #[test]
    fn spam_filter_allows_a_burst_then_one_per_five_minutes() {
        let r = offline();
        let mut c = Correlator::new();
        let t0 = Instant::now();
        // Distinct reasons: neither aggregated nor de-duplicated.
        let mut n = 0;
        let mut next = |c: &mut Correlator, at: Instant| {
            n += 1;
            c.correlate(pod_ev(&r, &format!("R{n}"), "m"), at, Timestamp::now())
        };
        for i in 0..25 {
            assert!(next(&mut c, t0).is_some(), "event {i} within the burst");
        }
        assert!(next(&mut c, t0).is_none(), "26th is spam");
        assert!(next(&mut c, t0 + Duration::from_secs(299)).is_none());
        assert!(next(&mut c, t0 + Duration::from_secs(301)).is_some());
        assert!(next(&mut c, t0 + Duration::from_secs(302)).is_none());

        // Another object has its own budget.
        let node_event = r.make_event(r.node_reference(), EventType::Normal, "NodeReady", "ok");
        assert!(c.correlate(node_event, t0, Timestamp::now()).is_some());
    }

    #[test]
    fn lru_evicts_least_recently_used() {
        let mut lru = Lru::new(3);
        for k in ["a", "b", "c"] {
            lru.insert(k.to_string(), k.to_string());
        }
        assert!(lru.get("a").is_some());
        lru.insert("d".into(), "d".into());
        assert_eq!(lru.len(), 3);
        assert!(lru.get("b").is_none(), "b was least recently used");
        assert!(lru.get("a").is_some() && lru.get("c").is_some() && lru.get("d").is_some());
        *lru.get_or_insert_with("a", || "new".into()) += "!";
        assert_eq!(lru.get("a").map(String::as_str), Some("a!"));
        assert_eq!(lru.order.len(), lru.map.len());
    }

    #[test]
    fn correlation_caches_stay_bounded() {
        let r = offline();
        let mut c = Correlator::new();
        let t0 = Instant::now();
        for i in 0..(LRU_CACHE_ENTRIES + 500) {
            let mut e = pod_ev(&r, "Pulling", "m");
            e.involved_object.name = Some(format!("pod-{i}"));
            let _ = c.correlate(e, t0, Timestamp::now());
        }
        assert_eq!(c.aggregator.len(), LRU_CACHE_ENTRIES);
        assert_eq!(c.logger.len(), LRU_CACHE_ENTRIES);
        assert_eq!(c.spam.len(), LRU_CACHE_ENTRIES);
    }

    #[test]
    fn pod_event_shape() {
        let r = offline();
        let before = Timestamp::now().as_nanosecond();
        let e = pod_ev(&r, "BackOff", "Back-off restarting");
        let after = Timestamp::now().as_nanosecond();

        let name = e.metadata.name.clone().expect("name");
        let (object, suffix) = name.rsplit_once('.').expect("name.suffix");
        assert_eq!(object, "web-0");
        let nanos = i128::from_str_radix(suffix, 16).expect("hex suffix");
        assert!(suffix
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)));
        assert!(
            (before..=after).contains(&nanos),
            "{nanos} not in [{before}, {after}]"
        );

        let v = serde_json::to_value(&e).expect("serialize");
        assert_eq!(v["metadata"]["namespace"], "ns");
        assert_eq!(
            v["involvedObject"],
            json!({"kind": "Pod", "apiVersion": "v1", "namespace": "ns", "name": "web-0",
                   "uid": "uid-1", "resourceVersion": "42"})
        );
        assert_eq!(v["source"], json!({"component": "kubelet", "host": NODE}));
        assert_eq!(v["reportingComponent"], "kubelet");
        assert_eq!(v["reportingInstance"], NODE);
        assert_eq!(v["type"], "Warning");
        assert_eq!(v["reason"], "BackOff");
        assert_eq!(v["message"], "Back-off restarting");
        assert_eq!(v["count"], 1);
        assert!(v["firstTimestamp"].is_string());
        assert_eq!(v["firstTimestamp"], v["lastTimestamp"]);
        assert!(v.get("eventTime").is_none());
    }

    #[test]
    fn container_events_point_at_the_container() {
        let p = pod();
        let path = |c| pod_reference(&p, Some(c)).field_path;
        assert_eq!(path("app").as_deref(), Some("spec.containers{app}"));
        assert_eq!(path("init").as_deref(), Some("spec.initContainers{init}"));
        assert_eq!(path("gone"), None);
        assert_eq!(pod_reference(&p, None).field_path, None);

        // Container events are distinct from the pod's for de-duplication.
        let r = offline();
        let a = r.make_event(
            pod_reference(&p, Some("app")),
            EventType::Normal,
            "Started",
            "m",
        );
        let b = r.make_event(pod_reference(&p, None), EventType::Normal, "Started", "m");
        assert_ne!(event_key(&a), event_key(&b));
        assert_eq!(spam_key(&a), spam_key(&b));
    }

    #[test]
    fn node_event_shape() {
        let r = offline();
        let e = r.make_event(
            r.node_reference(),
            EventType::Normal,
            "Starting",
            "Starting kubelet.",
        );
        let v = serde_json::to_value(&e).expect("serialize");
        assert_eq!(v["metadata"]["namespace"], "default");
        assert_eq!(
            v["involvedObject"],
            json!({"kind": "Node", "name": NODE, "uid": NODE})
        );
        assert!(e
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("node-1.")));
        assert_eq!(v["type"], "Normal");
        assert_eq!(v["source"]["host"], NODE);
    }

    #[test]
    fn full_queue_drops_without_blocking() {
        let r = offline(); // never started: nothing drains the queue
        let start = Instant::now();
        for i in 0..(QUEUE_CAPACITY + 500) {
            r.pod_event(&pod(), EventType::Normal, "Pulling", &format!("m{i}"));
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(r.queued(), QUEUE_CAPACITY);
        // The first drop warned (and reset the count); the rest were counted.
        assert_eq!(r.drops.dropped.load(Ordering::Relaxed), 499);
    }

    #[test]
    fn start_twice_fails() {
        let r = offline();
        let (_tx, rx) = crossbeam_channel::bounded::<()>(0);
        let h = r.start(rx.clone()).expect("start");
        assert!(r.start(rx).is_err());
        drop(_tx);
        h.join().expect("join");
    }

    // --- the sender thread against a fake sink ---

    #[derive(Debug, Clone, PartialEq)]
    enum Call {
        Create(Box<Event>),
        Patch(String, serde_json::Value),
    }

    /// Answers from a script (then success), recording every call.
    #[derive(Default)]
    struct FakeSink {
        calls: Mutex<Vec<Call>>,
        script: Mutex<VecDeque<ApiError>>,
        fail_forever: Option<ApiError>,
    }

    impl FakeSink {
        fn failing(errors: Vec<ApiError>) -> FakeSink {
            FakeSink {
                script: Mutex::new(errors.into()),
                ..FakeSink::default()
            }
        }

        fn calls(&self) -> Vec<Call> {
            self.calls.lock().expect("lock").clone()
        }

        fn answer(&self, call: Call, ok: Event) -> Result<Event, ApiError> {
            let mut calls = self.calls.lock().expect("lock");
            calls.push(call);
            if let Some(e) = &self.fail_forever {
                return Err(e.clone());
            }
            match self.script.lock().expect("lock").pop_front() {
                Some(e) => Err(e),
                None => Ok(stored(&ok, &calls.len().to_string())),
            }
        }
    }

    impl EventSink for FakeSink {
        fn create(&self, event: &Event) -> Result<Event, ApiError> {
            self.answer(Call::Create(Box::new(event.clone())), event.clone())
        }

        fn patch(&self, event: &Event, patch: &serde_json::Value) -> Result<Event, ApiError> {
            let name = event.metadata.name.clone().unwrap_or_default();
            self.answer(Call::Patch(name, patch.clone()), event.clone())
        }
    }

    fn transport() -> ApiError {
        ApiError::Transport("POST /api/v1/namespaces/ns/events: connection refused".into())
    }

    fn started(
        sink: Arc<FakeSink>,
        sleep: Duration,
    ) -> (Arc<ApiRecorder>, Sender<()>, JoinHandle<()>) {
        let r = recorder(sink, sleep);
        let (tx, rx) = crossbeam_channel::bounded(0);
        let h = r.start(rx).expect("start");
        (r, tx, h)
    }

    #[test]
    fn transport_errors_are_retried() {
        let sink = Arc::new(FakeSink::failing(vec![transport(), transport()]));
        let (r, stop, h) = started(sink.clone(), Duration::from_millis(5));
        r.pod_event(&pod(), EventType::Normal, "Pulled", "done");
        wait_until("three tries", || sink.calls().len() == 3);
        thread::sleep(Duration::from_millis(50));
        assert_eq!(sink.calls().len(), 3);
        drop(stop);
        h.join().expect("join");
    }

    #[test]
    fn gives_up_after_max_tries() {
        let sink = Arc::new(FakeSink {
            fail_forever: Some(transport()),
            ..FakeSink::default()
        });
        let (r, stop, h) = started(sink.clone(), Duration::from_millis(1));
        r.pod_event(&pod(), EventType::Normal, "Pulled", "one");
        r.pod_event(&pod(), EventType::Normal, "Pulled", "two");
        let total = 2 * MAX_TRIES_PER_EVENT as usize;
        wait_until("both events tried", || sink.calls().len() == total);
        thread::sleep(Duration::from_millis(50));
        assert_eq!(sink.calls().len(), total);
        drop(stop);
        h.join().expect("join");
    }

    #[test]
    fn status_errors_are_final() {
        let exists = ApiError::status(409, "AlreadyExists", "events \"x\" already exists");
        let invalid = ApiError::status(422, "Invalid", "bad");
        let sink = Arc::new(FakeSink::failing(vec![exists, invalid]));
        let (r, stop, h) = started(sink.clone(), Duration::from_millis(1));
        r.pod_event(&pod(), EventType::Normal, "Pulled", "one");
        r.pod_event(&pod(), EventType::Normal, "Pulled", "two");
        r.pod_event(&pod(), EventType::Normal, "Pulled", "three");
        wait_until("three creates", || sink.calls().len() == 3);
        thread::sleep(Duration::from_millis(50));
        assert_eq!(sink.calls().len(), 3);
        drop(stop);
        h.join().expect("join");
    }

    #[test]
    fn repeats_are_patched_and_expired_ones_recreated() {
        let not_found = ApiError::status(404, "NotFound", "gone");
        let sink = Arc::new(FakeSink::default());
        let (r, stop, h) = started(sink.clone(), Duration::from_millis(1));
        for _ in 0..3 {
            r.pod_container_event(&pod(), "app", EventType::Warning, "BackOff", "restarting");
        }
        wait_until("three writes", || sink.calls().len() == 3);
        let calls = sink.calls();
        let Call::Create(first) = &calls[0] else {
            panic!("{calls:?}")
        };
        let name = first.metadata.name.clone().expect("name");
        assert_eq!(
            first.involved_object.field_path.as_deref(),
            Some("spec.containers{app}")
        );
        for (i, call) in calls[1..].iter().enumerate() {
            let Call::Patch(patched, patch) = call else {
                panic!("{calls:?}")
            };
            assert_eq!(patched, &name);
            assert_eq!(patch["count"], i + 2);
        }

        // The event expired on the server: the PATCH 404s and it is created again.
        sink.script.lock().expect("lock").push_back(not_found);
        r.pod_container_event(&pod(), "app", EventType::Warning, "BackOff", "restarting");
        wait_until("patch and create", || sink.calls().len() == 5);
        let calls = sink.calls();
        assert!(matches!(&calls[3], Call::Patch(n, p) if n == &name && p["count"] == 4));
        let Call::Create(again) = &calls[4] else {
            panic!("{calls:?}")
        };
        assert_eq!(again.count, Some(4));
        assert_eq!(again.metadata.resource_version, None);
        drop(stop);
        h.join().expect("join");
    }

    #[test]
    fn shutdown_interrupts_the_retry_sleep() {
        let sink = Arc::new(FakeSink {
            fail_forever: Some(transport()),
            ..FakeSink::default()
        });
        let (r, stop, h) = started(sink.clone(), Duration::from_secs(60));
        r.node_event(EventType::Normal, "Starting", "Starting kubelet.");
        wait_until("first try", || !sink.calls().is_empty());
        let start = Instant::now();
        drop(stop);
        h.join().expect("join");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{:?}",
            start.elapsed()
        );
        // Events after the thread stopped are dropped quietly.
        r.node_event(EventType::Normal, "NodeReady", "ready");
    }

    // --- over HTTP, through the real client ---

    #[derive(Debug, Clone)]
    struct Request {
        method: String,
        path: String,
        content_type: String,
        body: serde_json::Value,
    }

    /// A one-request-per-connection HTTP server on 127.0.0.1: records each
    /// request and answers `(status, body)` from `handler`.
    fn serve(
        handler: impl Fn(&Request) -> (u16, serde_json::Value) + Send + 'static,
    ) -> (String, Arc<Mutex<Vec<Request>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let log = Arc::new(Mutex::new(Vec::new()));
        let seen = log.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let mut reader = BufReader::new(stream);
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or("").to_string();
                let path = parts.next().unwrap_or("").to_string();
                let (mut len, mut content_type) = (0usize, String::new());
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = h.split_once(':') {
                        match k.trim().to_ascii_lowercase().as_str() {
                            "content-length" => len = v.trim().parse().unwrap_or(0),
                            "content-type" => content_type = v.trim().to_string(),
                            _ => {}
                        }
                    }
                }
                let mut body = vec![0; len];
                if reader.read_exact(&mut body).is_err() {
                    continue;
                }
                let req = Request {
                    method,
                    path,
                    content_type,
                    body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
                };
                let (status, reply) = handler(&req);
                seen.lock().expect("lock").push(req);
                let reply = reply.to_string();
                let mut stream = reader.into_inner();
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                    reply.len()
                );
            }
        });
        (url, log)
    }

    fn status_body(code: u16, reason: &str) -> serde_json::Value {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
               "reason": reason, "message": reason, "code": code})
    }

    /// An apiserver keeping events by name; PATCH merges the three fields
    /// the recorder sends. `expire` makes every PATCH a 404.
    fn fake_apiserver(expire: bool) -> (String, Arc<Mutex<Vec<Request>>>) {
        let events = Mutex::new(HashMap::<String, serde_json::Value>::new());
        let rv = AtomicU64::new(0);
        serve(move |req| {
            let mut events = events.lock().expect("lock");
            let rv = (rv.fetch_add(1, Ordering::Relaxed) + 1).to_string();
            match req.method.as_str() {
                "POST" if req.path == "/api/v1/namespaces/ns/events" => {
                    let mut e = req.body.clone();
                    let name = e["metadata"]["name"].as_str().unwrap_or("").to_string();
                    if events.contains_key(&name) {
                        return (409, status_body(409, "AlreadyExists"));
                    }
                    e["metadata"]["resourceVersion"] = rv.into();
                    events.insert(name, e.clone());
                    (201, e)
                }
                "PATCH" => {
                    let name = req.path.rsplit('/').next().unwrap_or("").to_string();
                    match events.get_mut(&name) {
                        Some(e) if !expire => {
                            for k in ["count", "lastTimestamp", "message"] {
                                e[k] = req.body[k].clone();
                            }
                            e["metadata"]["resourceVersion"] = rv.into();
                            (200, e.clone())
                        }
                        _ => (404, status_body(404, "NotFound")),
                    }
                }
                _ => (405, status_body(405, "MethodNotAllowed")),
            }
        })
    }

    fn http_recorder(url: &str) -> (Arc<ApiRecorder>, Sender<()>, JoinHandle<()>) {
        let client = Client::new(RestConfig::new(url)).expect("client");
        let r = ApiRecorder::new(client, NODE.to_string(), 50.0, 100);
        let (tx, rx) = crossbeam_channel::bounded(0);
        let h = r.start(rx).expect("start");
        (r, tx, h)
    }

    #[test]
    fn http_post_then_strategic_merge_patches() {
        let (url, log) = fake_apiserver(false);
        let (r, stop, h) = http_recorder(&url);
        for _ in 0..3 {
            r.pod_event(
                &pod(),
                EventType::Warning,
                "BackOff",
                "Back-off pulling image",
            );
        }
        wait_until("three requests", || log.lock().expect("lock").len() == 3);
        let reqs = log.lock().expect("lock").clone();
        assert_eq!(reqs[0].method, "POST");
        assert_eq!(reqs[0].path, "/api/v1/namespaces/ns/events");
        assert_eq!(reqs[0].content_type, "application/json");
        assert_eq!(reqs[0].body["count"], 1);
        assert_eq!(reqs[0].body["involvedObject"]["name"], "web-0");
        let name = reqs[0].body["metadata"]["name"]
            .as_str()
            .expect("name")
            .to_string();
        for (i, req) in reqs[1..].iter().enumerate() {
            assert_eq!(req.method, "PATCH");
            assert_eq!(req.path, format!("/api/v1/namespaces/ns/events/{name}"));
            assert_eq!(req.content_type, "application/strategic-merge-patch+json");
            assert_eq!(req.body["count"], i + 2);
            assert_eq!(req.body["message"], "Back-off pulling image");
        }

        // A node event goes to the default namespace.
        r.node_event(EventType::Normal, "Starting", "Starting kubelet.");
        wait_until("node event", || log.lock().expect("lock").len() == 4);
        let req = log.lock().expect("lock")[3].clone();
        assert_eq!(req.path, "/api/v1/namespaces/default/events");
        assert_eq!(req.body["involvedObject"]["kind"], "Node");
        drop(stop);
        h.join().expect("join");
    }

    #[test]
    fn http_expired_event_is_created_again() {
        let (url, log) = fake_apiserver(true);
        let (r, stop, h) = http_recorder(&url);
        r.pod_event(&pod(), EventType::Normal, "Pulling", "Pulling image");
        r.pod_event(&pod(), EventType::Normal, "Pulling", "Pulling image");
        wait_until("three requests", || log.lock().expect("lock").len() == 3);
        thread::sleep(Duration::from_millis(50));
        let reqs = log.lock().expect("lock").clone();
        let methods: Vec<_> = reqs.iter().map(|r| r.method.as_str()).collect();
        // The re-POST reuses the name, which the fake still holds: 409, given up.
        assert_eq!(methods, ["POST", "PATCH", "POST"]);
        assert_eq!(reqs[2].body["count"], 2);
        assert!(reqs[2].body["metadata"].get("resourceVersion").is_none());
        drop(stop);
        h.join().expect("join");
    }
}
