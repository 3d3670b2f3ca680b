//! The pods/ephemeralcontainers subresource of the double, over HTTP, as
//! kubectl debug uses it.

mod support;

use serde_json::json;
use support::*;

const SMP: &str = "application/strategic-merge-patch+json";

#[test]
fn ephemeral_containers_subresource() {
    let d = spawn("ephemeral", &[]);
    let c = Client::admin(&d);
    let pods = "/api/v1/namespaces/default/pods";
    let (code, p) = c.post(pods, pod("p", Some("node-a")));
    assert_eq!(code, 201, "{p}");
    let sub = format!("{pods}/p/ephemeralcontainers");

    // GET answers with the pod.
    let (code, got) = c.get(&sub);
    assert_eq!((code, got["kind"].as_str()), (200, Some("Pod")));

    // kubectl debug: a strategic-merge patch adding one; anything else in
    // the patch is dropped, and the spec change bumps the generation.
    let debugger = json!({"name": "dbg", "image": "busybox:1.36", "targetContainerName": "c",
                          "stdin": true, "tty": true});
    let (code, p2) = c.patch(
        &sub,
        SMP,
        json!({"metadata": {"labels": {"x": "y"}},
               "spec": {"ephemeralContainers": [debugger], "activeDeadlineSeconds": 5}}),
    );
    assert_eq!(code, 200, "{p2}");
    let ec = &p2["spec"]["ephemeralContainers"][0];
    assert_eq!(ec["name"], "dbg");
    assert_eq!(ec["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(ec["imagePullPolicy"], "IfNotPresent");
    assert!(p2["spec"].get("activeDeadlineSeconds").is_none());
    assert_eq!(p2["metadata"]["labels"], p["metadata"]["labels"]);
    assert_eq!(p2["metadata"]["generation"], 2);

    // A second one merges in by name.
    let (code, p3) = c.patch(
        &sub,
        SMP,
        json!({"spec": {"ephemeralContainers": [{"name": "dbg2", "image": "busybox:1.36"}]}}),
    );
    assert_eq!(code, 200, "{p3}");
    assert_eq!(
        p3["spec"]["ephemeralContainers"].as_array().unwrap().len(),
        2
    );

    // Removing or changing one is forbidden; so are ports and unknown targets.
    let (code, e) = c.patch(
        &sub,
        "application/merge-patch+json",
        json!({"spec": {"ephemeralContainers": [{"name": "dbg2", "image": "busybox:1.36"}]}}),
    );
    assert_eq!(code, 422, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("may not be removed"),
        "{e}"
    );
    let mut changed = p3.clone();
    changed["spec"]["ephemeralContainers"][0]["image"] = json!("alpine");
    let (code, e) = c.put(&sub, changed);
    assert_eq!(code, 422, "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("may not be changed"),
        "{e}"
    );
    let (code, e) = c.patch(
        &sub,
        SMP,
        json!({"spec": {"ephemeralContainers": [{"name": "bad", "image": "b",
            "targetContainerName": "nope", "ports": [{"containerPort": 80}]}]}}),
    );
    assert_eq!(code, 422, "{e}");
    // Without `$setElementOrder` a strategic merge puts the new element
    // first (strategicpatch normalizeElementOrder), so it is [0].
    let causes: Vec<&str> = e["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        causes,
        [
            "spec.ephemeralContainers[0].targetContainerName",
            "spec.ephemeralContainers[0].ports"
        ]
    );

    // The pod itself cannot take them.
    let mut direct = p3.clone();
    direct["spec"]["ephemeralContainers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "dbg3", "image": "busybox:1.36"}));
    let (code, _) = c.put(&format!("{pods}/p"), direct);
    assert_eq!(code, 422);

    // PUT of the whole pod through the subresource adds one.
    let (_, cur) = c.get(&sub);
    let mut put = cur.clone();
    put["spec"]["ephemeralContainers"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "dbg3", "image": "busybox:1.36"}));
    let (code, p4) = c.put(&sub, put);
    assert_eq!(code, 200, "{p4}");
    assert_eq!(
        p4["spec"]["ephemeralContainers"].as_array().unwrap().len(),
        3
    );
    assert_eq!(c.delete(&sub, None).0, 405);
}
