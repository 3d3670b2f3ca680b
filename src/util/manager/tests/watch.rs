//! The Watch strategy: shared, refcounted watches on one thread.

use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use serde_json::{json, Value};

use super::{client, eventually, pod, serial, threads_named, Shared};
use crate::client::multiwatch::{MultiWatch, THREAD_NAME};
use crate::client::testing::{tls_server_config, FakeApi, CA_CRT, CLIENT_CRT, CLIENT_KEY};
use crate::client::tls::{self, ClientIdentity, ServerTrust};
use crate::client::{Auth, Client, RestConfig};
use crate::secret::{referenced_secret_names, KIND};
use crate::util::manager::watch_based::WatchBasedStore;
use crate::util::manager::{CacheBasedManager, Manager, ManagerError, ObjectRef, OnChange};

type Changes = Shared<Vec<(ObjectRef, ThreadId, Option<String>)>>;

struct Setup {
    store: Arc<WatchBasedStore<Secret>>,
    mgr: CacheBasedManager<Secret>,
    changes: Changes,
}

fn setup(client: &Client) -> Setup {
    let mux = MultiWatch::new(client).expect("mux");
    let changes: Changes = Arc::new(Mutex::new(Vec::new()));
    let sink = changes.clone();
    let on_change: OnChange = Arc::new(move |r| {
        let t = std::thread::current();
        let name = t.name().map(str::to_string);
        sink.lock().expect("lock").push((r, t.id(), name));
    });
    let store = WatchBasedStore::<Secret>::new(KIND, mux, Some(on_change));
    let mgr = CacheBasedManager::new(store.clone(), referenced_secret_names);
    Setup {
        store,
        mgr,
        changes,
    }
}

fn data(v: &str) -> Value {
    use base64::Engine;
    json!({"data": {"k": base64::engine::general_purpose::STANDARD.encode(v)}})
}

/// The `k` value of a secret, or the error text.
fn value(mgr: &CacheBasedManager<Secret>, name: &str) -> Result<String, ManagerError> {
    let s = mgr.get_object("ns", name)?;
    let bytes = s
        .data
        .as_ref()
        .and_then(|d| d.get("k"))
        .map(|b| b.0.clone());
    Ok(String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned())
}

fn watches(api: &FakeApi, name: &str) -> usize {
    api.count(&[&format!("metadata.name%3D{name}&"), "watch=1"])
}

fn lists(api: &FakeApi, name: &str) -> usize {
    api.requests()
        .iter()
        .filter(|r| r.path.ends_with(&format!("metadata.name%3D{name}")))
        .count()
}

#[test]
fn one_watch_shared_and_refcounted_by_pods() {
    let _g = serial();
    let api = FakeApi::start();
    api.put("secrets", "ns", "s1", data("v1"));
    let s = setup(&client(&api.url));
    s.mgr.register_pod(&pod("ns", "a", "ua", &["s1"]));
    s.mgr.register_pod(&pod("ns", "b", "ub", &["s1"]));
    api.wait("the watch", |a| a.open_watches(Some("s1")) == 1);
    assert_eq!(value(&s.mgr, "s1"), Ok("v1".into()));
    assert_eq!(
        (
            s.store.watch_count(),
            watches(&api, "s1"),
            lists(&api, "s1")
        ),
        (1, 1, 1)
    );

    s.mgr.unregister_pod(&pod("ns", "a", "ua", &["s1"]));
    assert_eq!(value(&s.mgr, "s1"), Ok("v1".into()));
    s.mgr.unregister_pod(&pod("ns", "b", "ub", &["s1"]));
    assert!(matches!(
        value(&s.mgr, "s1"),
        Err(ManagerError::NotRegistered { .. })
    ));
    api.wait("the watch to close", |a| a.open_watches(Some("s1")) == 0);
    assert_eq!(s.store.watch_count(), 0);

    // Re-registering the same pod counts once; an update swaps references.
    let a = pod("ns", "a", "ua", &["s1"]);
    s.mgr.register_pod(&a);
    s.mgr.register_pod(&a);
    s.mgr.register_pod(&pod("ns", "a", "ua", &["s2"]));
    assert!(matches!(
        value(&s.mgr, "s1"),
        Err(ManagerError::NotRegistered { .. })
    ));
    assert!(value(&s.mgr, "s2").is_err_and(|e| e.is_not_found()));
    s.mgr.unregister_pod(&a);
    assert!(matches!(
        value(&s.mgr, "s2"),
        Err(ManagerError::NotRegistered { .. })
    ));
    assert_eq!(s.store.watch_count(), 0);
}

#[test]
fn updates_and_deletes_reach_the_callback() {
    let _g = serial();
    let api = FakeApi::start();
    api.put("secrets", "ns", "s1", data("v1"));
    let s = setup(&client(&api.url));
    s.mgr.register_pod(&pod("ns", "a", "ua", &["s1"]));
    api.wait("the watch", |a| a.open_watches(Some("s1")) == 1);
    assert_eq!(value(&s.mgr, "s1"), Ok("v1".into()));
    let n = s.changes.lock().expect("lock").len();
    assert_eq!(n, 1, "the initial list is a change");

    api.put("secrets", "ns", "s1", data("v2"));
    eventually("the update", || s.changes.lock().expect("lock").len() == 2);
    assert_eq!(value(&s.mgr, "s1"), Ok("v2".into()));
    api.delete("secrets", "ns", "s1");
    eventually("the delete", || s.changes.lock().expect("lock").len() == 3);
    assert!(value(&s.mgr, "s1").is_err_and(|e| e.is_not_found()));

    let changes = s.changes.lock().expect("lock").clone();
    for (r, _, name) in &changes {
        assert_eq!(
            (r.kind, r.namespace.as_str(), r.name.as_str()),
            ("Secret", "ns", "s1")
        );
        assert_eq!(name.as_deref(), Some(THREAD_NAME));
    }
}

#[test]
fn immutable_objects_stop_being_watched() {
    let _g = serial();
    let api = FakeApi::start();
    api.put(
        "secrets",
        "ns",
        "frozen",
        json!({"immutable": true, "data": {"k": "djE="}}),
    );
    api.put("secrets", "ns", "later", data("v1"));
    let s = setup(&client(&api.url));
    s.mgr
        .register_pod(&pod("ns", "a", "ua", &["frozen", "later"]));
    assert_eq!(value(&s.mgr, "frozen"), Ok("v1".into()));
    // Seen immutable in the list: no watch is ever started.
    api.wait("the other watch", |a| a.open_watches(Some("later")) == 1);
    assert_eq!(watches(&api, "frozen"), 0);
    assert_eq!(s.store.watch_count(), 1);

    // Made immutable by an update: its watch is closed, the copy kept.
    api.put(
        "secrets",
        "ns",
        "later",
        json!({"immutable": true, "data": {"k": "djI="}}),
    );
    api.wait("the watch to close", |a| a.open_watches(Some("later")) == 0);
    assert_eq!(s.store.watch_count(), 0);
    assert_eq!(value(&s.mgr, "later"), Ok("v2".into()));
    api.put("secrets", "ns", "later", data("v3"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(value(&s.mgr, "later"), Ok("v2".into()));
    assert_eq!(watches(&api, "later"), 1);
}

#[test]
fn gone_relists_and_closed_streams_resume() {
    let _g = serial();
    let api = FakeApi::start();
    api.put("secrets", "ns", "s1", data("v1"));
    api.fail_next_watches_gone(1);
    let s = setup(&client(&api.url));
    s.mgr.register_pod(&pod("ns", "a", "ua", &["s1"]));
    api.wait("the second watch", |a| a.open_watches(Some("s1")) == 1);
    assert_eq!(
        (lists(&api, "s1"), watches(&api, "s1")),
        (2, 2),
        "410 relists"
    );

    // A clean end of the stream resumes from the last resourceVersion.
    api.put("secrets", "ns", "s1", data("v2"));
    eventually("v2", || value(&s.mgr, "s1") == Ok("v2".into()));
    api.close_watches(false);
    api.wait("a new watch", |a| {
        watches(a, "s1") == 3 && a.open_watches(Some("s1")) == 1
    });
    assert_eq!(
        api.count(&["watch=1", "resourceVersion=2&"]),
        1,
        "{:?}",
        api.requests()
    );
    api.put("secrets", "ns", "s1", data("v3"));
    eventually("v3", || value(&s.mgr, "s1") == Ok("v3".into()));

    // A dropped connection (no last chunk) reconnects after a backoff.
    api.close_watches(true);
    api.wait("a new watch", |a| {
        watches(a, "s1") == 4 && a.open_watches(Some("s1")) == 1
    });
    api.put("secrets", "ns", "s1", data("v4"));
    eventually("v4", || value(&s.mgr, "s1") == Ok("v4".into()));
    assert_eq!(lists(&api, "s1"), 2, "resumed without relisting");
}

#[test]
fn get_before_sync_waits_bounded_then_errors() {
    let _g = serial();
    let api = FakeApi::start();
    api.put("secrets", "ns", "slow", data("v1"));
    api.set_list_delay(Duration::from_secs(3));
    let s = setup(&client(&api.url));
    s.mgr.register_pod(&pod("ns", "a", "ua", &["slow"]));
    let start = Instant::now();
    let err = value(&s.mgr, "slow").expect_err("not synced");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert_eq!(
        err.to_string(),
        "failed to sync secret cache: timed out waiting for the condition"
    );
    assert!(!err.is_not_found());
}

#[test]
fn missing_object_is_not_found_until_created() {
    let _g = serial();
    let api = FakeApi::start();
    let s = setup(&client(&api.url));
    assert_eq!(
        value(&s.mgr, "nope").map_err(|e| e.to_string()),
        Err("object \"ns\"/\"nope\" not registered".to_string())
    );
    s.mgr.register_pod(&pod("ns", "a", "ua", &["later"]));
    let err = value(&s.mgr, "later").expect_err("missing");
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.to_string(), "secrets \"later\" not found");
    api.wait("the watch", |a| a.open_watches(Some("later")) == 1);
    api.put("secrets", "ns", "later", data("here"));
    eventually("the object", || value(&s.mgr, "later") == Ok("here".into()));
}

#[test]
fn fifty_watched_objects_use_one_thread() {
    let _g = serial();
    // Threads of earlier tests' multiplexers end once their handles drop.
    eventually("earlier watch threads to end", || {
        threads_named(THREAD_NAME) == 0
    });
    let api = FakeApi::start();
    let s = setup(&client(&api.url));
    for i in 0..50 {
        api.put("secrets", "ns", &format!("s{i}"), data(&format!("v{i}")));
    }
    for i in 0..50 {
        let name = format!("s{i}");
        s.mgr
            .register_pod(&pod("ns", &format!("p{i}"), &format!("u{i}"), &[&name]));
    }
    api.wait("50 watches", |a| a.open_watches(None) == 50);
    for i in 0..50 {
        assert_eq!(value(&s.mgr, &format!("s{i}")), Ok(format!("v{i}")));
    }
    assert_eq!(threads_named(THREAD_NAME), 1);
    assert_eq!(s.store.watch_count(), 50);
    let changes = s.changes.lock().expect("lock").clone();
    assert_eq!(changes.len(), 50);
    let first = changes[0].1;
    assert!(
        changes.iter().all(|(_, t, _)| *t == first),
        "one thread delivers all"
    );
    drop(s);
    eventually("the thread to end", || threads_named(THREAD_NAME) == 0);
    api.wait("the watches to close", |a| a.open_watches(None) == 0);
}

#[test]
fn watches_over_tls_with_client_certificate_and_token() {
    let _g = serial();
    let api = FakeApi::start_tls(tls_server_config());
    api.put("secrets", "ns", "s1", data("v1"));
    let identity = ClientIdentity {
        certs: tls::parse_certs(CLIENT_CRT.as_bytes()).expect("cert"),
        key: tls::parse_key(CLIENT_KEY.as_bytes()).expect("key"),
    };
    let roots = tls::parse_roots(CA_CRT.as_bytes()).expect("ca");
    let mut cfg = RestConfig::new(api.url.clone());
    cfg.tls = tls::client_config(ServerTrust::Roots(roots), Some(identity))
        .expect("tls")
        .0;
    cfg.auth = Auth::Bearer("tok".into());
    cfg.qps = -1.0;
    cfg.timeout = Duration::from_secs(5);
    let s = setup(&Client::new(cfg, std::sync::Arc::new(())).expect("client"));
    s.mgr.register_pod(&pod("ns", "a", "ua", &["s1"]));
    assert_eq!(value(&s.mgr, "s1"), Ok("v1".into()));
    api.wait("the watch", |a| a.open_watches(Some("s1")) == 1);
    api.put("secrets", "ns", "s1", data("v2"));
    eventually("v2", || value(&s.mgr, "s1") == Ok("v2".into()));
    let reqs = api.requests();
    assert!(
        reqs.iter()
            .all(|r| r.header("authorization") == Some("Bearer tok")),
        "{reqs:?}"
    );
}
