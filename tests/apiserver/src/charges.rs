//! What a real kube-apiserver charges a kubelet, so that benchmarks on the
//! double see it: a service time per request, and the client-side rate
//! limits (kubeAPIQPS/kubeAPIBurst, eventRecordQPS/eventBurst) a real
//! kubelet's clients keep.
//!
//! The service times are the medians of the v1.22.3 kube-apiserver's audit
//! log in `../shared/fidelity/upstream-v1.22/audit-node.jsonl`
//! (requestReceived to ResponseComplete, over the node's 409 requests):
//! get 2.3 ms, list 1.2-2.6 ms (small lists), create 2.9-4.7 ms, update
//! 5.6 ms, patch 4.6 ms (events) to 6.6 ms (pods/status), delete 7.7 ms.
//!
//! The limits are checked, not enforced: a real server does not see a
//! client's token bucket, it only sees requests arrive. The double
//! replays each client's bucket from the arrival times and counts the
//! requests the bucket could not have let through, with one token of slack
//! for requests that overtake each other on the wire.

use rkubelet_util::lock;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// `--latency`: none, a fixed number of milliseconds, or `real`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Latency {
    #[default]
    None,
    Fixed(u64),
    Real,
}

impl Latency {
    pub fn parse(s: &str) -> Option<Latency> {
        match s {
            "real" => Some(Latency::Real),
            "0" | "none" => Some(Latency::None),
            ms => ms.parse().ok().map(Latency::Fixed),
        }
    }

    /// The service time of one request of `verb` (a watch's is its setup).
    pub fn of(self, verb: &str) -> Duration {
        let ms = match self {
            Latency::None => 0.0,
            Latency::Fixed(ms) => ms as f64,
            Latency::Real => match verb {
                "get" | "watch" => 2.3,
                "list" => 1.5,
                "create" => 3.5,
                "update" => 5.6,
                "patch" => 5.5,
                "delete" | "deletecollection" => 7.7,
                _ => 3.0,
            },
        };
        Duration::from_secs_f64(ms / 1000.0)
    }
}

/// A client's rate limit: `qps` and `burst`, as client-go's token bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limit {
    pub qps: f64,
    pub burst: f64,
}

/// `--client-qps/--client-burst` and `--event-qps/--event-burst`: the
/// limits of a kubelet's API client and of its event client (upstream's
/// heartbeat client, leases and node status, has none).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClientLimits {
    pub api: Option<Limit>,
    pub events: Option<Limit>,
}

impl ClientLimits {
    /// The bucket a request belongs to, and its limit; None when it is
    /// not limited.
    fn of(&self, resource: &str, subresource: &str) -> Option<(&'static str, Limit)> {
        match (resource, subresource) {
            ("events", _) => self.events.map(|l| ("events", l)),
            ("leases", _) | ("nodes", "status") => None,
            _ => self.api.map(|l| ("api", l)),
        }
    }
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Every client's bucket, by user and kind, and what went over it.
#[derive(Default)]
pub struct ClientBudget {
    limits: ClientLimits,
    inner: Mutex<BTreeMap<String, (Bucket, u64, u64)>>,
}

/// Requests arriving within this of each other may have left the client
/// in the other order.
const SLACK_TOKENS: f64 = 1.0;

impl ClientBudget {
    pub fn new(limits: ClientLimits) -> ClientBudget {
        ClientBudget {
            limits,
            inner: Mutex::default(),
        }
    }

    /// Counts one request of `user`; false when its client's bucket was
    /// already empty.
    pub fn charge(&self, user: &str, resource: &str, subresource: &str) -> bool {
        self.charge_at(user, resource, subresource, Instant::now())
    }

    fn charge_at(&self, user: &str, resource: &str, subresource: &str, now: Instant) -> bool {
        let Some((kind, limit)) = self.limits.of(resource, subresource) else {
            return true;
        };
        let mut all = lock(&self.inner);
        let (bucket, seen, over) = all.entry(format!("{user} {kind}")).or_insert((
            Bucket {
                tokens: limit.burst,
                at: now,
            },
            0,
            0,
        ));
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * limit.qps).min(limit.burst);
        bucket.at = now;
        bucket.tokens -= 1.0;
        *seen += 1;
        let within = bucket.tokens >= -SLACK_TOKENS;
        if !within {
            // the client would have waited for this token
            bucket.tokens += 1.0;
            *over += 1;
        }
        within
    }

    /// `{"<user> <kind>": {"requests": n, "overLimit": m}}` since the
    /// start, for the stats (a stats reset does not clear it: the buckets
    /// are the clients', which no reset refills).
    pub fn to_json(&self) -> Value {
        let all = lock(&self.inner);
        let each = all
            .iter()
            .map(|(k, (_, seen, over))| (k.clone(), json!({"requests": seen, "overLimit": over})));
        Value::Object(each.collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(qps: f64, burst: f64) -> ClientBudget {
        let limit = Some(Limit { qps, burst });
        ClientBudget::new(ClientLimits {
            api: limit,
            events: limit,
        })
    }

    #[test]
    fn a_burst_then_the_rate_is_within_and_more_is_counted() {
        let b = budget(5.0, 10.0);
        let t0 = Instant::now();
        // ten at once, then one of slack
        for _ in 0..11 {
            assert!(b.charge_at("u", "pods", "", t0));
        }
        assert!(!b.charge_at("u", "pods", "", t0), "the twelfth at once");
        // 5 qps: one more each 200 ms
        assert!(b.charge_at("u", "pods", "", t0 + Duration::from_millis(200)));
        assert!(!b.charge_at("u", "pods", "", t0 + Duration::from_millis(210)));
        let v = b.to_json();
        assert_eq!(v["u api"]["requests"], 14);
        assert_eq!(v["u api"]["overLimit"], 2);
    }

    #[test]
    fn events_have_their_own_bucket_and_heartbeats_none() {
        let b = budget(1.0, 1.0);
        let t0 = Instant::now();
        assert!(b.charge_at("u", "pods", "", t0));
        assert!(b.charge_at("u", "events", "", t0));
        for _ in 0..100 {
            assert!(b.charge_at("u", "leases", "", t0));
            assert!(b.charge_at("u", "nodes", "status", t0));
        }
        assert!(b.to_json().get("u leases").is_none());
    }

    #[test]
    fn latency_follows_the_captured_server() {
        assert_eq!(Latency::parse("real"), Some(Latency::Real));
        assert_eq!(Latency::parse("12"), Some(Latency::Fixed(12)));
        assert_eq!(Latency::parse("x"), None);
        assert_eq!(Latency::Real.of("delete"), Duration::from_micros(7700));
        assert_eq!(Latency::Fixed(3).of("get"), Duration::from_millis(3));
        assert_eq!(Latency::None.of("patch"), Duration::ZERO);
    }
}
