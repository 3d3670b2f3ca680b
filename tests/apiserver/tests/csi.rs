//! The API a kubelet's CSI support meets: its CSINode (create as the
//! upstream kubelet did against a real v1.22.3 server, update, 409 on a
//! stale resourceVersion, validation), CSIDrivers, VolumeAttachments, the
//! Node authorizer's and NodeRestriction's rules for them, and the
//! attach/detach controller stand-in.

mod golden;
mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::*;

const CSINODES: &str = "/apis/storage.k8s.io/v1/csinodes";
const DRIVERS: &str = "/apis/storage.k8s.io/v1/csidrivers";
const VAS: &str = "/apis/storage.k8s.io/v1/volumeattachments";
const UPSTREAM_NODE: &str = "fidelity-node";

fn wait_for(c: &Client, path: &str, f: impl Fn(u16, &Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let (code, v) = c.get(path);
        if f(code, &v) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting on {}: {} {}",
            path,
            code,
            v
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The kubelet's Node, as it registers (with the attach/detach annotation).
fn register_node(c: &Client, name: &str) -> Value {
    let (code, n) = c.post(
        "/api/v1/nodes",
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
            "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
    );
    assert_eq!(code, 201, "{}", n);
    n
}

/// `v` with every string equal to the upstream capture's node name
/// replaced by `node`.
fn renamed(v: &Value, node: &str) -> Value {
    match v {
        Value::String(s) => Value::String(s.replace(UPSTREAM_NODE, node)),
        Value::Array(a) => Value::Array(a.iter().map(|x| renamed(x, node)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), renamed(x, node)))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn strip_assigned(v: &Value) -> Value {
    let mut v = v.clone();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
    ] {
        golden::remove_path(&mut v, &["metadata", k]);
    }
    v
}

#[test]
fn csinode_registration_answers_as_recorded() {
    let d = spawn(
        "csinode-fidelity",
        &["--node-authorizer", "--node-restriction"],
    );
    let node = Client::kubelet(&d);
    let n = register_node(&node, "node-a");
    let events: Vec<Value> = golden::audit("upstream-v1.22/audit-node.jsonl")
        .into_iter()
        .filter(|e| e["objectRef"]["resource"] == "csinodes")
        .collect();
    // GET before it exists: 404 (the authorizer lets a node read its own).
    let get = events.iter().find(|e| e["verb"] == "get").unwrap();
    let (code, st) = node.get(&format!("{}/node-a", CSINODES));
    assert_eq!(code, 404);
    assert_eq!(st, renamed(&get["responseObject"], "node-a"));
    // The create, as the kubelet sent it (its Node's uid in the owner reference).
    let create = events.iter().find(|e| e["verb"] == "create").unwrap();
    let mut body = renamed(&create["requestObject"], "node-a");
    body["metadata"]["ownerReferences"][0]["uid"] = n["metadata"]["uid"].clone();
    let (code, got) = node.post(CSINODES, body);
    assert_eq!(code, 201, "{}", got);
    let mut want = strip_assigned(&renamed(&create["responseObject"], "node-a"));
    want["metadata"]["ownerReferences"][0]["uid"] = n["metadata"]["uid"].clone();
    let d = golden::diff(&want, &strip_assigned(&got));
    assert!(d.is_empty(), "{}", d.join("\n"));
    assert_eq!(got["spec"], json!({"drivers": null}));
}

#[test]
fn csinode_drivers_update_and_conflict() {
    let d = spawn(
        "csinode-update",
        &["--node-authorizer", "--node-restriction"],
    );
    let node = Client::kubelet(&d);
    let path = format!("{}/node-a", CSINODES);
    let (code, created) = node.post(
        CSINODES,
        json!({"metadata": {"name": "node-a"}, "spec": {"drivers": []}}),
    );
    assert_eq!(code, 201, "{}", created);
    assert_eq!(created["spec"]["drivers"], Value::Null);

    // Add a driver (GET + PUT, as the kubelet's nodeinfomanager does).
    let mut cur = node.get(&path).1;
    cur["spec"]["drivers"] = json!([{"name": "hostpath.csi.k8s.io", "nodeID": "node-a",
        "topologyKeys": [], "allocatable": {"count": 10}}]);
    let (code, updated) = node.put(&path, cur.clone());
    assert_eq!(code, 200, "{}", updated);
    assert_eq!(
        updated["spec"]["drivers"],
        json!([{"name": "hostpath.csi.k8s.io", "nodeID": "node-a", "topologyKeys": null,
            "allocatable": {"count": 10}}])
    );

    // The same PUT again: its resourceVersion is stale now.
    let (code, st) = node.put(&path, cur);
    assert_eq!(code, 409);
    assert_eq!(
        st,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Operation cannot be fulfilled on csinodes.storage.k8s.io \"node-a\": the object has been modified; please apply your changes to the latest version and try again",
            "reason": "Conflict", "details": {"name": "node-a", "group": "storage.k8s.io", "kind": "csinodes"},
            "code": 409})
    );

    // A registered driver's entry cannot change in place.
    let mut changed = updated.clone();
    changed["spec"]["drivers"][0]["nodeID"] = json!("other");
    let (code, st) = node.put(&path, changed);
    assert_eq!(code, 422, "{}", st);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .starts_with("CSINode.storage.k8s.io \"node-a\" is invalid: CSINodeDriver: Invalid value: storage.CSINodeDriver{Name:\"hostpath.csi.k8s.io\", NodeID:\"other\""));
    assert_eq!(st["details"]["causes"][0]["field"], "CSINodeDriver");

    // Invalid entries.
    let mut bad = updated.clone();
    bad["spec"]["drivers"] = json!([updated["spec"]["drivers"][0],
        {"name": "b.example.com", "nodeID": "", "topologyKeys": ["k", "k"]}]);
    let (code, st) = node.put(&path, bad);
    assert_eq!(code, 422);
    assert_eq!(
        st["message"],
        "CSINode.storage.k8s.io \"node-a\" is invalid: [spec.drivers[1].nodeID: Required value, spec.drivers[1]: Duplicate value: \"k\"]"
    );

    // Removing the driver (a strategic merge patch by name) leaves null.
    let (code, v) = node.patch(
        &path,
        "application/strategic-merge-patch+json",
        json!({"spec": {"drivers": [{"name": "hostpath.csi.k8s.io", "$patch": "delete"}]}}),
    );
    assert_eq!(code, 200, "{}", v);
    assert_eq!(v["spec"]["drivers"], Value::Null);
}

#[test]
fn csinode_authorization_and_node_restriction() {
    let d = spawn(
        "csinode-authz",
        &["--node-authorizer", "--node-restriction"],
    );
    let node = Client::kubelet(&d);
    let admin = Client::admin(&d);
    // Another node's CSINode: the authorizer refuses by URL...
    let (code, _) = admin.post(
        CSINODES,
        json!({"metadata": {"name": "node-b"}, "spec": {}}),
    );
    assert_eq!(code, 201);
    let (code, st) = node.get(&format!("{}/node-b", CSINODES));
    assert_eq!(code, 403);
    assert_eq!(st["message"], "csinodes.storage.k8s.io \"node-b\" is forbidden: User \"system:node:node-a\" cannot get resource \"csinodes\" in API group \"storage.k8s.io\" at the cluster scope: can only access CSINode with the same name as the requesting node");
    assert_eq!(node.delete(&format!("{}/node-b", CSINODES), None).0, 403);
    // ...NodeRestriction by the object on create.
    let (code, st) = node.post(
        CSINODES,
        json!({"metadata": {"name": "node-c"}, "spec": {}}),
    );
    assert_eq!(code, 403);
    assert_eq!(
        st,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "csinodes.storage.k8s.io \"node-c\" is forbidden: can only access CSINode with the same name as the requesting node",
            "reason": "Forbidden", "details": {"name": "node-c", "group": "storage.k8s.io", "kind": "csinodes"},
            "code": 403})
    );
    // No list or watch.
    let (code, st) = node.get(CSINODES);
    assert_eq!(code, 403);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .ends_with("can only get, create, update, patch, or delete a CSINode"));
    // Its own: everything else.
    assert_eq!(
        node.post(
            CSINODES,
            json!({"metadata": {"name": "node-a"}, "spec": {}})
        )
        .0,
        201
    );
    assert_eq!(node.delete(&format!("{}/node-a", CSINODES), None).0, 200);

    // CSIDrivers: read-only for nodes.
    let (code, drv) = admin.post(
        DRIVERS,
        json!({"metadata": {"name": "hostpath.csi.k8s.io"}, "spec": {}}),
    );
    assert_eq!(code, 201, "{}", drv);
    assert_eq!(drv["spec"]["attachRequired"], true);
    assert_eq!(drv["spec"]["volumeLifecycleModes"], json!(["Persistent"]));
    let (code, l) = node.get(DRIVERS);
    assert_eq!((code, l["items"].as_array().map(Vec::len)), (200, Some(1)));
    assert_eq!(node.get(&format!("{}/hostpath.csi.k8s.io", DRIVERS)).0, 200);
    let (code, st) = node.post(DRIVERS, json!({"metadata": {"name": "x"}, "spec": {}}));
    assert_eq!(code, 403);
    assert_eq!(st["message"], "csidrivers.storage.k8s.io is forbidden: User \"system:node:node-a\" cannot create resource \"csidrivers\" in API group \"storage.k8s.io\" at the cluster scope");

    // Node labels: CSI topology keys are fine, kubernetes.io ones the kubelet does not own are not.
    register_node(&node, "node-a");
    let (code, v) = node.patch(
        "/api/v1/nodes/node-a",
        "application/strategic-merge-patch+json",
        json!({"metadata": {"labels": {"topology.hostpath.csi/node": "node-a"},
            "annotations": {"csi.volume.kubernetes.io/nodeid": "{\"hostpath.csi.k8s.io\":\"node-a\"}"}}}),
    );
    assert_eq!(code, 200, "{}", v);
    let (code, st) = node.patch(
        "/api/v1/nodes/node-a",
        "application/strategic-merge-patch+json",
        json!({"metadata": {"labels": {"node-role.kubernetes.io/worker": ""}}}),
    );
    assert_eq!(code, 403);
    assert_eq!(
        st["message"],
        "nodes \"node-a\" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/worker"
    );
}

#[test]
fn csinode_node_id_length_by_release() {
    let long = |n: usize| {
        json!({"metadata": {"name": "node-a"}, "spec": {"drivers": [
            {"name": "d.example.com", "nodeID": "x".repeat(n)}]}})
    };
    let d = spawn("csinode-1-22", &["--emulate-version", "1.22"]);
    let admin = Client::admin(&d);
    let (code, st) = admin.post(CSINODES, long(193));
    assert_eq!(code, 422);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .ends_with("must be 192 characters or less"));
    assert_eq!(admin.post(CSINODES, long(192)).0, 201);
    drop(d);
    let d = spawn("csinode-1-34", &[]);
    let admin = Client::admin(&d);
    assert_eq!(admin.post(CSINODES, long(256)).0, 201);
    let mut other = long(257);
    other["metadata"]["name"] = json!("node-b");
    assert_eq!(admin.post(CSINODES, other).0, 422);
}

fn va(name: &str, node: &str, pv: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"attacher": "hostpath.csi.k8s.io",
        "nodeName": node, "source": {"persistentVolumeName": pv}}})
}

#[test]
fn volume_attachments() {
    let d = spawn("volumeattachments", &["--node-authorizer"]);
    let admin = Client::admin(&d);
    let node = Client::kubelet(&d);

    // Discovery, as a v1.22 server lists the resource.
    let (_, disc) = admin.get("/apis/storage.k8s.io/v1");
    let names: Vec<&str> = disc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(names.contains(&"volumeattachments") && names.contains(&"volumeattachments/status"));
    let st = disc["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "volumeattachments/status")
        .unwrap();
    assert_eq!(st["verbs"], json!(["get", "patch", "update"]));
    assert_eq!(st["namespaced"], false);

    // The required fields.
    let (code, st) = admin.post(VAS, json!({"metadata": {"name": "va"}, "spec": {}}));
    assert_eq!(code, 422);
    assert_eq!(
        st["message"],
        format!("VolumeAttachment.storage.k8s.io \"va\" is invalid: [spec.attacher: Required value, spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName, spec.nodeName: Invalid value: \"\": {m}, spec.attacher: Invalid value: \"\": {m}]",
            m = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    );
    assert_eq!(st["details"]["causes"].as_array().unwrap().len(), 5);

    // A status sent on create is dropped; the attacher sets it through /status.
    let mine = "csi-5a70c5de395ccad5e79daeb27c7c4f2634b675e6e1bb2a397999a016143bc9fb";
    let mut body = va(mine, "node-a", "pv1");
    body["status"] = json!({"attached": true});
    let (code, v) = admin.post(VAS, body);
    assert_eq!(code, 201, "{}", v);
    assert_eq!(v["status"], json!({"attached": false}));
    assert_eq!(v["spec"]["source"], json!({"persistentVolumeName": "pv1"}));
    assert_eq!(admin.post(VAS, va("theirs", "node-b", "pv2")).0, 201);
    let (code, v) = admin.patch(
        &format!("{}/{}/status", VAS, mine),
        "application/merge-patch+json",
        json!({"status": {"attached": true, "attachmentMetadata": {"devicePath": "/dev/xvdb"}}}),
    );
    assert_eq!(code, 200, "{}", v);
    // The main resource ignores status; its spec is immutable.
    let mut put = v.clone();
    put["status"] = json!({"attached": false});
    let (code, same) = admin.put(&format!("{}/{}", VAS, mine), put.clone());
    assert_eq!((code, &same["status"]["attached"]), (200, &json!(true)));
    put["spec"]["nodeName"] = json!("node-b");
    let (code, st) = admin.put(&format!("{}/{}", VAS, mine), put);
    assert_eq!(code, 422);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .ends_with("NodeName:\"node-b\"}: field is immutable"));
    let (code, v) = admin.patch(
        &format!("{}/theirs/status", VAS),
        "application/merge-patch+json",
        json!({"status": {"attachError": {"message": "rpc error: boom"}}}),
    );
    assert_eq!(code, 200);
    assert_eq!(
        v["status"],
        json!({"attached": false, "attachError": {"message": "rpc error: boom", "time": null}})
    );

    // The kubelet reads its own attachment, nothing else, and only by GET.
    let (code, v) = node.get(&format!("{}/{}", VAS, mine));
    assert_eq!(code, 200, "{}", v);
    assert_eq!(
        v["status"],
        json!({"attached": true, "attachmentMetadata": {"devicePath": "/dev/xvdb"}})
    );
    for p in [format!("{}/theirs", VAS), format!("{}/missing", VAS)] {
        let (code, st) = node.get(&p);
        assert_eq!(code, 403, "{}", p);
        assert!(st["message"]
            .as_str()
            .unwrap()
            .ends_with("no relationship found between node 'node-a' and this object"));
    }
    let (code, st) = node.get(&format!(
        "{}?watch=1&fieldSelector=metadata.name%3D{}",
        VAS, mine
    ));
    assert_eq!(code, 403);
    assert!(st["message"]
        .as_str()
        .unwrap()
        .ends_with("can only get individual resources of this type"));
    // The admin watches them like any other kind.
    let evs = admin.watch(&format!("{}?watch=1&timeoutSeconds=1", VAS), 2);
    assert_eq!(evs.len(), 2);
}

/// A CSI PV, a claim bound to it and the CSIDriver (when `attach` is Some).
fn csi_volume(admin: &Client, name: &str, handle: &str, annotations: Value) {
    let (code, v) = admin.post(
        "/api/v1/persistentvolumes",
        json!({"metadata": {"name": name, "annotations": annotations}, "spec": {
            "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "hostpath.csi.k8s.io", "volumeHandle": handle}}}),
    );
    assert_eq!(code, 201, "{}", v);
    let (code, v) = admin.post(
        "/api/v1/namespaces/default/persistentvolumeclaims",
        json!({"metadata": {"name": name}, "spec": {"volumeName": name,
            "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    assert_eq!(code, 201, "{}", v);
    wait_for(
        admin,
        &format!("/api/v1/namespaces/default/persistentvolumeclaims/{}", name),
        |_, v| v["status"]["phase"] == "Bound",
    );
}

fn pod_with_claims(name: &str, claims: &[&str]) -> Value {
    let mut p = pod(name, Some("node-a"));
    p["spec"]["volumes"] = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    p
}

fn attachment(handle: &str) -> String {
    use ring::digest::{digest, SHA256};
    let d = digest(
        &SHA256,
        format!("{}hostpath.csi.k8s.ionode-a", handle).as_bytes(),
    );
    let hex: String = d.as_ref().iter().map(|b| format!("{:02x}", b)).collect();
    format!("{}/csi-{}", VAS, hex)
}

#[test]
fn attach_stand_in_lifecycle() {
    let d = spawn("attach", &["--node-authorizer", "--node-restriction"]);
    let admin = Client::admin(&d);
    let node = Client::kubelet(&d);
    register_node(&node, "node-a");
    csi_volume(&admin, "vol", "h1", json!({}));
    csi_volume(
        &admin,
        "stuck",
        "h2",
        json!({"test.rkubelet.io/never-attach": "true"}),
    );
    csi_volume(
        &admin,
        "broken",
        "h3",
        json!({"test.rkubelet.io/attach-error": "rpc error: no disk"}),
    );

    // Off by default.
    let (code, s) = admin.get("/__double/attach");
    assert_eq!((code, &s["enabled"]), (200, &json!(false)));
    let (code, s) = admin.post("/__double/attach", json!({"enabled": true}));
    assert_eq!((code, &s["enabled"]), (200, &json!(true)));

    let (code, p) = admin.post(
        "/api/v1/namespaces/default/pods",
        pod_with_claims("user", &["vol", "stuck", "broken"]),
    );
    assert_eq!(code, 201, "{}", p);

    // Attached: the VolumeAttachment (readable by the kubelet), then the node's status.
    let va = wait_for(&node, &attachment("h1"), |c, v| {
        c == 200 && v["status"]["attached"] == true
    });
    assert_eq!(
        va["spec"],
        json!({"attacher": "hostpath.csi.k8s.io", "nodeName": "node-a",
            "source": {"persistentVolumeName": "vol"}})
    );
    let unique = "kubernetes.io/csi/hostpath.csi.k8s.io^h1";
    wait_for(&node, "/api/v1/nodes/node-a", |_, n| {
        n["status"]["volumesAttached"] == json!([{"name": unique, "devicePath": ""}])
    });
    let broken = wait_for(&node, &attachment("h3"), |c, v| {
        c == 200 && v["status"]["attachError"]["message"] == "rpc error: no disk"
    });
    assert_eq!(broken["status"]["attached"], false);
    let (code, stuck) = node.get(&attachment("h2"));
    assert_eq!(code, 200, "{}", stuck);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        node.get(&attachment("h2")).1["status"],
        json!({"attached": false})
    );
    assert_eq!(
        node.get("/api/v1/nodes/node-a").1["status"]["volumesAttached"],
        json!([{"name": unique, "devicePath": ""}])
    );

    // The kubelet reports the volume in use; the pod goes; it stays attached.
    let (code, v) = node.patch(
        "/api/v1/nodes/node-a/status",
        "application/strategic-merge-patch+json",
        json!({"status": {"volumesInUse": [unique]}}),
    );
    assert_eq!(code, 200, "{}", v);
    admin.delete(
        "/api/v1/namespaces/default/pods/user",
        Some(json!({"gracePeriodSeconds": 0})),
    );
    wait_for(&admin, &attachment("h2"), |c, _| c == 404);
    wait_for(&admin, &attachment("h3"), |c, _| c == 404);
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(admin.get(&attachment("h1")).0, 200);

    // Unmounted: detached (first the node's status, then the attachment).
    node.patch(
        "/api/v1/nodes/node-a/status",
        "application/strategic-merge-patch+json",
        json!({"status": {"volumesInUse": null}}),
    );
    wait_for(&admin, &attachment("h1"), |c, _| c == 404);
    let n = node.get("/api/v1/nodes/node-a").1;
    assert!(n["status"].get("volumesAttached").is_none(), "{}", n);

    // A driver that needs no attach gets none.
    let (code, _) = admin.post(
        DRIVERS,
        json!({"metadata": {"name": "hostpath.csi.k8s.io"}, "spec": {"attachRequired": false}}),
    );
    assert_eq!(code, 201);
    admin.post(
        "/api/v1/namespaces/default/pods",
        pod_with_claims("again", &["vol"]),
    );
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(admin.get(&attachment("h1")).0, 404);
    let (_, s) = admin.get("/__double/attach");
    assert_eq!(s["attachments"], json!({}));
}
