//! The recorder, correlator and sender, against fake sinks and a fake
//! API server over HTTP.

use std::collections::VecDeque;
use std::thread;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use serde_json::json;

use super::*;
use crate::client::testing::{Reply, TestServer};
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
    crate::util::testing::eventually_within(what, Duration::from_secs(10), cond);
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
fn forgetting_an_object_drops_only_its_entries() {
    let r = offline();
    let mut c = Correlator::new();
    let t0 = Instant::now();
    for uid in ["uid-1", "uid-2"] {
        for reason in ["Pulled", "Created", "Started"] {
            let mut e = pod_ev(&r, reason, "m");
            e.involved_object.uid = Some(uid.into());
            let _ = c.correlate(e, t0, Timestamp::now());
        }
    }
    assert_eq!(
        (c.aggregator.len(), c.logger.len(), c.spam.len()),
        (6, 6, 2)
    );
    c.forget_object("uid-1");
    assert_eq!(
        (c.aggregator.len(), c.logger.len(), c.spam.len()),
        (3, 3, 1)
    );
    for lru in [
        &c.aggregator.map.keys().collect::<Vec<_>>(),
        &c.logger.map.keys().collect(),
    ] {
        assert!(
            lru.iter().all(|k| key_object_uid(k) == Some("uid-2")),
            "{lru:?}"
        );
    }
    assert_eq!(
        c.aggregator.order.len(),
        3,
        "the LRU order forgets them too"
    );
    c.forget_object("uid-unknown");
    assert_eq!(c.logger.len(), 3);
}

#[test]
fn a_forgotten_pod_is_forgotten_after_its_queued_events() {
    let sink = Arc::new(FakeSink::default());
    let (r, stop, h) = started(sink.clone(), Duration::from_millis(1));
    r.pod_event(
        &pod(),
        EventType::Normal,
        "Killing",
        "Stopping container app",
    );
    r.pod_event(
        &pod(),
        EventType::Normal,
        "Killing",
        "Stopping container app",
    );
    r.forget_pod("uid-1");
    r.pod_event(
        &pod(),
        EventType::Normal,
        "Killing",
        "Stopping container app",
    );
    wait_until("three writes", || sink.calls().len() == 3);
    let calls = sink.calls();
    // The repeat queued before the forget is still counted; the one after
    // it starts afresh.
    assert!(matches!(&calls[0], Call::Create(_)), "{calls:?}");
    assert!(
        matches!(&calls[1], Call::Patch(_, p) if p["count"] == 2),
        "{calls:?}"
    );
    assert!(
        matches!(&calls[2], Call::Create(e) if e.count == Some(1)),
        "{calls:?}"
    );
    drop(stop);
    h.join().expect("join");
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
) -> (Arc<ApiRecorder>, Sender<()>, crate::util::worker::Worker) {
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

/// An apiserver keeping events by name; PATCH merges the three fields
/// the recorder sends. `expire` makes every PATCH a 404.
fn fake_apiserver(expire: bool) -> TestServer {
    let events = Mutex::new(HashMap::<String, serde_json::Value>::new());
    let rv = AtomicU64::new(0);
    TestServer::start(move |req| {
        let mut events = events.lock().expect("lock");
        let rv = (rv.fetch_add(1, Ordering::Relaxed) + 1).to_string();
        match req.method.as_str() {
            "POST" if req.path == "/api/v1/namespaces/ns/events" => {
                let mut e = req.json();
                let name = e["metadata"]["name"].as_str().unwrap_or("").to_string();
                if events.contains_key(&name) {
                    return Reply::status(409, "AlreadyExists", "AlreadyExists");
                }
                e["metadata"]["resourceVersion"] = rv.into();
                events.insert(name, e.clone());
                Reply::json(201, &e)
            }
            "PATCH" => {
                let body = req.json();
                let name = req.path.rsplit('/').next().unwrap_or("").to_string();
                match events.get_mut(&name) {
                    Some(e) if !expire => {
                        for k in ["count", "lastTimestamp", "message"] {
                            e[k] = body[k].clone();
                        }
                        e["metadata"]["resourceVersion"] = rv.into();
                        Reply::json(200, e)
                    }
                    _ => Reply::status(404, "NotFound", "NotFound"),
                }
            }
            _ => Reply::status(405, "MethodNotAllowed", "MethodNotAllowed"),
        }
    })
}

fn http_recorder(url: &str) -> (Arc<ApiRecorder>, Sender<()>, crate::util::worker::Worker) {
    let client = Client::new(RestConfig::new(url), std::sync::Arc::new(())).expect("client");
    let r = ApiRecorder::new(client, NODE.to_string(), 50.0, 100);
    let (tx, rx) = crossbeam_channel::bounded(0);
    let h = r.start(rx).expect("start");
    (r, tx, h)
}

#[test]
fn http_post_then_strategic_merge_patches() {
    let server = fake_apiserver(false);
    let (r, stop, h) = http_recorder(&server.url);
    for _ in 0..3 {
        r.pod_event(
            &pod(),
            EventType::Warning,
            "BackOff",
            "Back-off pulling image",
        );
    }
    wait_until("three requests", || server.requests().len() == 3);
    let reqs = server.requests();
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].path, "/api/v1/namespaces/ns/events");
    assert_eq!(reqs[0].header("Content-Type"), Some("application/json"));
    assert_eq!(reqs[0].json()["count"], 1);
    assert_eq!(reqs[0].json()["involvedObject"]["name"], "web-0");
    let name = reqs[0].json()["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    for (i, req) in reqs[1..].iter().enumerate() {
        assert_eq!(req.method, "PATCH");
        assert_eq!(req.path, format!("/api/v1/namespaces/ns/events/{name}"));
        assert_eq!(
            req.header("Content-Type"),
            Some("application/strategic-merge-patch+json")
        );
        assert_eq!(req.json()["count"], i + 2);
        assert_eq!(req.json()["message"], "Back-off pulling image");
    }

    // A node event goes to the default namespace.
    r.node_event(EventType::Normal, "Starting", "Starting kubelet.");
    wait_until("node event", || server.requests().len() == 4);
    let req = &server.requests()[3];
    assert_eq!(req.path, "/api/v1/namespaces/default/events");
    assert_eq!(req.json()["involvedObject"]["kind"], "Node");
    drop(stop);
    h.join().expect("join");
}

#[test]
fn http_expired_event_is_created_again() {
    let server = fake_apiserver(true);
    let (r, stop, h) = http_recorder(&server.url);
    r.pod_event(&pod(), EventType::Normal, "Pulling", "Pulling image");
    r.pod_event(&pod(), EventType::Normal, "Pulling", "Pulling image");
    wait_until("three requests", || server.requests().len() == 3);
    thread::sleep(Duration::from_millis(50));
    let reqs = server.requests();
    let methods: Vec<_> = reqs.iter().map(|r| r.method.as_str()).collect();
    // The re-POST reuses the name, which the fake still holds: 409, given up.
    assert_eq!(methods, ["POST", "PATCH", "POST"]);
    assert_eq!(reqs[2].json()["count"], 2);
    assert!(reqs[2].json()["metadata"].get("resourceVersion").is_none());
    drop(stop);
    h.join().expect("join");
}
