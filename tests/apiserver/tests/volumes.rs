//! The API a kubelet's volume support meets: ServiceAccount admission (the
//! kube-api-access projected volume) and TokenRequest.

mod support;

use base64::Engine;
use serde_json::{json, Value};
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

#[test]
fn service_account_admission() {
    let d = spawn("sa-admission", &[]);
    let c = Client::admin(&d);
    let base = "/api/v1/namespaces/default/pods";

    let mut p = pod("p1", None);
    p["spec"]["initContainers"] = json!([{"name": "init", "image": "busybox"}]);
    p["spec"]["containers"][1]["volumeMounts"] =
        json!([{"name": "own", "mountPath": SA_PATH}]);
    p["spec"]["volumes"] = json!([{"name": "own", "emptyDir": {}}]);
    let (code, p1) = c.post(base, p);
    assert_eq!(code, 201, "{}", p1);
    assert_eq!(p1["spec"]["serviceAccountName"], "default");
    assert_eq!(p1["spec"]["serviceAccount"], "default");
    let vols = p1["spec"]["volumes"].as_array().unwrap();
    assert_eq!(vols.len(), 2);
    let vname = vols[1]["name"].as_str().unwrap().to_string();
    assert!(vname.starts_with("kube-api-access-") && vname.len() == 21, "{}", vname);
    assert!(vname[16..].bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    assert_eq!(vols[1], json!({"name": vname, "projected": expected_source()}));
    let mount = json!({"name": vname, "readOnly": true, "mountPath": SA_PATH});
    assert_eq!(p1["spec"]["initContainers"][0]["volumeMounts"], json!([mount]));
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
    assert!(st["message"].as_str().unwrap().starts_with("pods \"gen-\" is forbidden"));

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
    assert_eq!((code, st["message"].as_str().unwrap()), (403, "pods \"m2\" is forbidden: a mirror pod may not reference service accounts"));
    let mut p = mirror("m3");
    p["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "x"}}]);
    let (code, st) = c.post(base, p);
    assert_eq!((code, st["message"].as_str().unwrap()), (403, "pods \"m3\" is forbidden: a mirror pod may not reference secrets"));
    let mut p = mirror("m4");
    p["spec"]["volumes"] = json!([{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]);
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
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease", "fresh"] {
        let (code, _) = c.get(&format!("/api/v1/namespaces/{}/serviceaccounts/default", ns));
        assert_eq!(code, 200, "{}", ns);
        let (code, cm) = c.get(&format!("/api/v1/namespaces/{}/configmaps/kube-root-ca.crt", ns));
        assert_eq!(code, 200, "{}", ns);
        assert_eq!(cm["data"]["ca.crt"].as_str().unwrap().trim(), ca.trim());
    }
    let (code, v) = c.post("/api/v1/namespaces/fresh/pods", pod("f", None));
    assert_eq!(code, 201);
    assert_eq!(v["spec"]["volumes"][0]["projected"], expected_source());
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
    assert_eq!(tr["spec"]["audiences"], json!(["https://kubernetes.default.svc.cluster.local"]));
    let cl = claims(tr["status"]["token"].as_str().unwrap());
    assert_eq!(cl["sub"], "system:serviceaccount:default:default");
    assert_eq!(cl["aud"], json!(["https://kubernetes.default.svc.cluster.local"]));
    assert_eq!(cl["kubernetes.io"]["namespace"], "default");
    assert_eq!(cl["kubernetes.io"]["serviceaccount"], json!({"name": "default", "uid": sa["metadata"]["uid"]}));
    assert_eq!(cl["kubernetes.io"]["pod"], json!({"name": "tp", "uid": uid}));
    assert_eq!(cl["kubernetes.io"]["node"], json!({"name": "node-a", "uid": node["metadata"]["uid"]}));
    let exp = cl["exp"].as_i64().unwrap();
    assert!((t0 + 3600..=now() + 3600).contains(&exp));
    assert!(cl.get("warnafter").is_none() && cl["kubernetes.io"].get("warnafter").is_none());
    assert!(tr["status"]["expirationTimestamp"].as_str().unwrap().ends_with('Z'));

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
    let (_, s) = c.post("/api/v1/namespaces/default/secrets", json!({"metadata": {"name": "bind-me"}}));
    let (code, tr) = c.post(url, json!({"spec": {"boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": "bind-me", "uid": s["metadata"]["uid"]}}}));
    assert_eq!(code, 201);
    assert_eq!(claims(tr["status"]["token"].as_str().unwrap())["kubernetes.io"]["secret"]["name"], "bind-me");
    let (code, tr) = c.post(url, json!({"spec": {"boundObjectRef": {"kind": "Node", "apiVersion": "v1", "name": "node-a"}}}));
    assert_eq!(code, 201);
    assert_eq!(claims(tr["status"]["token"].as_str().unwrap())["kubernetes.io"]["node"]["uid"], node["metadata"]["uid"]);

    // Errors, as upstream answers them.
    let bound = |kind: &str, name: &str, uid: &str| {
        json!({"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": kind, "name": name, "uid": uid}}})
    };
    let (code, st) = c.post(url, bound("Pod", "tp", "0000"));
    assert_eq!(code, 409, "{}", st);
    assert_eq!(st["reason"], "Conflict");
    assert_eq!(st["message"], "Operation cannot be fulfilled on Pod \"tp\": the UID in the bound object reference (0000) does not match the UID in record. The object might have been deleted and then recreated");
    let (code, st) = c.post(url, bound("Pod", "nope", ""));
    assert_eq!((code, st["message"].as_str().unwrap()), (404, "pods \"nope\" not found"));
    let (code, st) = c.post(url, bound("ConfigMap", "kube-root-ca.crt", ""));
    assert_eq!((code, st["message"].as_str().unwrap()), (400, "cannot bind token to object of type /v1, Kind=ConfigMap"));
    let (code, st) = c.post(url, json!({"spec": {"expirationSeconds": 599}}));
    assert_eq!(code, 422);
    assert_eq!(st["message"], "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes");
    let (code, st) = c.post("/api/v1/namespaces/default/serviceaccounts/ghost/token", json!({}));
    assert_eq!((code, st["message"].as_str().unwrap()), (404, "serviceaccounts \"ghost\" not found"));
    c.post("/api/v1/namespaces/default/serviceaccounts", json!({"metadata": {"name": "other"}}));
    let (code, st) = c.post("/api/v1/namespaces/default/serviceaccounts/other/token", bound("Pod", "tp", &uid));
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
    let (_, mine) = admin.post("/api/v1/namespaces/default/pods", pod("mine", Some("node-a")));
    let (_, theirs) = admin.post("/api/v1/namespaces/default/pods", pod("theirs", Some("node-b")));
    let url = "/api/v1/namespaces/default/serviceaccounts/default/token";
    let bound = |p: &Value| json!({"spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
        "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}}});
    let (code, st) = kubelet.post(url, json!({"spec": {}}));
    assert_eq!(code, 403);
    assert_eq!(st["message"], "serviceaccounts \"default\" is forbidden: node requested token not bound to a pod");
    let (code, st) = kubelet.post(url, bound(&theirs));
    assert_eq!(code, 403);
    assert!(st["message"].as_str().unwrap().ends_with("node requested token bound to a pod scheduled on a different node"));
    let (code, tr) = kubelet.post(url, bound(&mine));
    assert_eq!(code, 201, "{}", tr);
    let (_, log) = admin.get("/__double/tokenrequests");
    assert_eq!((log["count"].as_u64(), log["issued"].as_u64()), (Some(3), Some(1)));
    assert_eq!(log["items"][2]["user"], "system:node:node-a");
}
