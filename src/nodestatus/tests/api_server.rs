//! Registration and the status loop against a scripted API server.

use super::*;

fn test_config(name: &str) -> NodeStatusConfig {
    let mut cfg = NodeStatusConfig::new(name);
    cfg.node_ip = Some("10.0.0.9".parse().unwrap());
    cfg.root_dir = std::env::temp_dir();
    cfg.node_status_update_frequency = Duration::from_millis(300);
    cfg
}

fn healthy() -> HealthFn {
    Box::new(|| KubeletHealth {
        runtime_version: Some(("containerd".into(), "1.7.24".into())),
        images: vec![ImageInfo {
            names: vec!["busybox:latest".into()],
            size_bytes: 1000,
        }],
        ..Default::default()
    })
}

/// A node as the API server would hold it, for the handler's answers.
fn stored_node(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "uid": "uid-1", "resourceVersion": "5", "labels": labels},
           "spec": {}, "status": {}})
}

#[test]
fn registration_reconciles_an_existing_node() {
    let node = Arc::new(Mutex::new(stored_node("node-a", json!({"custom": "x"}))));
    let n = node.clone();
    let server = TestServer::start(move |r| {
        match (r.method.as_str(), r.path_only()) {
            ("POST", "/api/v1/nodes") => {
                Reply::status(409, "AlreadyExists", "nodes \"node-a\" already exists")
            }
            ("GET", "/api/v1/nodes/node-a") => Reply::json(200, &n.lock().unwrap()),
            ("PATCH", "/api/v1/nodes/node-a/status") => {
                let mut cur = n.lock().unwrap();
                // Enough of a merge for the test: labels, annotations, status.
                let patch = r.json();
                if let Some(l) = patch["metadata"]["labels"].as_object() {
                    for (k, v) in l {
                        cur["metadata"]["labels"][k] = v.clone();
                    }
                }
                if let Some(a) = patch["metadata"]["annotations"].as_object() {
                    cur["metadata"]["annotations"] = Value::Object(a.clone());
                }
                Reply::json(200, &cur)
            }
            _ => Reply::status(404, "NotFound", "no"),
        }
    });
    let mgr = NodeStatusManager::new(
        test_config("node-a"),
        client(&server.url),
        healthy(),
        NodeStatusLinks::default(),
    );
    let mut events = Vec::new();
    let initial = {
        let mut st = mgr.state.lock().unwrap();
        mgr.initial_node(&mut st, &mut events)
    };
    // Upstream records the pressure conditions' first status on the initial node.
    let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(
        reasons,
        vec![
            "NodeHasSufficientMemory",
            "NodeHasNoDiskPressure",
            "NodeHasSufficientPID"
        ]
    );
    assert!(mgr.try_register_with_api_server(&initial));
    assert_eq!(
        server.calls(),
        vec![
            "POST /api/v1/nodes",
            "GET /api/v1/nodes/node-a",
            "PATCH /api/v1/nodes/node-a/status"
        ]
    );
    let reqs = server.requests();
    let created = reqs[0].json();
    assert_eq!(
        created["metadata"]["labels"]["kubernetes.io/hostname"],
        "node-a"
    );
    assert_eq!(created["status"]["conditions"][3]["type"], "Ready");
    assert_eq!(created["status"]["addresses"][0]["address"], "10.0.0.9");
    assert_eq!(
        reqs[2].header("Content-Type"),
        Some("application/strategic-merge-patch+json")
    );
    let patch = reqs[2].json();
    assert_eq!(
        patch["metadata"]["labels"]["kubernetes.io/hostname"],
        "node-a"
    );
    assert_eq!(patch["metadata"]["labels"]["kubernetes.io/os"], "linux");
    assert!(patch["metadata"]["labels"].get("custom").is_none());
    assert_eq!(
        patch["metadata"]["annotations"][CONTROLLER_MANAGED_ATTACH_ANNOTATION],
        "true"
    );
    // The cached node is the patched one.
    let cached = mgr.node().unwrap();
    assert_eq!(cached.metadata.labels.unwrap()["custom"], "x");
    assert_eq!(cached.metadata.uid.as_deref(), Some("uid-1"));
}

#[test]
fn registration_fails_on_other_errors() {
    let server = TestServer::start(|_| Reply::status(403, "Forbidden", "nope"));
    let mgr = NodeStatusManager::new(
        test_config("node-a"),
        client(&server.url),
        healthy(),
        NodeStatusLinks::default(),
    );
    let node = initial_node_object(&mgr.cfg);
    assert!(!mgr.try_register_with_api_server(&node));
    assert_eq!(server.calls(), vec!["POST /api/v1/nodes"]);
}

/// A server that stores the node on create and merges status patches.
fn node_server(name: &'static str) -> (TestServer, Arc<Mutex<Option<Value>>>) {
    let store: Arc<Mutex<Option<Value>>> = Arc::new(Mutex::new(None));
    let s = store.clone();
    let server = TestServer::start(move |r| {
        let path = r.path_only();
        let mut cur = s.lock().unwrap();
        match r.method.as_str() {
            "POST" if path == "/api/v1/nodes" => {
                let mut n = r.json();
                n["metadata"]["uid"] = json!("uid-9");
                n["metadata"]["resourceVersion"] = json!("1");
                *cur = Some(n.clone());
                Reply::json(201, &n)
            }
            "GET" if path == format!("/api/v1/nodes/{name}") => match cur.as_ref() {
                Some(n) => Reply::json(200, n),
                None => Reply::status(404, "NotFound", "not found"),
            },
            "PATCH" if path == format!("/api/v1/nodes/{name}/status") => {
                let Some(n) = cur.as_mut() else {
                    return Reply::status(404, "NotFound", "not found");
                };
                // Conditions merge by type (enough for the loop's patches).
                let patch = r.json();
                if let Some(conds) = patch["status"]["conditions"].as_array() {
                    for pc in conds {
                        let list = n["status"]["conditions"].as_array_mut().unwrap();
                        if let Some(c) = list.iter_mut().find(|c| c["type"] == pc["type"]) {
                            for (k, v) in pc.as_object().unwrap() {
                                c[k] = v.clone();
                            }
                        }
                    }
                }
                Reply::json(200, n)
            }
            _ => Reply::status(404, "NotFound", "no"),
        }
    });
    (server, store)
}

#[test]
fn status_loop_registers_then_patches_and_stops() {
    let (server, store) = node_server("node-b");
    // The runtime is down at first; then it comes up.
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let u = up.clone();
    let health: HealthFn = Box::new(move || KubeletHealth {
        runtime_errors: if u.load(std::sync::atomic::Ordering::SeqCst) {
            vec![]
        } else {
            vec!["container runtime is down".into()]
        },
        runtime_version: Some(("containerd".into(), "1.7.24".into())),
        ..Default::default()
    });
    let seen = Arc::new(Mutex::new(Vec::<(String, String, String)>::new()));
    let s = seen.clone();
    let links = NodeStatusLinks {
        recorder: Some(Arc::new(SeenEvents(s))),
        ..Default::default()
    };
    let mgr = NodeStatusManager::new(test_config("node-b"), client(&server.url), health, links);
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    let handle = mgr.start(rx).unwrap();
    assert_eq!(handle.thread().name(), Some("node-status"));
    assert!(server.wait_for(Duration::from_secs(5), |r| r
        .iter()
        .any(|r| r.method == "PATCH")));
    assert!(mgr.registered());
    let created = &server.requests()[0];
    assert_eq!(
        created.json()["status"]["conditions"][3]["message"],
        "container runtime is down"
    );

    // Runtime up: the fast update patches Ready at once.
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        server.wait_for(Duration::from_secs(5), |reqs| reqs.iter().any(|r| {
            r.method == "PATCH" && String::from_utf8_lossy(&r.body).contains("\"KubeletReady\"")
        }))
    );
    let stored = store.lock().unwrap().clone().unwrap();
    let ready = stored["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "KubeletReady");
    assert!(server.wait_for(Duration::from_secs(2), |_| seen
        .lock()
        .unwrap()
        .iter()
        .any(|e| e.1 == "NodeReady")));
    let events = seen.lock().unwrap().clone();
    assert!(events.contains(&(
        "Normal".into(),
        "NodeReady".into(),
        "Node node-b status is now: NodeReady".into()
    )));
    assert!(events.iter().any(|e| e.1 == "NodeHasSufficientMemory"));

    drop(tx);
    handle.join().unwrap();
    // Nothing after shutdown.
    let n = server.requests().len();
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(server.requests().len(), n);
}

#[test]
fn unchanged_status_is_not_patched_until_report_is_due() {
    let (server, _store) = node_server("node-c");
    let mut cfg = test_config("node-c");
    cfg.node_status_report_frequency = Duration::from_secs(3600);
    let mgr = NodeStatusManager::new(
        cfg,
        client(&server.url),
        healthy(),
        NodeStatusLinks::default(),
    );
    let initial = {
        let mut st = mgr.state.lock().unwrap();
        mgr.initial_node(&mut st, &mut Vec::new())
    };
    assert!(mgr.try_register_with_api_server(&initial));
    // First update: report due (never reported).
    mgr.update_node_status().unwrap();
    assert_eq!(
        server
            .calls()
            .iter()
            .filter(|c| c.starts_with("PATCH"))
            .count(),
        1
    );
    // Second: nothing changed, report not due: GET only.
    mgr.update_node_status().unwrap();
    let calls = server.calls();
    assert_eq!(
        calls.iter().filter(|c| c.starts_with("PATCH")).count(),
        1,
        "{calls:?}"
    );
    assert_eq!(calls.last().unwrap(), "GET /api/v1/nodes/node-c");
    // From the server's cache, as upstream's first try reads it.
    let get = server.requests().pop().unwrap();
    assert_eq!(get.path, "/api/v1/nodes/node-c?resourceVersion=0");
    // Report due: patched even though unchanged, with fresh heartbeats.
    mgr.state.lock().unwrap().last_status_report =
        Some(std::time::Instant::now() - Duration::from_secs(7200));
    // Heartbeats have second precision: let one pass.
    std::thread::sleep(Duration::from_millis(1100));
    mgr.update_node_status().unwrap();
    let reqs = server.requests();
    let last = reqs.last().unwrap();
    assert_eq!(last.method, "PATCH");
    let patch = last.json();
    assert!(patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c.get("lastHeartbeatTime").is_some()));
    assert!(patch.get("spec").is_none());
}

#[test]
fn shutdown_interrupts_registration() {
    let server = TestServer::start(|_| Reply::status(500, "InternalError", "down"));
    let mgr = NodeStatusManager::new(
        test_config("node-d"),
        client(&server.url),
        healthy(),
        NodeStatusLinks::default(),
    );
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    let handle = mgr.start(rx).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    tx.send(()).unwrap();
    let start = std::time::Instant::now();
    handle.join().unwrap();
    assert!(start.elapsed() < Duration::from_secs(8));
    assert!(!mgr.registered());
}

/// Records node events as (type, reason, message).
struct SeenEvents(Arc<Mutex<Vec<(String, String, String)>>>);

impl crate::events::EventRecorder for SeenEvents {
    fn pod_event(
        &self,
        _: &k8s_openapi::api::core::v1::Pod,
        _: crate::events::EventType,
        _: &str,
        _: &str,
    ) {
    }

    fn node_event(&self, kind: crate::events::EventType, reason: &str, message: &str) {
        self.0
            .lock()
            .unwrap()
            .push((kind.as_str().into(), reason.into(), message.into()));
    }
}

/// The pressure conditions are the eviction manager's, passed in the
/// kubelet's health; node status no longer computes them itself.
#[test]
fn pressure_conditions_come_from_the_eviction_manager() {
    let server = TestServer::start(|_| Reply::status(404, "NotFound", "no"));
    let health: HealthFn = Box::new(|| KubeletHealth {
        runtime_version: Some(("containerd".into(), "1.7.24".into())),
        memory_pressure: true,
        pid_pressure: true,
        ..Default::default()
    });
    let mut cfg = test_config("node-p");
    // A threshold the host could never meet: ignored by node status now.
    cfg.eviction_hard = BTreeMap::from([("nodefs.available".into(), "100%".into())]);
    let mgr = NodeStatusManager::new(cfg, client(&server.url), health, NodeStatusLinks::default());
    let mut events = Vec::new();
    let node = {
        let mut st = mgr.state.lock().unwrap();
        mgr.initial_node(&mut st, &mut events)
    };
    let reasons: Vec<&str> = events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(
        reasons,
        vec![
            "NodeHasInsufficientMemory",
            "NodeHasNoDiskPressure",
            "NodeHasInsufficientPID"
        ]
    );
    let conds = node.status.unwrap().conditions.unwrap();
    let of = |t: &str| {
        conds
            .iter()
            .find(|c| c.type_ == t)
            .map(|c| c.status.clone())
            .unwrap_or_default()
    };
    assert_eq!(
        (of("MemoryPressure"), of("DiskPressure"), of("PIDPressure")),
        ("True".into(), "False".into(), "True".into())
    );
}
