//! RuntimeClasses in the double: validation, list/watch (as the kubelet
//! reads them) and the RuntimeClass admission plugin on pod create.

mod support;

use serde_json::json;
use support::*;

const RCS: &str = "/apis/node.k8s.io/v1/runtimeclasses";

fn rc(name: &str, handler: &str) -> serde_json::Value {
    json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
           "metadata": {"name": name}, "handler": handler})
}

#[test]
fn runtime_classes_validate_list_watch_and_admit_pods() {
    let d = spawn("runtimeclass", &[]);
    let admin = Client::admin(&d);
    let (code, bad) = admin.post(RCS, rc("bad", "Not_A_Label"));
    assert_eq!(
        (code, bad["reason"].as_str()),
        (422, Some("Invalid")),
        "{bad}"
    );
    assert_eq!(bad["details"]["causes"][0]["field"], "handler");
    let (code, created) = admin.post(RCS, rc("test", "runc-test"));
    assert_eq!(code, 201, "{created}");
    let mut changed = created.clone();
    changed["handler"] = json!("other");
    let (code, imm) = admin.put(&format!("{RCS}/test"), changed);
    assert_eq!(code, 422, "{imm}");
    assert!(
        imm["message"]
            .as_str()
            .unwrap()
            .contains("field is immutable"),
        "{imm}"
    );

    // The node reads them: list with an empty field selector, then watch.
    let node = Client::kubelet(&d);
    let (code, list) = node.get(&format!("{RCS}?fieldSelector="));
    assert_eq!(code, 200, "{list}");
    assert_eq!(list["items"][0]["handler"], "runc-test");
    let from = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    admin.post(RCS, rc("kata", "kata-qemu"));
    let events = node.watch(&format!("{RCS}?watch=1&resourceVersion={from}"), 1);
    assert_eq!(events[0]["type"], "ADDED");
    assert_eq!(events[0]["object"]["handler"], "kata-qemu");

    // Pods naming a missing class are refused; an existing one's overhead
    // and scheduling are merged in.
    let mut p = pod("p1", Some("node-a"));
    p["spec"]["runtimeClassName"] = json!("missing");
    let (code, refused) = admin.post("/api/v1/namespaces/default/pods", p);
    assert_eq!(code, 403, "{refused}");
    assert_eq!(
        refused["message"],
        "pods \"p1\" is forbidden: pod rejected: RuntimeClass \"missing\" not found"
    );
    let mut with = rc("fat", "runc");
    with["overhead"] = json!({"podFixed": {"memory": "64Mi"}});
    with["scheduling"] = json!({"nodeSelector": {"sandbox": "yes"},
                                "tolerations": [{"key": "sandbox", "operator": "Exists"}]});
    assert_eq!(admin.post(RCS, with).0, 201);
    let mut p = pod("p2", Some("node-a"));
    p["spec"]["runtimeClassName"] = json!("fat");
    let (code, admitted) = admin.post("/api/v1/namespaces/default/pods", p);
    assert_eq!(code, 201, "{admitted}");
    assert_eq!(admitted["spec"]["overhead"]["memory"], "64Mi");
    assert_eq!(admitted["spec"]["nodeSelector"]["sandbox"], "yes");
    let mut p = pod("p3", Some("node-a"));
    p["spec"]["runtimeClassName"] = json!("fat");
    p["spec"]["nodeSelector"] = json!({"sandbox": "no"});
    let (code, conflict) = admin.post("/api/v1/namespaces/default/pods", p);
    assert_eq!(code, 403, "{conflict}");
    assert!(conflict["message"].as_str().unwrap().contains("conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; pod.spec.nodeSelector[sandbox] = no"));
}
