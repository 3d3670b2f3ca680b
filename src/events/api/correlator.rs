//! client-go's EventCorrelator (events_cache.go): spam filter, aggregation
//! of similar events and de-duplication of identical ones into a count.

use super::*;

/// An event to write; a `patch` means update the existing one (count > 1).
#[derive(Debug)]
pub(super) struct Correlated {
    pub(super) event: Event,
    pub(super) patch: Option<serde_json::Value>,
}

/// client-go's EventCorrelator: the spam filter, the aggregator and the
/// event logger (de-duplication), with client-go's default options.
pub(super) struct Correlator {
    pub(super) aggregator: Lru<AggregateRecord>,
    pub(super) logger: Lru<EventLog>,
    pub(super) spam: Lru<SpamBucket>,
}

pub(super) struct AggregateRecord {
    /// Distinct messages seen in the current interval (at most max - 1 kept).
    pub(super) messages: HashSet<String>,
    pub(super) last: Instant,
}

/// What the server last said about an event (client-go's eventLog).
pub(super) struct EventLog {
    pub(super) count: i32,
    pub(super) first_timestamp: Option<Time>,
    pub(super) name: String,
    pub(super) resource_version: Option<String>,
}

/// A token bucket per source+object (client-go's spamRecord), refilled
/// lazily; try-accept only.
pub(super) struct SpamBucket {
    pub(super) tokens: f64,
    pub(super) last: Instant,
}

impl Correlator {
    pub(super) fn new() -> Correlator {
        Correlator {
            aggregator: Lru::new(LRU_CACHE_ENTRIES),
            logger: Lru::new(LRU_CACHE_ENTRIES),
            spam: Lru::new(LRU_CACHE_ENTRIES),
        }
    }

    /// Drops every entry about the object `uid`. client-go keeps them until
    /// the LRU evicts them; a kubelet churning pods would then carry up to
    /// 3 × 4096 entries (megabytes) about pods long gone.
    pub(super) fn forget_object(&mut self, uid: &str) {
        let keep = |key: &str| key_object_uid(key) != Some(uid);
        self.aggregator.retain(keep);
        self.logger.retain(keep);
        self.spam.retain(keep);
    }

    /// Aggregates, counts and filters one event (client-go's EventCorrelate):
    /// None when the spam filter drops it.
    pub(super) fn correlate(
        &mut self,
        event: Event,
        now: Instant,
        wall: Timestamp,
    ) -> Option<Correlated> {
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
    pub(super) fn aggregate(
        &mut self,
        event: Event,
        now: Instant,
        wall: Timestamp,
    ) -> (Event, String) {
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
    pub(super) fn observe(&mut self, mut event: Event, key: String) -> Correlated {
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
    pub(super) fn filter(&mut self, event: &Event, now: Instant) -> bool {
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
    pub(super) fn update_state(&mut self, stored: &Event) {
        self.logger.insert(event_key(stored), EventLog::of(stored));
    }
}

impl EventLog {
    pub(super) fn of(event: &Event) -> EventLog {
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
pub(super) fn repeat_patch(event: &Event) -> serde_json::Value {
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

pub(super) fn join_key(parts: &[&str]) -> String {
    parts.join("\u{0}")
}

/// The involved object's UID in any of the keys below, which all start
/// with the source's 2 parts and then the object's 5.
pub(super) fn key_object_uid(key: &str) -> Option<&str> {
    key.split('\u{0}').nth(2 + 3)
}

pub(super) fn source_parts(e: &Event) -> [&str; 2] {
    let source = e.source.as_ref();
    [
        source.and_then(|s| s.component.as_deref()).unwrap_or(""),
        source.and_then(|s| s.host.as_deref()).unwrap_or(""),
    ]
}

pub(super) fn object_parts(r: &ObjectReference) -> [&str; 5] {
    [
        r.kind.as_deref().unwrap_or(""),
        r.namespace.as_deref().unwrap_or(""),
        r.name.as_deref().unwrap_or(""),
        r.uid.as_deref().unwrap_or(""),
        r.api_version.as_deref().unwrap_or(""),
    ]
}

/// Identical events: source, object (with field path), type, reason, message.
pub(super) fn event_key(e: &Event) -> String {
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
pub(super) fn aggregate_key(e: &Event) -> String {
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
pub(super) fn spam_key(e: &Event) -> String {
    let mut parts = Vec::with_capacity(7);
    parts.extend(source_parts(e));
    parts.extend(object_parts(&e.involved_object));
    join_key(&parts)
}
