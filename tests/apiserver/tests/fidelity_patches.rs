//! PATCH replay: every PATCH a real kube-apiserver answered for a kubelet
//! (pods/status, nodes/status, events) is applied by the double's own patch
//! path, emulating that server's release, to the object as the server had
//! it just before, and the result must be what the server answered. The
//! captures: v1.22.3 with upstream's kubelet and with rkubelet, v1.32.13
//! with upstream's kubelet.
//!
//! The "before" object is the server's latest answer about that object in
//! the same log (every status PATCH in the three logs follows a GET of the
//! pod or node, but v1.32's first nodes/status PATCH, which follows the
//! Node's create; an event's first PATCH follows its create). Between the two,
//! only kube-controller-manager wrote (to Nodes, see TTL_ANNOTATION); the
//! harness's deletes show in the kubelet's next GET before its next PATCH.
//!
//! The kubelet sends every PATCH here as a strategic merge patch
//! (client-go's `types.StrategicMergePatchType`); the audit log does not
//! record the content type.

mod golden;

use apiserver_double::handlers::{patched_object, Route};
use apiserver_double::resources;
use apiserver_double::version::{fields, Version};
use golden::{Capture, RKUBELET_V1_22, UPSTREAM_V1_22, UPSTREAM_V1_32};
use serde_json::{json, Value};
use std::collections::HashMap;

const SMP: &str = "application/strategic-merge-patch+json";

/// Writes by kube-controller-manager that landed between a kubelet's GET
/// of its Node and its status PATCH, so the server's "before" had them
/// although the GET's answer did not: the TTL controller's annotation on a
/// new Node, and the node-lifecycle controller's removal of the
/// `not-ready` taint once the Node is Ready (a status PATCH cannot touch
/// spec, so the answer's spec is the server's).
const TTL_ANNOTATION: &str = "node.alpha.kubernetes.io/ttl";

/// Fields only the real server's storage assigns, left out of the
/// comparison: `metadata.resourceVersion` (a new etcd revision per write;
/// the double's store assigns it after this path) and
/// `metadata.managedFields` (server-side apply bookkeeping, which the double
/// does not keep; see README "Deviations").
const SERVER_ASSIGNED: &[&str] = &["resourceVersion", "managedFields"];

fn strip_server_assigned(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        for k in SERVER_ASSIGNED {
            m.remove(*k);
        }
    }
    v
}

type Key = (String, String, String);

fn key_of(ev: &Value) -> Option<Key> {
    let o = &ev["objectRef"];
    Some((
        o["resource"].as_str()?.to_string(),
        o["namespace"].as_str().unwrap_or("").to_string(),
        o["name"].as_str()?.to_string(),
    ))
}

/// The kind a LIST item lacks (the server leaves kind/apiVersion off items).
fn with_type_meta(resource: &str, item: &Value) -> Value {
    let mut item = item.clone();
    let kind = match resource {
        "pods" => "Pod",
        "nodes" => "Node",
        "events" => "Event",
        _ => return item,
    };
    if let Some(m) = item.as_object_mut() {
        m.insert("kind".into(), kind.into());
        m.insert("apiVersion".into(), "v1".into());
    }
    item
}

/// Remembers the server's latest answer about each object.
fn remember(latest: &mut HashMap<Key, Value>, ev: &Value) {
    let code = ev["responseStatus"]["code"].as_u64().unwrap_or(0);
    let resp = &ev["responseObject"];
    match ev["verb"].as_str() {
        Some("get" | "create" | "update" | "patch") if (200..300).contains(&code) => {
            if let Some(k) = key_of(ev) {
                // A token request's answer is a TokenRequest, not the object.
                if ev["objectRef"]["subresource"].as_str() != Some("token") {
                    latest.insert(k, resp.clone());
                }
            }
        }
        Some("list") if code == 200 => {
            let res = ev["objectRef"]["resource"].as_str().unwrap_or("");
            for item in resp["items"].as_array().into_iter().flatten() {
                let md = &item["metadata"];
                let k = (
                    res.to_string(),
                    md["namespace"].as_str().unwrap_or("").to_string(),
                    md["name"].as_str().unwrap_or("").to_string(),
                );
                latest.insert(k, with_type_meta(res, item));
            }
        }
        Some("delete") if code == 200 => {
            if let Some(k) = key_of(ev) {
                latest.remove(&k);
            }
        }
        _ => {}
    }
}

fn route_of(ev: &Value) -> Route {
    let o = &ev["objectRef"];
    let plural = o["resource"].as_str().unwrap_or("");
    let def = resources::find("", "v1", plural)
        .unwrap_or_else(|| panic!("the double does not serve {}", plural));
    Route {
        def,
        ns: o["namespace"].as_str().map(String::from),
        name: o["name"].as_str().map(String::from),
        sub: o["subresource"].as_str().map(String::from),
    }
}

/// What the double's PATCH handler stores, emulating `release` (the
/// recording's control plane): its decoder drops the fields it does not
/// know (rkubelet sends some newer ones), as the double does then.
fn double_patch(
    release: Version,
    route: &Route,
    before: &Value,
    patch: &Value,
) -> Result<Value, String> {
    let mut got = patched_object(route, before, SMP, patch)
        .map_err(|e| format!("the double refused it: {} {}", e.code, e.message))?;
    fields::drop_unserved(release, route.def, route.sub.as_deref(), &mut got);
    Ok(got)
}

/// `before` with what a controller wrote meanwhile (see TTL_ANNOTATION);
/// anything else must come from the patch.
fn with_controller_writes(before: &Value, answer: &Value) -> Value {
    let mut before = before.clone();
    if before["kind"] != "Node" {
        return before;
    }
    let ttl = &answer["metadata"]["annotations"][TTL_ANNOTATION];
    if ttl.is_string() {
        if let Some(md) = before["metadata"].as_object_mut() {
            let a = md
                .entry("annotations")
                .or_insert(Value::Object(Default::default()));
            a[TTL_ANNOTATION] = ttl.clone();
        }
    }
    before["spec"] = answer["spec"].clone();
    before
}

struct Replay {
    /// "resource/subresource" → PATCHes compared.
    compared: HashMap<String, usize>,
    /// PATCHes whose object the log never showed before: nothing to replay
    /// them on (none in the fixtures; counted so that a lookup bug shows).
    no_before: usize,
    failures: Vec<String>,
}

fn replay(capture: Capture) -> Replay {
    let mut latest: HashMap<Key, Value> = HashMap::new();
    let mut r = Replay {
        compared: HashMap::new(),
        no_before: 0,
        failures: vec![],
    };
    for (line, ev) in capture.audit().iter().enumerate() {
        let is_ok_patch = ev["verb"] == "patch" && ev["responseStatus"]["code"] == 200;
        if is_ok_patch {
            replay_one(&mut r, &latest, capture, line + 1, ev);
        }
        remember(&mut latest, ev);
    }
    r
}

fn replay_one(
    r: &mut Replay,
    latest: &HashMap<Key, Value>,
    capture: Capture,
    line: usize,
    ev: &Value,
) {
    let log = capture.file("audit-node.jsonl");
    let Some(before) = key_of(ev).and_then(|k| latest.get(&k)) else {
        r.no_before += 1;
        return;
    };
    let route = route_of(ev);
    let what = format!(
        "{}/{}",
        route.def.plural,
        route.sub.as_deref().unwrap_or("")
    );
    *r.compared.entry(what.clone()).or_default() += 1;
    let want = strip_server_assigned(&ev["responseObject"]);
    let before = with_controller_writes(before, &want);
    match double_patch(capture.release, &route, &before, &ev["requestObject"]) {
        Ok(got) => {
            let d = golden::diff(&want, &strip_server_assigned(&got));
            if !d.is_empty() {
                r.failures.push(format!(
                    "{}:{} patch {} {}:\n  {}",
                    log,
                    line,
                    what,
                    ev["objectRef"]["name"],
                    d.join("\n  ")
                ));
            }
        }
        Err(e) => r.failures.push(format!(
            "{}:{} patch {} {}: {}",
            log, line, what, ev["objectRef"]["name"], e
        )),
    }
}

fn assert_replays(capture: Capture, min_status_patches: usize) -> Replay {
    let r = replay(capture);
    assert!(
        r.failures.is_empty(),
        "{} of the recorded PATCHes differ:\n{}",
        r.failures.len(),
        r.failures.join("\n")
    );
    let status: usize = ["pods/status", "nodes/status"]
        .iter()
        .map(|k| r.compared.get(*k).copied().unwrap_or(0))
        .sum();
    // The logs hold dozens of status PATCHes: replaying few of them means
    // the before-state lookup broke, not that the double is right.
    assert!(
        status >= min_status_patches,
        "only {} status PATCHes replayed: {:?}",
        status,
        r.compared
    );
    r
}

#[test]
fn upstream_kubelet_patches_answer_as_recorded() {
    let r = assert_replays(UPSTREAM_V1_22, 50);
    assert!(r.compared.get("events/").copied().unwrap_or(0) > 50);
    assert_eq!(r.no_before, 0, "PATCHes without a before");
}

#[test]
fn rkubelet_patches_answer_as_recorded() {
    let r = assert_replays(RKUBELET_V1_22, 70);
    assert_eq!(r.no_before, 0, "PATCHes without a before");
}

/// The v1.32.13 capture (80 pods/status, 2 nodes/status and 125 event
/// PATCHes), on a double emulating 1.32, with the same exclusions as for
/// v1.22 (SERVER_ASSIGNED, TTL_ANNOTATION). Its server is OpenShift's fork,
/// whose one difference a kubelet sees (a fourth projected source in each
/// `kube-api-access-*` volume) is in the pods' spec, which a status PATCH
/// does not touch and which the replay takes from the same log on both
/// sides: nothing is masked for it here.
#[test]
fn upstream_v1_32_kubelet_patches_answer_as_recorded() {
    let r = assert_replays(UPSTREAM_V1_32, 82);
    assert_eq!(r.compared.get("pods/status"), Some(&80), "{:?}", r.compared);
    assert_eq!(r.compared.get("nodes/status"), Some(&2), "{:?}", r.compared);
    assert_eq!(r.compared.get("events/"), Some(&125), "{:?}", r.compared);
    assert_eq!(r.no_before, 0, "PATCHes without a before");
}

/// rkubelet once sent `lastTransitionTime: null` on Ready and ContainersReady
/// as they turned True; the real server deleted the field (a zero
/// metav1.Time, which it renders as null), it did not keep the old time.
#[test]
fn null_last_transition_time_deletes_the_field() {
    let mut latest: HashMap<Key, Value> = HashMap::new();
    let mut checked = 0;
    for ev in RKUBELET_V1_22.audit() {
        let nulls = ev["requestObject"]["status"]["conditions"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .any(|c| c.get("lastTransitionTime") == Some(&Value::Null))
            })
            .unwrap_or(false);
        if ev["verb"] == "patch" && ev["objectRef"]["name"] == "st-running-ready" && nulls {
            let before = key_of(&ev).and_then(|k| latest.get(&k)).expect("before");
            let got = double_patch(
                RKUBELET_V1_22.release,
                &route_of(&ev),
                before,
                &ev["requestObject"],
            )
            .unwrap_or_else(|e| panic!("{}", e));
            for t in ["Ready", "ContainersReady"] {
                let cond = |pod: &Value| -> Value {
                    pod["status"]["conditions"]
                        .as_array()
                        .and_then(|cs| cs.iter().find(|c| c["type"] == t))
                        .cloned()
                        .unwrap_or_else(|| panic!("no {} condition", t))
                };
                let was = cond(before)["lastTransitionTime"].clone();
                assert!(was.is_string(), "{} had a time before: {}", t, was);
                assert_eq!(cond(&got)["status"], "True");
                assert_eq!(cond(&got)["lastTransitionTime"], Value::Null, "{}", t);
                assert_eq!(
                    cond(&ev["responseObject"])["lastTransitionTime"],
                    Value::Null
                );
            }
            checked += 1;
        }
        remember(&mut latest, &ev);
    }
    assert_eq!(checked, 1, "the fixture's null-time PATCH was not found");
}

/// A status PATCH changes status (and metadata) only: the real server kept
/// the spec in its answer to every recorded one, and the double drops a
/// spec change slipped into one.
fn assert_status_patches_leave_spec_alone(capture: Capture) {
    let mut latest: HashMap<Key, Value> = HashMap::new();
    let mut checked = 0;
    for ev in capture.audit() {
        let status_patch = ev["verb"] == "patch"
            && ev["objectRef"]["subresource"] == "status"
            && ev["responseStatus"]["code"] == 200;
        let before = key_of(&ev).and_then(|k| latest.get(&k));
        if let (true, Some(before)) = (status_patch, before) {
            let before = with_controller_writes(before, &ev["responseObject"]);
            assert_eq!(ev["responseObject"]["spec"], before["spec"]);
            let mut patch = ev["requestObject"].clone();
            patch["spec"] = match before["kind"].as_str() {
                Some("Pod") => json!({"activeDeadlineSeconds": 5, "nodeName": "elsewhere"}),
                _ => json!({"unschedulable": true, "podCIDR": "10.9.0.0/24"}),
            };
            let got = double_patch(capture.release, &route_of(&ev), &before, &patch)
                .unwrap_or_else(|e| panic!("{}", e));
            assert_eq!(got["spec"], before["spec"], "{}", ev["objectRef"]);
            assert_ne!(got["status"], Value::Null);
            checked += 1;
        }
        remember(&mut latest, &ev);
    }
    assert!(checked >= 50, "only {} status PATCHes checked", checked);
}

#[test]
fn status_patches_leave_spec_alone() {
    assert_status_patches_leave_spec_alone(UPSTREAM_V1_22);
}

#[test]
fn v1_32_status_patches_leave_spec_alone() {
    assert_status_patches_leave_spec_alone(UPSTREAM_V1_32);
}
