use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::{client, pod_json};
use crate::testing::{Recorded, Reply, TestServer};
use crate::{start_reflector, ReflectorEvent};

const LIST_PATH: &str = "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode1";

fn is_watch(r: &Recorded) -> bool {
    r.query("watch") == Some("1")
}

fn pod_list(rv: &str, names: &[&str]) -> Reply {
    let items: Vec<Value> = names.iter().map(|n| pod_json(n, "1")).collect();
    Reply::json(
        200,
        &json!({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": rv}, "items": items}),
    )
}

fn event(kind: &str, object: Value) -> Value {
    json!({"type": kind, "object": object})
}

/// A watch that stays open (until the server is dropped).
fn hold_open() -> Reply {
    Reply::Chunks {
        chunks: vec![],
        hold: Duration::from_secs(60),
        truncate: false,
    }
}

type Events = Receiver<ReflectorEvent<Pod>>;

fn start(srv: &TestServer) -> (Events, Sender<()>, std::thread::JoinHandle<()>) {
    let (tx, rx) = unbounded();
    let (stop_tx, stop_rx) = crossbeam_channel::bounded(1);
    let handle = start_reflector(
        "test-pods",
        client(&srv.url),
        LIST_PATH.to_string(),
        Box::new(move |ev| {
            let _ = tx.send(ev);
        }),
        stop_rx,
    )
    .expect("spawn");
    (rx, stop_tx, handle)
}

fn next(rx: &Events) -> ReflectorEvent<Pod> {
    rx.recv_timeout(Duration::from_secs(5))
        .expect("an event within 5 s")
}

fn name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or("")
}

fn names(ev: &ReflectorEvent<Pod>) -> (&'static str, Vec<String>) {
    match ev {
        ReflectorEvent::Replace(v) => ("replace", v.iter().map(|p| name(p).to_string()).collect()),
        ReflectorEvent::Added(p) => ("added", vec![name(p).to_string()]),
        ReflectorEvent::Modified(p) => ("modified", vec![name(p).to_string()]),
        ReflectorEvent::Deleted(p) => ("deleted", vec![name(p).to_string()]),
    }
}

fn stop_within(stop: Sender<()>, handle: std::thread::JoinHandle<()>, limit: Duration) {
    let start = Instant::now();
    stop.send(()).expect("send stop");
    while !handle.is_finished() {
        assert!(
            start.elapsed() < limit,
            "reflector did not stop within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    handle.join().expect("reflector thread");
}

#[test]
fn list_then_watch_events_bookmarks_and_rewatch() {
    let watches = Arc::new(AtomicUsize::new(0));
    let w = watches.clone();
    let srv = TestServer::start(move |r| {
        if !is_watch(r) {
            return pod_list("10", &["a", "b"]);
        }
        if w.fetch_add(1, Ordering::SeqCst) > 0 {
            return hold_open();
        }
        Reply::events(&[
            event("ADDED", pod_json("c", "11")),
            event("MODIFIED", pod_json("a", "12")),
            // Does not decode as a Pod: skipped, the stream goes on.
            event(
                "ADDED",
                json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": 5, "resourceVersion": "13"}}),
            ),
            event("DELETED", pod_json("b", "14")),
            event(
                "BOOKMARK",
                json!({"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "20"}}),
            ),
        ])
    });
    let (rx, stop, handle) = start(&srv);
    assert_eq!(names(&next(&rx)), ("replace", vec!["a".into(), "b".into()]));
    assert_eq!(names(&next(&rx)), ("added", vec!["c".into()]));
    assert_eq!(names(&next(&rx)), ("modified", vec!["a".into()]));
    assert_eq!(names(&next(&rx)), ("deleted", vec!["b".into()]));

    // The first watch ended: the second resumes from the bookmark's RV, no relist.
    let deadline = Instant::now() + Duration::from_secs(5);
    while watches.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "no re-watch");
        std::thread::sleep(Duration::from_millis(20));
    }
    let reqs = srv.requests();
    let lists: Vec<_> = reqs.iter().filter(|r| !is_watch(r)).collect();
    let watch_reqs: Vec<_> = reqs.iter().filter(|r| is_watch(r)).collect();
    assert_eq!(lists.len(), 1);
    assert_eq!(lists[0].path, format!("{LIST_PATH}&resourceVersion=0"));
    assert_eq!(watch_reqs[0].query("resourceVersion"), Some("10"));
    assert_eq!(watch_reqs[0].query("allowWatchBookmarks"), Some("true"));
    assert_eq!(
        watch_reqs[0].query("fieldSelector"),
        Some("spec.nodeName%3Dnode1")
    );
    let timeout: u64 = watch_reqs[0]
        .query("timeoutSeconds")
        .expect("timeout")
        .parse()
        .expect("int");
    assert!((300..600).contains(&timeout), "{timeout}");
    assert_eq!(watch_reqs[1].query("resourceVersion"), Some("20"));

    stop_within(stop, handle, Duration::from_secs(3));
    assert!(rx.try_recv().is_err(), "no further events");
}

#[test]
fn gone_relists_with_a_consistent_read() {
    let srv = TestServer::start(move |r| {
        if !is_watch(r) {
            return if r.query("resourceVersion").is_some() {
                pod_list("100", &["a"])
            } else {
                pod_list("300", &["a", "b"])
            };
        }
        if r.query("resourceVersion") == Some("100") {
            return Reply::events(&[event(
                "ERROR",
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "reason": "Expired", "code": 410, "message": "too old resource version: 100 (250)"}),
            )]);
        }
        hold_open()
    });
    let (rx, stop, handle) = start(&srv);
    assert_eq!(names(&next(&rx)), ("replace", vec!["a".into()]));
    assert_eq!(names(&next(&rx)), ("replace", vec!["a".into(), "b".into()]));
    let deadline = Instant::now() + Duration::from_secs(5);
    while srv.count(|r| is_watch(r) && r.query("resourceVersion") == Some("300")) == 0 {
        assert!(Instant::now() < deadline, "no watch from the relisted RV");
        std::thread::sleep(Duration::from_millis(20));
    }
    let lists: Vec<_> = srv
        .requests()
        .into_iter()
        .filter(|r| !is_watch(r))
        .collect();
    assert_eq!(lists.len(), 2);
    assert_eq!(
        lists[1].path, LIST_PATH,
        "relist after 410 is a consistent read"
    );
    stop_within(stop, handle, Duration::from_secs(3));
}

#[test]
fn broken_stream_rewatches_from_last_rv() {
    let watches = Arc::new(AtomicUsize::new(0));
    let w = watches.clone();
    let srv = TestServer::start(move |r| {
        if !is_watch(r) {
            return pod_list("10", &[]);
        }
        if w.fetch_add(1, Ordering::SeqCst) > 0 {
            return hold_open();
        }
        let added = format!("{}\n", event("ADDED", pod_json("c", "11")));
        Reply::Chunks {
            chunks: vec![
                (Duration::ZERO, added.into_bytes()),
                (Duration::ZERO, b"{\"type\":\"MODI".to_vec()),
            ],
            hold: Duration::ZERO,
            truncate: true,
        }
    });
    let (rx, stop, handle) = start(&srv);
    assert_eq!(names(&next(&rx)), ("replace", vec![]));
    assert_eq!(names(&next(&rx)), ("added", vec!["c".into()]));
    let deadline = Instant::now() + Duration::from_secs(6);
    while watches.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < deadline, "no re-watch");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second = srv
        .requests()
        .into_iter()
        .filter(is_watch)
        .nth(1)
        .expect("second watch");
    assert_eq!(second.query("resourceVersion"), Some("11"));
    stop_within(stop, handle, Duration::from_secs(3));
}

#[test]
fn shutdown_while_backing_off_and_when_sender_dropped() {
    let srv = TestServer::start(|_| Reply::status(403, "Forbidden", "node not authorized"));
    let (rx, stop, handle) = start(&srv);
    let deadline = Instant::now() + Duration::from_secs(3);
    while srv.requests().is_empty() {
        assert!(Instant::now() < deadline, "no list");
        std::thread::sleep(Duration::from_millis(20));
    }
    let start = Instant::now();
    drop(stop);
    handle.join().expect("join");
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(rx.try_recv().is_err());
}
