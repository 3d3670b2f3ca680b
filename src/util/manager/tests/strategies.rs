//! The Cache and Get strategies, and the public constructors.

use crate::pod::PodRegistrar;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::{client, eventually, pod, serial, threads_named};
use crate::client::multiwatch::{MultiWatch, THREAD_NAME};
use crate::client::testing::FakeApi;
use crate::util::manager::{ManagerError, ObjectRef, Strategy};
use crate::{configmap, secret};

fn gets(api: &FakeApi, name: &str) -> usize {
    api.count(&[&format!("/secrets/{name}")])
}

#[test]
fn cache_strategy_fetches_when_stale_or_newly_referenced() {
    let api = FakeApi::start();
    api.put(
        "secrets",
        "ns",
        "s1",
        json!({"stringData": {}, "data": {"k": "djE="}}),
    );
    let c = client(&api.url);
    let mux = MultiWatch::new(&c).expect("mux");
    let ttl = Duration::from_millis(300);
    let m = secret::new_manager(Strategy::Cache, &c, &mux, ttl, None);
    let k = |m: &Arc<secret::SecretManager>| {
        m.get("ns", "s1").map(|s| {
            s.data
                .as_ref()
                .and_then(|d| d.get("k"))
                .map(|b| b.0.clone())
        })
    };
    assert!(matches!(k(&m), Err(ManagerError::NotRegistered { .. })));
    m.register_pod(&pod("ns", "a", "ua", &["s1", "missing"]));
    assert_eq!(k(&m), Ok(Some(b"v1".to_vec())));
    assert_eq!(k(&m), Ok(Some(b"v1".to_vec())));
    assert_eq!(gets(&api, "s1"), 1, "served from the cache within the TTL");

    api.put("secrets", "ns", "s1", json!({"data": {"k": "djI="}}));
    assert_eq!(k(&m), Ok(Some(b"v1".to_vec())));
    m.register_pod(&pod("ns", "b", "ub", &["s1"]));
    assert_eq!(
        k(&m),
        Ok(Some(b"v2".to_vec())),
        "a new reference invalidates"
    );
    assert_eq!(gets(&api, "s1"), 2);

    api.put(
        "secrets",
        "ns",
        "s1",
        json!({"immutable": true, "data": {"k": "djM="}}),
    );
    std::thread::sleep(ttl);
    assert_eq!(k(&m), Ok(Some(b"v3".to_vec())), "refetched after the TTL");
    std::thread::sleep(ttl);
    assert_eq!(k(&m), Ok(Some(b"v3".to_vec())));
    assert_eq!(gets(&api, "s1"), 3, "an immutable object is not refetched");

    let err = m.get("ns", "missing").expect_err("missing");
    assert!(err.is_not_found(), "{err}");
    m.unregister_pod(&pod("ns", "a", "ua", &["s1", "missing"]));
    assert!(matches!(
        m.get("ns", "missing"),
        Err(ManagerError::NotRegistered { .. })
    ));
    assert!(k(&m).is_ok(), "still referenced by b");
}

#[test]
fn get_strategy_gets_every_time() {
    let api = FakeApi::start();
    api.put("configmaps", "ns", "cm", json!({"data": {"a": "1"}}));
    let c = client(&api.url);
    let mux = MultiWatch::new(&c).expect("mux");
    let m = configmap::new_manager(Strategy::Get, &c, &mux, Duration::ZERO, None);
    for _ in 0..2 {
        let cm = m.get("ns", "cm").expect("get");
        assert_eq!(
            cm.data
                .as_ref()
                .and_then(|d| d.get("a"))
                .map(String::as_str),
            Some("1")
        );
    }
    assert_eq!(api.count(&["/configmaps/cm"]), 2);
    let err = m.get("ns", "gone").expect_err("missing");
    assert!(err.is_not_found(), "{err}");
    assert_eq!(err.to_string(), "configmaps \"gone\" not found");
}

#[test]
fn secret_and_config_map_watches_share_one_thread() {
    let _g = serial();
    eventually("earlier watch threads to end", || {
        threads_named(THREAD_NAME) == 0
    });
    let api = FakeApi::start();
    api.put("secrets", "ns", "s", json!({"data": {"k": "djE="}}));
    api.put("configmaps", "ns", "cm", json!({"data": {"a": "1"}}));
    let c = client(&api.url);
    let mux = MultiWatch::new(&c).expect("mux");
    let seen: Arc<Mutex<Vec<ObjectRef>>> = Arc::default();
    let cb = {
        let seen = seen.clone();
        Arc::new(move |r| seen.lock().expect("lock").push(r))
    };
    let secrets = secret::new_manager(Strategy::Watch, &c, &mux, Duration::ZERO, Some(cb.clone()));
    let cms = configmap::new_manager(Strategy::Watch, &c, &mux, Duration::ZERO, Some(cb));
    drop(mux);
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [{"name": "c", "image": "i",
            "envFrom": [{"configMapRef": {"name": "cm"}}, {"secretRef": {"name": "s"}}]}]},
    }))
    .expect("pod");
    secrets.register_pod(&p);
    cms.register_pod(&p);
    assert!(secrets.get("ns", "s").is_ok());
    assert!(cms.get("ns", "cm").is_ok());
    api.wait("both watches", |a| a.open_watches(None) == 2);
    assert_eq!(threads_named(THREAD_NAME), 1);
    api.put("configmaps", "ns", "cm", json!({"data": {"a": "2"}}));
    eventually("the change", || {
        seen.lock()
            .expect("lock")
            .iter()
            .filter(|r| r.kind == "ConfigMap")
            .count()
            == 2
    });
    drop((secrets, cms));
    eventually("the thread to end", || threads_named(THREAD_NAME) == 0);
}
