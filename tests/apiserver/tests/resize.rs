//! In-place pod resize over HTTP: the `pods/resize` subresource as
//! `kubectl patch --subresource resize` uses it, per emulated release, and
//! `--feature-gates InPlacePodVerticalScaling=true` for the alpha releases.

mod support;

use serde_json::{json, Value};
use support::*;

const SMP: &str = "application/strategic-merge-patch+json";
const PODS: &str = "/api/v1/namespaces/default/pods";

fn at(minor: u32, gates: Option<&str>, name: &str) -> Double {
    let version = format!("1.{minor}");
    let mut args = vec!["--emulate-version", version.as_str()];
    if let Some(g) = gates {
        args.extend(["--feature-gates", g]);
    }
    spawn(name, &args)
}

/// A bound pod whose container `c` is Burstable, with a running status
/// that reports `resources` (or not) as a kubelet would.
fn running_pod(c: &Client, with_status_resources: bool) -> Value {
    let mut p = pod("p", Some("node-a"));
    p["spec"]["containers"] = json!([{"name": "c", "image": "busybox:1.36",
        "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                      "limits": {"cpu": "200m", "memory": "64Mi"}}}]);
    let (code, created) = c.post(PODS, p);
    assert_eq!(code, 201, "{created}");
    let mut cs = json!({"name": "c", "image": "busybox:1.36", "imageID": "", "ready": true,
        "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}});
    if with_status_resources {
        cs["resources"] = created["spec"]["containers"][0]["resources"].clone();
    }
    let status = json!({"status": {"phase": "Running", "containerStatuses": [cs]}});
    let (code, st) = c.patch(&format!("{PODS}/p/status"), SMP, status);
    assert_eq!(code, 200, "{st}");
    st
}

fn cpu_patch(cpu: &str) -> Value {
    json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": cpu}}}]}})
}

fn message(v: &Value) -> &str {
    v["message"].as_str().unwrap_or("")
}

#[test]
fn resize_subresource_at_the_default_release() {
    let d = spawn("resize-134", &[]);
    let c = Client::admin(&d);
    let pod = running_pod(&c, true);
    let sub = format!("{PODS}/p/resize");

    // As the v1.34 capture's kubectl patch --subresource resize.
    let (code, got) = c.patch(&sub, SMP, json!({"spec": {"containers": [{"name": "c", "resources":
        {"requests": {"cpu": "150m", "memory": "48Mi"}, "limits": {"cpu": "300m", "memory": "96Mi"}}}]}}));
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["kind"], "Pod");
    assert_eq!(got["metadata"]["generation"], 2);
    assert_eq!(
        got["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "96Mi"
    );
    assert_eq!(got["status"], pod["status"]);

    let (code, read) = c.get(&sub);
    assert_eq!((code, &read["metadata"]["generation"]), (200, &json!(2)));

    // A stale resourceVersion is a conflict.
    let mut stale = read.clone();
    stale["metadata"]["resourceVersion"] = pod["metadata"]["resourceVersion"].clone();
    let (code, e) = c.put(&sub, stale);
    assert_eq!((code, e["reason"].as_str()), (409, Some("Conflict")), "{e}");

    // PUT of the whole pod changes the resources only.
    let mut put = read.clone();
    put["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("400m");
    put["spec"]["containers"][0]["image"] = json!("nginx");
    let (code, got) = c.put(&sub, put);
    assert_eq!(code, 200, "{got}");
    assert_eq!(
        got["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "400m"
    );
    assert_eq!(got["spec"]["containers"][0]["image"], "busybox:1.36");

    let (code, e) = c.patch(&format!("{PODS}/nope/resize"), SMP, cpu_patch("1"));
    assert_eq!((code, message(&e)), (404, "pods \"nope\" not found"));
    assert_eq!(c.delete(&sub, None).0, 405);

    let (_, list) = c.get("/api/v1");
    let entry = list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == "pods/resize")
        .cloned()
        .unwrap_or_default();
    assert_eq!(entry["verbs"], json!(["get", "patch", "update"]));
}

#[test]
fn a_node_without_resize_support_is_refused() {
    let d = spawn("resize-unsupported", &[]);
    let c = Client::admin(&d);
    running_pod(&c, false);
    let (code, e) = c.patch(&format!("{PODS}/p/resize"), SMP, cpu_patch("250m"));
    assert_eq!(code, 422, "{e}");
    assert_eq!(
        message(&e),
        "Pod \"p\" is invalid: spec: Forbidden: Pod running on node without support for resize"
    );
    assert_eq!(e["details"]["causes"][0]["reason"], "FieldValueForbidden");
}

#[test]
fn release_1_32_serves_resize_only_with_the_gate_on() {
    let d = at(32, None, "resize-132-off");
    let c = Client::admin(&d);
    running_pod(&c, true);
    let (code, _) = c.patch(&format!("{PODS}/p/resize"), SMP, cpu_patch("250m"));
    assert_eq!(code, 404, "not registered with the alpha gate off");

    let d = at(32, Some("InPlacePodVerticalScaling=true"), "resize-132-on");
    let c = Client::admin(&d);
    running_pod(&c, true);
    let (code, got) = c.patch(&format!("{PODS}/p/resize"), SMP, cpu_patch("250m"));
    assert_eq!(code, 200, "{got}");
    assert_eq!(got["status"]["resize"], "Proposed");
    assert!(got["metadata"].get("generation").is_none());
}

#[test]
fn release_1_27_resizes_through_a_plain_update_with_the_gate_on() {
    let d = at(27, Some("InPlacePodVerticalScaling=true"), "resize-127-on");
    let c = Client::admin(&d);
    running_pod(&c, true);
    let (code, _) = c.patch(&format!("{PODS}/p/resize"), SMP, cpu_patch("250m"));
    assert_eq!(code, 404, "no subresource before 1.32");
    let (code, got) = c.patch(&format!("{PODS}/p"), SMP, cpu_patch("250m"));
    assert_eq!(code, 200, "{got}");
    assert_eq!(
        got["spec"]["containers"][0]["resources"]["limits"]["cpu"],
        "250m"
    );
    assert_eq!(got["status"]["resize"], "Proposed");
    // The kubelet's status.resize is kept with the gate on.
    let (code, st) = c.patch(
        &format!("{PODS}/p/status"),
        SMP,
        json!({"status": {"resize": "InProgress"}}),
    );
    assert_eq!((code, &st["status"]["resize"]), (200, &json!("InProgress")));

    let d = at(27, None, "resize-127-off");
    let c = Client::admin(&d);
    running_pod(&c, true);
    let (code, e) = c.patch(&format!("{PODS}/p"), SMP, cpu_patch("250m"));
    assert_eq!(code, 422, "{e}");
    assert!(
        message(&e).contains("pod updates may not change fields"),
        "{e}"
    );
    let (_, st) = c.patch(
        &format!("{PODS}/p/status"),
        SMP,
        json!({"status": {"resize": "InProgress"}}),
    );
    assert!(
        st["status"].get("resize").is_none(),
        "dropped with the gate off"
    );
}

#[test]
fn feature_gates_the_release_lacks_are_refused() {
    let tmp = tmpdir("resize-badgate");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_apiserver-double"))
        .arg("--dir")
        .arg(tmp.path())
        .args([
            "--feature-gates",
            "InPlacePodVerticalScaling=true",
            "--emulate-version",
            "1.26",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unrecognized feature gate: InPlacePodVerticalScaling"),
        "{err}"
    );
}
