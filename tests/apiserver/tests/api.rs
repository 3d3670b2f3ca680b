//! End-to-end tests of the apiserver double, run as a process (as rkubelet's
//! tests use it) and driven by a minimal synchronous client (ureq + rustls).

mod support;

use serde_json::{json, Value};
use std::io::Read;
use std::time::{Duration, Instant};
use support::*;

#[test]
fn create_get_list_and_auth() {
    let d = spawn("crud", &[]);
    for f in [
        "ca.crt",
        "kubelet-node-a.kubeconfig",
        "kubelet-node-a-files.kubeconfig",
        "kubelet-node-a-token.kubeconfig",
        "admin.kubeconfig",
        "admin-token",
        "port",
    ] {
        assert!(d.dir.join(f).exists(), "{} missing", f);
    }
    let kc = std::fs::read_to_string(d.dir.join("kubelet-node-a.kubeconfig")).unwrap();
    assert!(
        kc.contains("client-certificate-data:")
            && kc.contains(&d.url)
            && kc.contains("current-context: system:node:node-a@kubernetes")
    );

    let c = Client::kubelet(&d);
    assert_eq!(c.get("/version").1["gitVersion"], "v1.34.0");
    assert_eq!(c.get("/healthz"), (200, json!("ok")));
    let (code, node) = c.post(
        "/api/v1/nodes",
        json!({"metadata": {"name": "node-a"}, "status": {"capacity": {"cpu": "2"}}}),
    );
    assert_eq!(code, 201);
    assert_eq!(node["kind"], "Node");
    assert_eq!(node["status"]["allocatable"]["cpu"], "2");
    assert!(node["metadata"]["uid"].as_str().unwrap().len() == 36);

    let (code, p1) = c.post("/api/v1/namespaces/default/pods", pod("p1", Some("node-a")));
    assert_eq!(code, 201, "{}", p1);
    assert_eq!(p1["metadata"]["namespace"], "default");
    assert_eq!(p1["metadata"]["generation"], 1);
    assert_eq!(p1["status"]["phase"], "Pending");
    assert_eq!(p1["status"]["qosClass"], "BestEffort");
    assert_eq!(
        p1["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(p1["spec"]["containers"][1]["imagePullPolicy"], "Always");
    assert_eq!(p1["spec"]["restartPolicy"], "Always");
    c.post("/api/v1/namespaces/default/pods", pod("p2", Some("node-b")));
    let (code, gen) = c.post("/api/v1/namespaces/kube-system/pods", json!({"metadata": {"generateName": "mirror-"}, "spec": {"containers": [{"name": "c", "image": "x"}], "nodeName": "node-a"}}));
    assert_eq!(code, 201);
    assert!(gen["metadata"]["name"]
        .as_str()
        .unwrap()
        .starts_with("mirror-"));

    let (code, dup) = c.post("/api/v1/namespaces/default/pods", pod("p1", None));
    assert_eq!((code, dup["reason"].as_str()), (409, Some("AlreadyExists")));
    assert_eq!(dup["message"], "pods \"p1\" already exists");
    let (code, nons) = c.post("/api/v1/namespaces/nope/pods", pod("p9", None));
    assert_eq!(
        (code, nons["message"].as_str()),
        (404, Some("namespaces \"nope\" not found"))
    );
    let (code, inv) = c.post(
        "/api/v1/namespaces/default/pods",
        json!({"metadata": {"name": "Bad"}, "spec": {}}),
    );
    assert_eq!((code, inv["reason"].as_str()), (422, Some("Invalid")));
    let (code, _, _) = c.req(
        "POST",
        "/api/v1/namespaces/default/pods",
        Some("application/json"),
        None,
    );
    assert_eq!(code, 400, "empty body is a bad request");
    let (code, bad, _) = c.req(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        Some(&json!("{")),
    );
    assert_eq!((code, bad["reason"].as_str()), (400, Some("BadRequest")));

    let (code, got) = c.get("/api/v1/namespaces/default/pods/p1");
    assert_eq!(
        (code, got["metadata"]["uid"].clone()),
        (200, p1["metadata"]["uid"].clone())
    );
    let (code, nf) = c.get("/api/v1/namespaces/default/pods/zzz");
    assert_eq!(
        (code, nf["reason"].as_str(), nf["details"]["kind"].as_str()),
        (404, Some("NotFound"), Some("pods"))
    );

    let (_, all) = c.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a");
    assert_eq!(all["kind"], "PodList");
    let names: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"p1") && !names.contains(&"p2"));
    assert!(
        all["items"][0].get("kind").is_none(),
        "list items carry no kind, like the real server"
    );
    let (_, one) = c.get("/api/v1/namespaces/default/pods?fieldSelector=metadata.name=p2,spec.nodeName=node-b&labelSelector=app%3Dweb");
    assert_eq!(one["items"].as_array().unwrap().len(), 1);
    let (code, _) = c.get("/api/v1/pods?fieldSelector=spec.bogus=1");
    assert_eq!(code, 400);
    let (_, page) = c.get("/api/v1/pods?limit=1");
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let cont = page["metadata"]["continue"].as_str().unwrap().to_string();
    let (_, page2) = c.get(&format!("/api/v1/pods?limit=5&continue={}", cont));
    assert_eq!(page2["items"].as_array().unwrap().len(), 2);
    assert_eq!(
        page2["metadata"]["resourceVersion"],
        page["metadata"]["resourceVersion"]
    );

    // Leases in kube-node-lease, events.
    let (code, lease) = c.post("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", json!({"metadata": {"name": "node-a"}, "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40}}));
    assert_eq!(
        (code, lease["apiVersion"].as_str()),
        (201, Some("coordination.k8s.io/v1"))
    );
    let (code, nf) = c.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/none");
    assert_eq!(
        (code, nf["message"].as_str()),
        (404, Some("leases.coordination.k8s.io \"none\" not found"))
    );
    assert_eq!(c.post("/api/v1/namespaces/default/events", json!({"metadata": {"name": "e1"}, "involvedObject": {"kind": "Node", "name": "node-a"}, "reason": "Starting"})).0, 201);
    assert_eq!(
        c.get("/api/v1/namespaces/default/configmaps/kube-root-ca.crt")
            .0,
        200
    );
    assert_eq!(c.get("/api").1["versions"], json!(["v1"]));
    assert!(c.get("/api/v1").1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["name"] == "pods/status"));
    assert!(c.get("/apis").1["groups"]
        .as_array()
        .unwrap()
        .iter()
        .any(|g| g["name"] == "coordination.k8s.io"));

    // Authentication.
    let (code, st) = Client::anonymous(&d).get("/api/v1/pods");
    assert_eq!(
        (code, st["reason"].as_str(), st["kind"].as_str()),
        (401, Some("Unauthorized"), Some("Status"))
    );
    assert_eq!(
        Client::token(&d, "kubelet-node-a-token")
            .get("/api/v1/nodes/node-a")
            .0,
        200
    );
    let mut bogus = Client::anonymous(&d);
    bogus.token = Some("nope".into());
    assert_eq!(bogus.get("/api/v1/nodes").0, 401);
    assert_eq!(
        Client::token(&d, "admin-token").get("/__double/stats").0,
        200
    );
    assert_eq!(c.get("/__double/stats").0, 403, "control API is admin-only");
    assert_eq!(c.get("/api/v1/widgets").0, 404);
    assert_eq!(
        c.req(
            "POST",
            "/api/v1/namespaces/default/pods/p1",
            Some("application/json"),
            Some(&json!({}))
        )
        .0,
        405
    );
}

#[test]
fn watch_order_resume_bookmarks_and_gone() {
    let d = spawn(
        "watch",
        &["--bookmark-interval", "0.3", "--watch-history", "20"],
    );
    let c = Client::kubelet(&d);
    let (_, list) = c.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a");
    let start = rv(&list);
    c.post("/api/v1/namespaces/default/pods", pod("w1", Some("node-a")));
    c.post(
        "/api/v1/namespaces/default/pods",
        pod("other", Some("node-b")),
    );
    let (_, patched) = c.patch(
        "/api/v1/namespaces/default/pods/w1/status",
        "application/strategic-merge-patch+json",
        json!({"status": {"phase": "Running"}}),
    );
    let mod_rv = rv(&patched);
    c.delete(
        "/api/v1/namespaces/default/pods/w1",
        Some(json!({"gracePeriodSeconds": 0})),
    );
    let evs = c.watch(&format!("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dnode-a&resourceVersion={}&timeoutSeconds=2", start), 3);
    let types: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types, vec!["ADDED", "MODIFIED", "DELETED"]);
    assert!(evs
        .iter()
        .all(|e| e["object"]["metadata"]["name"] == "w1" && e["object"]["kind"] == "Pod"));
    let rvs: Vec<u64> = evs
        .iter()
        .map(|e| rv(&e["object"]).parse().unwrap())
        .collect();
    assert!(
        rvs.windows(2).all(|w| w[0] < w[1]),
        "strictly increasing {:?}",
        rvs
    );

    // Resume after the MODIFIED event: only the DELETED event follows.
    let evs = c.watch(&format!("/api/v1/namespaces/default/pods?watch=true&fieldSelector=spec.nodeName%3Dnode-a&resourceVersion={}&timeoutSeconds=1", mod_rv), 1);
    assert_eq!(evs[0]["type"], "DELETED");

    // resourceVersion=0: synthetic ADDED for what exists, then live events; bookmarks.
    let c2 = Client::kubelet(&d);
    let t = std::thread::spawn(move || {
        c2.watch(
            "/api/v1/pods?watch=1&resourceVersion=0&allowWatchBookmarks=true&timeoutSeconds=3",
            // Bookmarks every 0.3 s: room for a few before "late" under load.
            6,
        )
    });
    std::thread::sleep(Duration::from_millis(500));
    c.post(
        "/api/v1/namespaces/default/pods",
        pod("late", Some("node-a")),
    );
    let evs = t.join().unwrap();
    assert_eq!(evs[0]["type"], "ADDED");
    assert_eq!(evs[0]["object"]["metadata"]["name"], "other");
    assert!(
        evs.iter()
            .any(|e| e["type"] == "BOOKMARK"
                && e["object"]["metadata"]["resourceVersion"].is_string())
    );
    assert!(evs
        .iter()
        .any(|e| e["type"] == "ADDED" && e["object"]["metadata"]["name"] == "late"));

    // A pod bound to the node later enters the selector: ADDED, not MODIFIED.
    let (_, l) = c.get("/api/v1/pods");
    let now = rv(&l);
    c.post("/api/v1/namespaces/default/pods", pod("unbound", None));
    let (code, _) = c.post("/api/v1/namespaces/default/pods/unbound/binding", json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "unbound"}, "target": {"kind": "Node", "name": "node-a"}}));
    assert_eq!(code, 201);
    let evs = c.watch(&format!("/api/v1/pods?watch=1&fieldSelector=spec.nodeName%3Dnode-a&resourceVersion={}&timeoutSeconds=1", now), 1);
    assert_eq!(
        (
            evs[0]["type"].as_str(),
            evs[0]["object"]["metadata"]["name"].as_str()
        ),
        (Some("ADDED"), Some("unbound"))
    );

    // Push the history window past `start`: 410 Expired as an ERROR event.
    for i in 0..25 {
        c.post(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": format!("cm{}", i)}}),
        );
    }
    let evs = c.watch(
        &format!("/api/v1/pods?watch=1&resourceVersion={}", start),
        2,
    );
    assert_eq!(evs.len(), 1, "stream ends after the error: {:?}", evs);
    assert_eq!(evs[0]["type"], "ERROR");
    assert_eq!(evs[0]["object"]["code"], 410);
    assert_eq!(evs[0]["object"]["reason"], "Expired");
    assert!(evs[0]["object"]["message"]
        .as_str()
        .unwrap()
        .starts_with("too old resource version"));
}

#[test]
fn updates_conflicts_and_patches() {
    let d = spawn("patch", &[]);
    let c = Client::kubelet(&d);
    let (_, p) = c.post("/api/v1/namespaces/default/pods", pod("p", Some("node-a")));
    // Stale PUT.
    let mut upd = p.clone();
    upd["metadata"]["labels"]["x"] = json!("1");
    let (code, ok) = c.put("/api/v1/namespaces/default/pods/p", upd.clone());
    assert_eq!(code, 200);
    assert_ne!(rv(&ok), rv(&p));
    let (code, conflict) = c.put("/api/v1/namespaces/default/pods/p", upd.clone());
    assert_eq!((code, conflict["reason"].as_str()), (409, Some("Conflict")));
    assert_eq!(conflict["message"], "Operation cannot be fulfilled on pods \"p\": the object has been modified; please apply your changes to the latest version and try again");
    // PUT on the main resource ignores status; spec is immutable.
    let mut s = ok.clone();
    s["status"]["phase"] = json!("Running");
    let (_, same) = c.put("/api/v1/namespaces/default/pods/p", s.clone());
    assert_eq!(same["status"]["phase"], "Pending");
    assert_eq!(rv(&same), rv(&ok), "a no-op update writes nothing");
    let mut spec = ok.clone();
    spec["spec"]["nodeName"] = json!("node-b");
    let (code, inv) = c.put("/api/v1/namespaces/default/pods/p", spec);
    assert_eq!((code, inv["reason"].as_str()), (422, Some("Invalid")));
    // PUT /status changes only status.
    let mut s2 = ok.clone();
    s2["status"]["phase"] = json!("Running");
    s2["spec"]["activeDeadlineSeconds"] = json!(5);
    let (code, st) = c.put("/api/v1/namespaces/default/pods/p/status", s2);
    assert_eq!(
        (code, st["status"]["phase"].as_str()),
        (200, Some("Running"))
    );
    assert!(st["spec"].get("activeDeadlineSeconds").is_none());

    // Strategic merge of conditions (by type); containerStatuses is atomic upstream.
    let smp = "application/strategic-merge-patch+json";
    let uid = p["metadata"]["uid"].clone();
    let (code, a) = c.patch("/api/v1/namespaces/default/pods/p/status", smp, json!({"metadata": {"uid": uid}, "status": {
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}],
        "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0, "image": "busybox:1.36", "imageID": "", "state": {"waiting": {"reason": "ContainerCreating"}}},
                              {"name": "d", "ready": false, "restartCount": 0, "image": "nginx", "imageID": "", "state": {"waiting": {"reason": "ContainerCreating"}}}]}}));
    assert_eq!(code, 200, "{}", a);
    let (code, b) = c.patch("/api/v1/namespaces/default/pods/p/status", smp, json!({"metadata": {"uid": uid}, "status": {
        "$setElementOrder/conditions": [{"type": "Initialized"}, {"type": "Ready"}, {"type": "ContainersReady"}],
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}],
        "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "busybox:1.36", "imageID": "", "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}}],
        "podIPs": [{"ip": "10.0.0.5"}], "spec": {"nodeName": "evil"}}}));
    assert_eq!(code, 200, "{}", b);
    let conds: Vec<(String, String)> = b["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap().into(),
                c["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        conds,
        vec![
            ("Initialized".into(), "True".into()),
            ("Ready".into(), "True".into()),
            ("ContainersReady".into(), "True".into())
        ]
    );
    assert_eq!(
        b["status"]["containerStatuses"].as_array().unwrap().len(),
        1
    );
    assert_eq!(b["status"]["containerStatuses"][0]["ready"], true);
    assert_eq!(b["spec"]["nodeName"], "node-a");
    // Stale uid in a status patch: the uid is immutable.
    let (code, e) = c.patch("/api/v1/namespaces/default/pods/p/status", smp, json!({"metadata": {"uid": "00000000-0000-4000-8000-000000000000"}, "status": {"phase": "Failed"}}));
    assert_eq!((code, e["reason"].as_str()), (422, Some("Invalid")));
    // resourceVersion precondition in a patch.
    let (code, _) = c.patch(
        "/api/v1/namespaces/default/pods/p",
        "application/merge-patch+json",
        json!({"metadata": {"resourceVersion": "1", "labels": {"y": "2"}}}),
    );
    assert_eq!(code, 409);
    let (code, m) = c.patch(
        "/api/v1/namespaces/default/pods/p",
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"x": null, "y": "2"}}}),
    );
    assert_eq!(
        (code, m["metadata"]["labels"].clone()),
        (200, json!({"app": "web", "y": "2"}))
    );
    let (code, j) = c.patch("/api/v1/namespaces/default/pods/p", "application/json-patch+json", json!([{"op": "test", "path": "/metadata/labels/y", "value": "2"}, {"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]));
    assert_eq!(
        (code, j["metadata"]["annotations"]["a"].as_str()),
        (200, Some("b"))
    );
    let (code, _) = c.patch(
        "/api/v1/namespaces/default/pods/p",
        "application/json-patch+json",
        json!([{"op": "test", "path": "/metadata/labels/y", "value": "3"}]),
    );
    assert_eq!(code, 422);
    let (code, _) = c.patch("/api/v1/namespaces/default/pods/p", "text/plain", json!({}));
    assert_eq!(code, 415);
    // Node status: conditions merge by type.
    c.post("/api/v1/nodes", json!({"metadata": {"name": "node-a"}, "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "MemoryPressure", "status": "False"}]}}));
    let (_, n) = c.patch("/api/v1/nodes/node-a/status", smp, json!({"status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}));
    assert_eq!(n["status"]["conditions"].as_array().unwrap().len(), 2);
    assert_eq!(n["status"]["conditions"][0]["status"], "True");
}

#[test]
fn graceful_delete_preconditions_and_finalizers() {
    let d = spawn("delete", &[]);
    let c = Client::kubelet(&d);
    let (_, p) = c.post("/api/v1/namespaces/default/pods", pod("g", Some("node-a")));
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let (_, l) = c.get("/api/v1/pods");
    let start = rv(&l);
    let (code, dp) = c.delete("/api/v1/namespaces/default/pods/g", None);
    assert_eq!(code, 200);
    assert!(dp["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(dp["metadata"]["deletionGracePeriodSeconds"], 30);
    assert_eq!(dp["metadata"]["generation"], 2);
    assert_eq!(
        c.get("/api/v1/namespaces/default/pods/g").0,
        200,
        "still there during the grace period"
    );
    let (code, e) = c.delete("/api/v1/namespaces/default/pods/g", Some(json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": "wrong"}})));
    assert_eq!((code, e["reason"].as_str()), (409, Some("Conflict")));
    assert!(e["message"]
        .as_str()
        .unwrap()
        .contains("Precondition failed: UID in precondition: wrong"));
    let (code, _) = c.delete(
        "/api/v1/namespaces/default/pods/g",
        Some(json!({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})),
    );
    assert_eq!(code, 200);
    assert_eq!(c.get("/api/v1/namespaces/default/pods/g").0, 404);
    let evs = c.watch(
        &format!(
            "/api/v1/namespaces/default/pods?watch=1&resourceVersion={}&timeoutSeconds=1",
            start
        ),
        2,
    );
    assert_eq!(
        evs.iter()
            .map(|e| e["type"].as_str().unwrap())
            .collect::<Vec<_>>(),
        vec!["MODIFIED", "DELETED"]
    );

    // Unbound pods and other kinds go at once.
    c.post("/api/v1/namespaces/default/pods", pod("u", None));
    assert_eq!(c.delete("/api/v1/namespaces/default/pods/u", None).0, 200);
    assert_eq!(c.get("/api/v1/namespaces/default/pods/u").0, 404);
    c.post(
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "cm"}}),
    );
    let (code, st) = c.delete(
        "/api/v1/namespaces/default/configmaps/cm?gracePeriodSeconds=30",
        None,
    );
    assert_eq!(
        (code, st["kind"].as_str(), st["status"].as_str()),
        (200, Some("Status"), Some("Success"))
    );
    let (code, cm) = c.post(
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "rv"}}),
    );
    assert_eq!(code, 201);
    let (code, _) = c.delete(
        "/api/v1/namespaces/default/configmaps/rv",
        Some(json!({"preconditions": {"resourceVersion": "1"}})),
    );
    assert_eq!(code, 409);
    assert_eq!(
        c.delete(
            "/api/v1/namespaces/default/configmaps/rv",
            Some(json!({"preconditions": {"resourceVersion": rv(&cm)}}))
        )
        .0,
        200
    );

    // Finalizers hold the object until removed.
    c.post(
        "/api/v1/namespaces/default/configmaps",
        json!({"metadata": {"name": "fin", "finalizers": ["example.com/x"]}}),
    );
    let (_, pending) = c.delete("/api/v1/namespaces/default/configmaps/fin", None);
    assert!(pending["metadata"]["deletionTimestamp"].is_string());
    assert_eq!(c.get("/api/v1/namespaces/default/configmaps/fin").0, 200);
    c.patch(
        "/api/v1/namespaces/default/configmaps/fin",
        "application/merge-patch+json",
        json!({"metadata": {"finalizers": null}}),
    );
    assert_eq!(c.get("/api/v1/namespaces/default/configmaps/fin").0, 404);
}

#[test]
fn faults_stats_audit_and_restart() {
    let tmp = tmpdir("faults");
    let dir = tmp.path();
    let port;
    {
        let d = spawn_in(dir, &[]);
        port = std::fs::read_to_string(d.dir.join("port")).unwrap();
        let admin = Client::admin(&d);
        let c = Client::kubelet(&d);
        c.post(
            "/api/v1/namespaces/default/pods",
            pod("keep", Some("node-a")),
        );
        let (code, _) = admin.post(
            "/__double/faults",
            json!({"status": 429, "count": 2, "retryAfterSeconds": 3, "pathContains": "/pods"}),
        );
        assert_eq!(code, 200);
        let (code, body, retry) = c.req("GET", "/api/v1/pods", None, None);
        assert_eq!(
            (code, body["reason"].as_str(), retry.as_deref()),
            (429, Some("TooManyRequests"), Some("3"))
        );
        assert_eq!(c.get("/api/v1/nodes").0, 200, "filtered by path");
        assert_eq!(c.get("/api/v1/pods").0, 429);
        assert_eq!(c.get("/api/v1/pods").0, 200, "count exhausted");
        admin.post("/__double/faults", json!({"status": 500, "count": 1}));
        let (code, e) = c.get("/api/v1/pods");
        assert_eq!((code, e["reason"].as_str()), (500, Some("InternalError")));
        admin.post("/__double/faults", json!({"dropConnections": 1}));
        // A fresh agent: ureq silently retries on a pooled (possibly stale) connection.
        let r = Client::kubelet(&d)
            .agent
            .get(&format!("{}/api/v1/pods", c.base))
            .call();
        assert!(
            matches!(r, Err(ureq::Error::Transport(_))),
            "dropped connection: {:?}",
            r.map(|x| x.status())
        );
        admin.post("/__double/faults", json!({"stallMs": 300, "count": 1}));
        let t = Instant::now();
        assert_eq!(c.get("/api/v1/pods").0, 200);
        assert!(t.elapsed() >= Duration::from_millis(300));
        admin.post("/__double/faults", json!({"truncateWatch": true}));
        let resp = c
            .agent
            .get(&format!("{}/api/v1/pods?watch=1", c.base))
            .call()
            .unwrap();
        let mut s = String::new();
        let _ = resp.into_reader().read_to_string(&mut s);
        assert!(
            serde_json::from_str::<Value>(s.trim()).is_err(),
            "malformed line: {:?}",
            s
        );

        let (_, stats) = admin.get("/__double/stats");
        assert!(stats["byVerbResource"]["list pods"].as_u64().unwrap() >= 5);
        assert!(stats["byVerbResource"]["create pods"].as_u64().unwrap() >= 1);
        assert!(stats["byUserAgent"]["apid-test/1.0"].as_u64().unwrap() >= 5);
        assert_eq!(admin.post("/__double/stats/reset", json!({})).1["total"], 0);
        let audit = std::fs::read_to_string(d.dir.join("audit.log")).unwrap();
        let first: Value =
            serde_json::from_str(audit.lines().find(|l| l.contains("\"create\"")).unwrap())
                .unwrap();
        assert_eq!(
            (first["user"].as_str(), first["code"].as_u64()),
            (Some("system:node:node-a"), Some(201))
        );
    }
    // A restart on the same dir and port is an outage, not a new cluster.
    let d = spawn_in(dir, &["--port", port.trim()]);
    let c = Client::kubelet(&d);
    let (code, p) = c.get("/api/v1/namespaces/default/pods/keep");
    assert_eq!(code, 200);
    let evs = c.watch(
        &format!(
            "/api/v1/pods?watch=1&resourceVersion={}",
            rv(&p).parse::<u64>().unwrap() - 1
        ),
        1,
    );
    assert_eq!(
        evs[0]["object"]["code"], 410,
        "the new watch cache starts at the current revision"
    );
    let (_, l) = c.get("/api/v1/pods");
    assert!(rv(&l).parse::<u64>().unwrap() >= rv(&p).parse::<u64>().unwrap());
}

#[test]
fn token_and_subject_access_reviews() {
    let d = spawn("reviews", &[]);
    let kubelet = Client::kubelet(&d);
    let admin = Client::admin(&d);
    let admin_token = std::fs::read_to_string(d.dir.join("admin-token"))
        .unwrap()
        .trim()
        .to_string();

    // TokenReview of a known token: the user, with system:authenticated.
    let tr = |token: &str| {
        kubelet.post(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                   "spec": {"token": token}}),
        )
    };
    let (c, v) = tr(&admin_token);
    assert_eq!(c, 201, "{}", v);
    assert_eq!(v["kind"], "TokenReview");
    assert_eq!(v["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(v["status"]["authenticated"], true, "{}", v);
    assert_eq!(v["status"]["user"]["username"], "admin");
    let groups = v["status"]["user"]["groups"].as_array().unwrap();
    assert!(groups.contains(&json!("system:masters")), "{}", v);
    assert!(groups.contains(&json!("system:authenticated")), "{}", v);

    // Unknown token: not authenticated, with an error.
    let (c, v) = tr("no-such-token");
    assert_eq!(c, 201, "{}", v);
    assert_eq!(v["status"]["authenticated"], false, "{}", v);
    assert!(v["status"]["error"].as_str().is_some_and(|e| !e.is_empty()));
    // Missing token: 422.
    let (c, _) = kubelet.post(
        "/apis/authentication.k8s.io/v1/tokenreviews",
        json!({"kind": "TokenReview", "spec": {}}),
    );
    assert_eq!(c, 422);

    // Tokens for arbitrary users, usable against the double and reviewable.
    let (c, v) = admin.post(
        "/__double/tokens",
        json!({"user": "alice", "groups": ["devs"]}),
    );
    assert_eq!(c, 200, "{}", v);
    let alice = v["token"].as_str().unwrap().to_string();
    let (_, v) = tr(&alice);
    assert_eq!(v["status"]["user"]["username"], "alice", "{}", v);
    assert_eq!(v["status"]["user"]["uid"], "alice");
    let mut ac = Client::anonymous(&d);
    ac.token = Some(alice.clone());
    assert_eq!(ac.get("/api/v1/namespaces").0, 200);
    // Only admins may issue tokens.
    assert_eq!(
        ac.post("/__double/tokens", json!({"user": "mallory"})).0,
        403
    );

    // SubjectAccessReview: allowed unless the user is on the deny list.
    let sar = |user: &str, sub: &str| {
        kubelet.post(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                   "spec": {"user": user, "groups": ["system:authenticated"],
                            "resourceAttributes": {"verb": "get", "resource": "nodes",
                                                    "subresource": sub, "name": "node-a"}}}),
        )
    };
    let (c, v) = sar("alice", "proxy");
    assert_eq!(c, 201, "{}", v);
    assert_eq!(v["kind"], "SubjectAccessReview");
    assert_eq!(v["status"]["allowed"], true, "{}", v);
    assert_eq!(v["spec"]["resourceAttributes"]["subresource"], "proxy");
    let (c, v) = admin.post("/__double/authz", json!({"deny": ["alice"]}));
    assert_eq!(c, 200, "{}", v);
    assert_eq!(v["deny"], json!(["alice"]));
    assert_eq!(sar("alice", "stats").1["status"]["allowed"], false);
    assert_eq!(sar("bob", "stats").1["status"]["allowed"], true);
    // Neither or both attribute kinds: 422.
    let (c, _) = kubelet.post(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        json!({"spec": {"user": "bob"}}),
    );
    assert_eq!(c, 422);

    let (c, v) = admin.get("/__double/authz/reviews");
    assert_eq!(c, 200);
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 3, "{}", v);
    assert_eq!(items[0]["user"], "alice");
    assert_eq!(items[0]["verb"], "get");
    assert_eq!(items[0]["resource"], "nodes");
    assert_eq!(items[0]["subresource"], "proxy");
    assert_eq!(items[0]["name"], "node-a");
    assert_eq!(items[0]["allowed"], true);
    assert_eq!(items[1]["allowed"], false);
    assert_eq!(admin.delete("/__double/authz/reviews", None).0, 200);
    assert_eq!(admin.get("/__double/authz/reviews").1["items"], json!([]));
    // GET on the review endpoints is not allowed.
    assert_eq!(
        kubelet
            .get("/apis/authorization.k8s.io/v1/subjectaccessreviews")
            .0,
        405
    );
}
