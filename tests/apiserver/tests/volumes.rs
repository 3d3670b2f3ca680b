//! The API a kubelet's volume support meets: ServiceAccount admission (the
//! kube-api-access projected volume), TokenRequest, ConfigMaps and Secrets
//! (selectors, watches, immutability, stringData/binaryData), and
//! PersistentVolumes/Claims (defaults, status, the minimal binder).

mod support;

use base64::Engine;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::*;

const SA_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

fn expected_source() -> Value {
    json!({"defaultMode": 420, "sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
    ]})
}

fn claims(token: &str) -> Value {
    let part = token.split('.').nth(1).expect("JWT has a payload");
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .expect("base64url payload");
    serde_json::from_slice(&raw).expect("JSON claims")
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Polls GET `path` until `f` holds (5 s).
fn wait_for(c: &Client, path: &str, f: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, v) = c.get(path);
        if f(&v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting on {}: {}",
            path,
            v
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn service_account_admission() {
    let d = spawn("sa-admission", &[]);
    let c = Client::admin(&d);
    let base = "/api/v1/namespaces/default/pods";

    let mut p = pod("p1", None);
    p["spec"]["initContainers"] = json!([{"name": "init", "image": "busybox"}]);
    p["spec"]["containers"][1]["volumeMounts"] = json!([{"name": "own", "mountPath": SA_PATH}]);
    p["spec"]["volumes"] = json!([{"name": "own", "emptyDir": {}}]);
    let (code, p1) = c.post(base, p);
    assert_eq!(code, 201, "{}", p1);
    assert_eq!(p1["spec"]["serviceAccountName"], "default");
    assert_eq!(p1["spec"]["serviceAccount"], "default");
    let vols = p1["spec"]["volumes"].as_array().unwrap();
    assert_eq!(vols.len(), 2);
    let vname = vols[1]["name"].as_str().unwrap().to_string();
    assert!(
        vname.starts_with("kube-api-access-") && vname.len() == 21,
        "{}",
        vname
    );
    assert!(vname[16..]
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    assert_eq!(
        vols[1],
        json!({"name": vname, "projected": expected_source()})
    );
    let mount = json!({"name": vname, "readOnly": true, "mountPath": SA_PATH});
    assert_eq!(
        p1["spec"]["initContainers"][0]["volumeMounts"],
        json!([mount])
    );
    assert_eq!(p1["spec"]["containers"][0]["volumeMounts"], json!([mount]));
    // A container that mounts something at the path keeps its own mount only.
    assert_eq!(
        p1["spec"]["containers"][1]["volumeMounts"],
        json!([{"name": "own", "mountPath": SA_PATH}])
    );
    // Names differ per pod.
    let (_, p2) = c.post(base, pod("p2", None));
    assert_ne!(p2["spec"]["volumes"][0]["name"], json!(vname));

    // automountServiceAccountToken: the pod's word wins, then the ServiceAccount's.
    let mut p = pod("no-mount", None);
    p["spec"]["automountServiceAccountToken"] = json!(false);
    let (code, v) = c.post(base, p);
    assert_eq!(code, 201);
    assert!(v["spec"].get("volumes").is_none(), "{}", v);
    assert!(v["spec"]["containers"][0].get("volumeMounts").is_none());
    let (code, _) = c.post(
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"metadata": {"name": "quiet"}, "automountServiceAccountToken": false,
            "imagePullSecrets": [{"name": "regcred"}]}),
    );
    assert_eq!(code, 201);
    let mut p = pod("quiet-pod", None);
    p["spec"]["serviceAccountName"] = json!("quiet");
    let (_, v) = c.post(base, p);
    assert!(v["spec"].get("volumes").is_none(), "{}", v);
    assert_eq!(v["spec"]["imagePullSecrets"], json!([{"name": "regcred"}]));
    let mut p = pod("loud-pod", None);
    p["spec"]["serviceAccountName"] = json!("quiet");
    p["spec"]["automountServiceAccountToken"] = json!(true);
    let (_, v) = c.post(base, p);
    assert_eq!(v["spec"]["volumes"][0]["projected"], expected_source());

    // A missing ServiceAccount: 403, upstream's message.
    let mut p = pod("orphan", None);
    p["spec"]["serviceAccountName"] = json!("missing");
    let (code, st) = c.post(base, p);
    assert_eq!(code, 403, "{}", st);
    assert_eq!(st["reason"], "Forbidden");
    assert_eq!(
        st["message"],
        "pods \"orphan\" is forbidden: error looking up service account default/missing: serviceaccount \"missing\" not found"
    );
    assert_eq!(st["details"], json!({"name": "orphan", "kind": "pods"}));
    let mut p = pod("", None);
    p["metadata"] = json!({"generateName": "gen-"});
    p["spec"]["serviceAccountName"] = json!("missing");
    let (code, st) = c.post(base, p);
    assert_eq!(code, 403);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .starts_with("pods \"gen-\" is forbidden"));

    // Mirror pods are left alone, and may not reference SAs, secrets or tokens.
    let mirror = |name: &str| {
        let mut p = pod(name, Some("node-a"));
        p["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
        p
    };
    let (code, m) = c.post(base, mirror("static-node-a"));
    assert_eq!(code, 201, "{}", m);
    assert!(m["spec"].get("serviceAccountName").is_none(), "{}", m);
    assert!(m["spec"].get("volumes").is_none());
    let mut p = mirror("m2");
    p["spec"]["serviceAccountName"] = json!("default");
    let (code, st) = c.post(base, p);
    assert_eq!(
        (code, st["message"].as_str().unwrap()),
        (
            403,
            "pods \"m2\" is forbidden: a mirror pod may not reference service accounts"
        )
    );
    let mut p = mirror("m3");
    p["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "x"}}]);
    let (code, st) = c.post(base, p);
    assert_eq!(
        (code, st["message"].as_str().unwrap()),
        (
            403,
            "pods \"m3\" is forbidden: a mirror pod may not reference secrets"
        )
    );
    let mut p = mirror("m4");
    p["spec"]["volumes"] =
        json!([{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]);
    let (code, _) = c.post(base, p);
    assert_eq!(code, 403);

    // Updates do not run the plugin: the injected volume stays as it was.
    let (code, up) = c.patch(
        &format!("{}/p1", base),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"x": "y"}}}),
    );
    assert_eq!(code, 200);
    assert_eq!(up["spec"]["volumes"], p1["spec"]["volumes"]);

    // Every namespace, new ones too, has the default ServiceAccount and kube-root-ca.crt.
    let ca = std::fs::read_to_string(d.dir.join("ca.crt")).unwrap();
    let (code, _) = c.post("/api/v1/namespaces", json!({"metadata": {"name": "fresh"}}));
    assert_eq!(code, 201);
    for ns in [
        "default",
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "fresh",
    ] {
        let (code, _) = c.get(&format!(
            "/api/v1/namespaces/{}/serviceaccounts/default",
            ns
        ));
        assert_eq!(code, 200, "{}", ns);
        let (code, cm) = c.get(&format!(
            "/api/v1/namespaces/{}/configmaps/kube-root-ca.crt",
            ns
        ));
        assert_eq!(code, 200, "{}", ns);
        assert_eq!(cm["data"]["ca.crt"].as_str().unwrap().trim(), ca.trim());
    }
    let (code, v) = c.post("/api/v1/namespaces/fresh/pods", pod("f", None));
    assert_eq!(code, 201);
    assert_eq!(v["spec"]["volumes"][0]["projected"], expected_source());

    // The controllers behind them put them back, and keep ca.crt current.
    let cm = "/api/v1/namespaces/fresh/configmaps/kube-root-ca.crt";
    let sa = "/api/v1/namespaces/fresh/serviceaccounts/default";
    assert_eq!(c.delete(cm, None).0, 200);
    assert_eq!(c.delete(sa, None).0, 200);
    wait_for(&c, cm, |v| {
        v["data"]["ca.crt"].as_str().map(str::trim) == Some(ca.trim())
    });
    wait_for(&c, sa, |v| v["kind"] == "ServiceAccount");
    c.patch(
        cm,
        "application/merge-patch+json",
        json!({"data": {"ca.crt": "junk"}}),
    );
    wait_for(&c, cm, |v| {
        v["data"]["ca.crt"].as_str().map(str::trim) == Some(ca.trim())
    });
}

#[test]
fn token_requests() {
    let d = spawn("tokens", &[]);
    let c = Client::admin(&d);
    let (_, node) = c.post("/api/v1/nodes", json!({"metadata": {"name": "node-a"}}));
    let (_, p) = c.post("/api/v1/namespaces/default/pods", pod("tp", Some("node-a")));
    let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
    let (_, sa) = c.get("/api/v1/namespaces/default/serviceaccounts/default");
    let url = "/api/v1/namespaces/default/serviceaccounts/default/token";
    let t0 = now();
    let (code, tr) = c.post(
        url,
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 3600,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "tp", "uid": uid}}}),
    );
    assert_eq!(code, 201, "{}", tr);
    assert_eq!(tr["kind"], "TokenRequest");
    assert_eq!(tr["metadata"]["name"], "default");
    assert_eq!(
        tr["spec"]["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    let cl = claims(tr["status"]["token"].as_str().unwrap());
    assert_eq!(cl["sub"], "system:serviceaccount:default:default");
    assert_eq!(
        cl["aud"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    assert_eq!(cl["kubernetes.io"]["namespace"], "default");
    assert_eq!(
        cl["kubernetes.io"]["serviceaccount"],
        json!({"name": "default", "uid": sa["metadata"]["uid"]})
    );
    assert_eq!(
        cl["kubernetes.io"]["pod"],
        json!({"name": "tp", "uid": uid})
    );
    assert_eq!(
        cl["kubernetes.io"]["node"],
        json!({"name": "node-a", "uid": node["metadata"]["uid"]})
    );
    let exp = cl["exp"].as_i64().unwrap();
    assert!((t0 + 3600..=now() + 3600).contains(&exp));
    assert!(cl.get("warnafter").is_none() && cl["kubernetes.io"].get("warnafter").is_none());
    assert!(tr["status"]["expirationTimestamp"]
        .as_str()
        .unwrap()
        .ends_with('Z'));

    // The kubelet's 3607 s projected token: a year in the JWT, warnafter, status says 3607 s.
    let (code, tr) = c.post(
        url,
        json!({"spec": {"expirationSeconds": 3607, "audiences": ["https://kubernetes.default.svc.cluster.local"],
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "tp", "uid": uid}}}),
    );
    assert_eq!(code, 201);
    let cl = claims(tr["status"]["token"].as_str().unwrap());
    assert!(cl["exp"].as_i64().unwrap() >= t0 + 365 * 86400);
    let warn = cl["kubernetes.io"]["warnafter"].as_i64().unwrap();
    assert!((t0 + 3607..=now() + 3607).contains(&warn));

    // Another audience, default expiry (1 h), unbound.
    let (code, tr) = c.post(url, json!({"spec": {"audiences": ["vault"]}}));
    assert_eq!(code, 201);
    assert_eq!(tr["spec"]["expirationSeconds"], 3600);
    let cl = claims(tr["status"]["token"].as_str().unwrap());
    assert_eq!(cl["aud"], json!(["vault"]));
    assert!(cl["kubernetes.io"].get("pod").is_none());

    // Secret and Node bindings.
    let (_, s) = c.post(
        "/api/v1/namespaces/default/secrets",
        json!({"metadata": {"name": "bind-me"}}),
    );
    let (code, tr) = c.post(url, json!({"spec": {"boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": "bind-me", "uid": s["metadata"]["uid"]}}}));
    assert_eq!(code, 201);
    assert_eq!(
        claims(tr["status"]["token"].as_str().unwrap())["kubernetes.io"]["secret"]["name"],
        "bind-me"
    );
    let (code, tr) = c.post(
        url,
        json!({"spec": {"boundObjectRef": {"kind": "Node", "apiVersion": "v1", "name": "node-a"}}}),
    );
    assert_eq!(code, 201);
    assert_eq!(
        claims(tr["status"]["token"].as_str().unwrap())["kubernetes.io"]["node"]["uid"],
        node["metadata"]["uid"]
    );

    // Errors, as upstream answers them.
    let bound = |kind: &str, name: &str, uid: &str| json!({"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid}}});
    let (code, st) = c.post(url, bound("Pod", "tp", "0000"));
    assert_eq!(code, 409, "{}", st);
    assert_eq!(st["reason"], "Conflict");
    assert_eq!(st["message"], "Operation cannot be fulfilled on Pod \"tp\": the UID in the bound object reference (0000) does not match the UID in record. The object might have been deleted and then recreated");
    let (code, st) = c.post(url, bound("Pod", "nope", ""));
    assert_eq!(
        (code, st["message"].as_str().unwrap()),
        (404, "pods \"nope\" not found")
    );
    let (code, st) = c.post(url, bound("ConfigMap", "kube-root-ca.crt", ""));
    assert_eq!(
        (code, st["message"].as_str().unwrap()),
        (
            400,
            "cannot bind token to object of type /v1, Kind=ConfigMap"
        )
    );
    let (code, st) = c.post(url, json!({"spec": {"expirationSeconds": 599}}));
    assert_eq!(code, 422);
    assert_eq!(st["message"], "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes");
    let (code, st) = c.post(
        "/api/v1/namespaces/default/serviceaccounts/ghost/token",
        json!({}),
    );
    assert_eq!(
        (code, st["message"].as_str().unwrap()),
        (404, "serviceaccounts \"ghost\" not found")
    );
    c.post(
        "/api/v1/namespaces/default/serviceaccounts",
        json!({"metadata": {"name": "other"}}),
    );
    let (code, st) = c.post(
        "/api/v1/namespaces/default/serviceaccounts/other/token",
        bound("Pod", "tp", &uid),
    );
    assert_eq!(code, 400);
    assert_eq!(st["message"], "cannot bind token for serviceaccount \"other\" to pod running with different serviceaccount name.");

    // Every request is counted; stats count them too.
    let (_, log) = c.get("/__double/tokenrequests");
    assert_eq!(log["count"], 11, "{}", log);
    assert_eq!(log["issued"], 5);
    let first = &log["items"][0];
    assert_eq!(first["serviceAccount"], "default");
    assert_eq!(first["boundObjectRef"]["uid"], json!(uid));
    assert_eq!(first["code"], 201);
    assert_eq!(first["user"], "admin");
    let (_, stats) = c.get("/__double/stats");
    assert_eq!(stats["byVerbResource"]["create serviceaccounts/token"], 11);
    let (code, log) = c.delete("/__double/tokenrequests", None);
    assert_eq!((code, log["count"].as_u64()), (200, Some(0)));
}

#[test]
fn node_restriction_on_token_requests() {
    let d = spawn("tokens-nr", &["--node-restriction"]);
    let admin = Client::admin(&d);
    let kubelet = Client::kubelet(&d);
    let (_, mine) = admin.post(
        "/api/v1/namespaces/default/pods",
        pod("mine", Some("node-a")),
    );
    let (_, theirs) = admin.post(
        "/api/v1/namespaces/default/pods",
        pod("theirs", Some("node-b")),
    );
    let url = "/api/v1/namespaces/default/serviceaccounts/default/token";
    let bound = |p: &Value| {
        json!({"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
        "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}}})
    };
    let (code, st) = kubelet.post(url, json!({"spec": {}}));
    assert_eq!(code, 403);
    assert_eq!(
        st["message"],
        "serviceaccounts \"default\" is forbidden: node requested token not bound to a pod"
    );
    let (code, st) = kubelet.post(url, bound(&theirs));
    assert_eq!(code, 403);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .ends_with("node requested token bound to a pod scheduled on a different node"));
    let (code, tr) = kubelet.post(url, bound(&mine));
    assert_eq!(code, 201, "{}", tr);
    let (_, log) = admin.get("/__double/tokenrequests");
    assert_eq!(
        (log["count"].as_u64(), log["issued"].as_u64()),
        (Some(3), Some(1))
    );
    assert_eq!(log["items"][2]["user"], "system:node:node-a");
}

#[test]
fn configmaps_and_secrets() {
    let d = spawn("config", &["--bookmark-interval", "0.3"]);
    let c = Client::admin(&d);
    let cms = "/api/v1/namespaces/default/configmaps";
    let secrets = "/api/v1/namespaces/default/secrets";

    // Secret: type defaults to Opaque, stringData merges into data (and wins).
    let (code, s) = c.post(
        secrets,
        json!({"metadata": {"name": "s1"}, "data": {"a": "b2xk", "keep": "eA=="}, "stringData": {"a": "new", "b": "hi"}}),
    );
    assert_eq!(code, 201, "{}", s);
    assert_eq!(s["type"], "Opaque");
    assert!(s.get("stringData").is_none());
    assert_eq!(s["data"], json!({"a": "bmV3", "b": "aGk=", "keep": "eA=="}));
    let (code, st) = c.post(
        secrets,
        json!({"metadata": {"name": "bad"}, "data": {"a": "!!!"}}),
    );
    assert_eq!(code, 400, "{}", st);
    assert!(st["message"].as_str().unwrap().starts_with("Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 0"));
    let (code, st) = c.post(
        secrets,
        json!({"metadata": {"name": "bad"}, "data": {"a b": "eA=="}}),
    );
    assert_eq!(code, 422);
    assert!(st["message"].as_str().unwrap().contains("data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters"));
    let (code, st) = c.post(secrets, json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}}));
    assert_eq!(
        (code, st["message"].as_str().unwrap()),
        (
            422,
            "Secret \"tls\" is invalid: data[tls.key]: Required value"
        )
    );
    let (code, st) = c.patch(
        &format!("{}/s1", secrets),
        "application/merge-patch+json",
        json!({"type": "kubernetes.io/tls"}),
    );
    assert_eq!(code, 422);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .contains("type: Invalid value: \"kubernetes.io/tls\": field is immutable"));

    // ConfigMap binaryData; a key in both maps is invalid.
    let (code, cm) = c.post(
        cms,
        json!({"metadata": {"name": "cm1"}, "data": {"k": "v"}, "binaryData": {"bin": "AAEC"}}),
    );
    assert_eq!(code, 201);
    assert_eq!(cm["binaryData"]["bin"], "AAEC");
    let (code, _) = c.post(
        cms,
        json!({"metadata": {"name": "dup"}, "data": {"k": "v"}, "binaryData": {"k": "AAEC"}}),
    );
    assert_eq!(code, 422);

    // Immutable: data and the flag are frozen, metadata is not.
    let (code, im) = c.post(
        cms,
        json!({"metadata": {"name": "frozen"}, "data": {"k": "v"}, "immutable": true}),
    );
    assert_eq!(code, 201);
    let mut upd = im.clone();
    upd["data"]["k"] = json!("w");
    let (code, st) = c.put(&format!("{}/frozen", cms), upd);
    assert_eq!(code, 422);
    assert_eq!(st["message"], "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set");
    assert_eq!(
        st["details"]["causes"][0],
        json!({"reason": "FieldValueForbidden", "message": "Forbidden: field is immutable when `immutable` is set", "field": "data"})
    );
    let (code, _) = c.patch(
        &format!("{}/frozen", cms),
        "application/merge-patch+json",
        json!({"immutable": false}),
    );
    assert_eq!(code, 422);
    let (code, _) = c.patch(
        &format!("{}/frozen", cms),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"a": "b"}}}),
    );
    assert_eq!(code, 200);
    c.post(
        secrets,
        json!({"metadata": {"name": "sfrozen"}, "stringData": {"k": "v"}, "immutable": true}),
    );
    let (code, st) = c.patch(
        &format!("{}/sfrozen", secrets),
        "application/merge-patch+json",
        json!({"stringData": {"k": "changed"}}),
    );
    assert_eq!(code, 422);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .contains("data: Forbidden: field is immutable when `immutable` is set"));

    // fieldSelector metadata.name / metadata.namespace on list and watch (with bookmarks).
    let (_, l) = c.get("/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dcm1");
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
    assert_eq!(l["items"][0]["metadata"]["name"], "cm1");
    let (_, l) = c.get("/api/v1/configmaps?fieldSelector=metadata.namespace%3Dkube-system");
    assert!(l["items"]
        .as_array()
        .unwrap()
        .iter()
        .all(|i| i["metadata"]["namespace"] == "kube-system"));
    let (_, l) =
        c.get("/api/v1/secrets?fieldSelector=metadata.name%3Ds1,metadata.namespace%3Ddefault");
    assert_eq!(l["items"].as_array().unwrap().len(), 1);
    let rv0 = rv(&l);
    let c2 = Client::admin(&d);
    let path = format!(
        "{}?watch=1&fieldSelector=metadata.name%3Dcm1&allowWatchBookmarks=true&timeoutSeconds=2",
        cms
    );
    let t = std::thread::spawn(move || c2.watch(&path, 4));
    // Bookmarks come every 0.3 s and may fall between any two events.
    std::thread::sleep(Duration::from_millis(100));
    c.patch(
        &format!("{}/frozen", cms),
        "application/merge-patch+json",
        json!({"metadata": {"labels": {"c": "d"}}}),
    );
    c.patch(
        &format!("{}/cm1", cms),
        "application/merge-patch+json",
        json!({"data": {"k": "v2"}}),
    );
    let evs = t.join().unwrap();
    let (marks, evs): (Vec<_>, Vec<_>) = evs.into_iter().partition(|e| e["type"] == "BOOKMARK");
    let kinds: Vec<&str> = evs.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED"], "{:?}", evs);
    assert!(evs.iter().all(|e| e["object"]["metadata"]["name"] == "cm1"));
    assert_eq!(evs[1]["object"]["data"]["k"], "v2");
    assert!(!marks.is_empty(), "no bookmark in 4 events");
    let evs = c.watch(&format!("/api/v1/secrets?watch=1&fieldSelector=metadata.name%3Ds1&resourceVersion={}&timeoutSeconds=1", rv0), 1);
    assert!(evs.is_empty(), "{:?}", evs);
}

#[test]
fn persistent_volumes_and_claims() {
    let d = spawn("pv", &[]);
    let c = Client::admin(&d);
    let (code, pv) = c.post(
        "/api/v1/persistentvolumes",
        json!({"metadata": {"name": "pv1"}, "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/tmp/pv1"}}, "status": {"phase": "Bound"}}),
    );
    assert_eq!(code, 201, "{}", pv);
    assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain");
    assert_eq!(pv["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pv["spec"]["hostPath"]["type"], "");
    assert_eq!(pv["status"]["phase"], "Pending");
    wait_for(&c, "/api/v1/persistentvolumes/pv1", |v| {
        v["status"]["phase"] == "Available"
    });

    let claims = "/api/v1/namespaces/default/persistentvolumeclaims";
    let (code, pvc) = c.post(
        claims,
        json!({"metadata": {"name": "c1"}, "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "pv1",
            "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    assert_eq!(code, 201, "{}", pvc);
    assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pvc["status"], json!({"phase": "Pending"}));
    let bound = wait_for(&c, &format!("{}/c1", claims), |v| {
        v["status"]["phase"] == "Bound"
    });
    assert_eq!(bound["status"]["capacity"]["storage"], "1Gi");
    assert_eq!(bound["status"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(
        bound["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"],
        "yes"
    );
    let pv = wait_for(&c, "/api/v1/persistentvolumes/pv1", |v| {
        v["status"]["phase"] == "Bound"
    });
    assert_eq!(pv["spec"]["claimRef"]["uid"], pvc["metadata"]["uid"]);
    assert_eq!(
        pv["metadata"]["annotations"]["pv.kubernetes.io/bound-by-controller"],
        "yes"
    );

    // The status subresource of both; the main resource ignores status.
    let (code, v) = c.patch(
        &format!("{}/c1/status", claims),
        "application/merge-patch+json",
        json!({"status": {"conditions": [{"type": "Resizing", "status": "True"}]}}),
    );
    assert_eq!(code, 200, "{}", v);
    assert_eq!(v["status"]["conditions"][0]["type"], "Resizing");
    let (code, v) = c.patch(
        &format!("{}/c1", claims),
        "application/merge-patch+json",
        json!({"status": {"phase": "Lost"}, "metadata": {"labels": {"a": "b"}}}),
    );
    assert_eq!(code, 200);
    assert_eq!(v["status"]["phase"], "Bound");
    let (code, v) = c.patch(
        "/api/v1/persistentvolumes/pv1/status",
        "application/merge-patch+json",
        json!({"status": {"message": "hi"}}),
    );
    assert_eq!((code, v["status"]["message"].as_str()), (200, Some("hi")));

    // A claim that names a missing volume stays Pending; a test can bind it by hand.
    let (_, _) = c.post(claims, json!({"metadata": {"name": "c2"}, "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "ghost",
        "resources": {"requests": {"storage": "1Gi"}}}}));
    let (code, v) = c.patch(
        &format!("{}/c2/status", claims),
        "application/merge-patch+json",
        json!({"status": {"phase": "Bound"}}),
    );
    assert_eq!((code, v["status"]["phase"].as_str()), (200, Some("Bound")));

    // The claim goes: the volume is Released (Retain keeps it).
    c.delete(&format!("{}/c1", claims), None);
    wait_for(&c, "/api/v1/persistentvolumes/pv1", |v| {
        v["status"]["phase"] == "Released"
    });
}

#[test]
fn node_authorizer_graph() {
    let d = spawn("nodeauthz", &["--node-authorizer"]);
    let admin = Client::admin(&d);
    let node = Client::kubelet(&d);
    let ns = "/api/v1/namespaces/default";
    for (kind, name) in [
        ("secrets", "used"),
        ("secrets", "unused"),
        ("secrets", "theirs"),
        ("configmaps", "cfg"),
        ("serviceaccounts", "runner"),
    ] {
        let (code, _) = admin.post(
            &format!("{}/{}", ns, kind),
            json!({"metadata": {"name": name}}),
        );
        assert_eq!(code, 201);
    }
    admin.post(
        "/api/v1/persistentvolumes",
        json!({"metadata": {"name": "pv-used"}, "spec": {"capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/tmp/x"}}}),
    );
    admin.post(
        &format!("{}/persistentvolumeclaims", ns),
        json!({"metadata": {"name": "data"}, "spec": {"volumeName": "pv-used",
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    let mut p = pod("consumer", Some("node-a"));
    p["spec"]["serviceAccountName"] = json!("runner");
    p["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "used"}},
        {"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]);
    p["spec"]["containers"][0]["env"] =
        json!([{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]);
    let (code, consumer) = admin.post(&format!("{}/pods", ns), p);
    assert_eq!(code, 201, "{}", consumer);
    let mut p = pod("elsewhere", Some("node-b"));
    p["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "theirs"}}]);
    admin.post(&format!("{}/pods", ns), p);

    // Referenced by a pod on node-a: readable (the injected volume brings kube-root-ca.crt).
    for path in [
        "secrets/used",
        "configmaps/cfg",
        "configmaps/kube-root-ca.crt",
        "persistentvolumeclaims/data",
    ] {
        let (code, v) = node.get(&format!("{}/{}", ns, path));
        assert_eq!(code, 200, "{}: {}", path, v);
    }
    // A PV is related through its claimRef, which the binder sets.
    wait_for(&admin, "/api/v1/persistentvolumes/pv-used", |v| {
        v["spec"]["claimRef"]["name"] == "data"
    });
    assert_eq!(node.get("/api/v1/persistentvolumes/pv-used").0, 200);
    let (code, l) = node.get(&format!(
        "{}/secrets?fieldSelector=metadata.name%3Dused",
        ns
    ));
    assert_eq!(
        (code, l["items"].as_array().map(|a| a.len())),
        (200, Some(1))
    );
    let evs = node.watch(
        &format!(
            "{}/configmaps?watch=1&fieldSelector=metadata.name%3Dcfg&timeoutSeconds=1",
            ns
        ),
        1,
    );
    assert_eq!(evs[0]["type"], "ADDED");

    // Everything else: 403 with the authorizer's reason.
    let (code, st) = node.get(&format!("{}/secrets/unused", ns));
    assert_eq!(code, 403);
    assert_eq!(st["message"], "secrets \"unused\" is forbidden: User \"system:node:node-a\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no relationship found between node 'node-a' and this object");
    assert_eq!(node.get(&format!("{}/secrets/theirs", ns)).0, 403);
    let (code, st) = node.get(&format!("{}/secrets", ns));
    assert_eq!((code, st["message"].as_str().unwrap()), (403, "secrets is forbidden: User \"system:node:node-a\" cannot list resource \"secrets\" in API group \"\" in the namespace \"default\": No Object name found"));
    let (code, st) = node.get("/api/v1/secrets?fieldSelector=metadata.name%3Dused");
    assert_eq!(code, 403);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .ends_with("at the cluster scope: can only read namespaced object of this type"));
    let (code, st) = node.post(
        &format!("{}/secrets", ns),
        json!({"metadata": {"name": "mine"}}),
    );
    assert_eq!(code, 403);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .ends_with("can only read resources of this type"));
    let (code, st) = node.get("/api/v1/persistentvolumes");
    assert_eq!(code, 403);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .ends_with("can only get individual resources of this type"));
    let (code, _) = node.patch(
        &format!("{}/persistentvolumeclaims/data/status", ns),
        "application/merge-patch+json",
        json!({"status": {"conditions": [{"type": "FileSystemResizePending", "status": "True"}]}}),
    );
    assert_eq!(code, 200);

    // Tokens: only for the ServiceAccount of a pod on the node.
    let body = json!({"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "consumer", "uid": consumer["metadata"]["uid"]}}});
    let (code, tr) = node.post(
        &format!("{}/serviceaccounts/runner/token", ns),
        body.clone(),
    );
    assert_eq!(code, 201, "{}", tr);
    let (code, st) = node.post(&format!("{}/serviceaccounts/default/token", ns), body);
    assert_eq!(code, 403);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .contains("cannot create resource \"serviceaccounts/token\""));

    // The pod goes: so does the access.
    admin.delete(
        &format!("{}/pods/consumer", ns),
        Some(json!({"gracePeriodSeconds": 0})),
    );
    assert_eq!(node.get(&format!("{}/secrets/used", ns)).0, 403);
}
