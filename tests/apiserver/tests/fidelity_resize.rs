//! Resize replay: the three `kubectl patch --subresource resize` of the
//! v1.34.9 capture (`shared/fidelity/v134-actions.sh`, answered in
//! `upstream-v1.34-v134/`), applied by the double's resize path emulating
//! 1.34 to the pod as the server had it just before, must give the pod the
//! server stored: new resources, generation 2, nothing else changed.
//!
//! The audit log holds only the node's requests, so "before" and "after"
//! come from the watch stream: the last event of the pod at generation 1
//! and the first at generation 2 (the resize is the only write that
//! changed the spec).

mod golden;

use apiserver_double::features::Emulation;
use apiserver_double::handlers::{patched_object_as, Route};
use apiserver_double::resources;
use serde_json::Value;

const SMP: &str = "application/strategic-merge-patch+json";
const CAPTURE: &str = "upstream-v1.34-v134";

/// (pod, patch) of every resize in the actions script; kubectl's `-p`
/// without `--type` is a strategic merge patch.
fn resizes() -> Vec<(String, Value)> {
    golden::read("v134-actions.sh")
        .lines()
        .filter(|l| l.contains("--subresource resize"))
        .map(|l| {
            let name = l.split_whitespace().nth(3).unwrap_or_default().to_string();
            let body = l.split('\'').nth(1).unwrap_or_default();
            (name, serde_json::from_str(body).expect("patch JSON"))
        })
        .collect()
}

/// The pod just before and just after its resize, from the watch.
fn around_resize(watch: &[Value], name: &str) -> (Value, Value) {
    let pod = |e: &&Value| e["object"]["metadata"]["name"] == name;
    let gen = |e: &Value| e["object"]["metadata"]["generation"].as_i64().unwrap_or(0);
    let events: Vec<&Value> = watch.iter().filter(pod).collect();
    let after = events
        .iter()
        .position(|e| gen(e) == 2)
        .expect("a generation-2 event");
    (
        events[after - 1]["object"].clone(),
        events[after]["object"].clone(),
    )
}

fn strip(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v["metadata"].as_object_mut() {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    v
}

#[test]
fn resizes_replay_as_the_v1_34_server_stored_them() {
    let watch: Vec<Value> = golden::read(&format!("{CAPTURE}/pods-watch.jsonl"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("watch event"))
        .collect();
    let def = resources::find("", "v1", "pods").expect("pods");
    let all = resizes();
    assert_eq!(all.len(), 3, "the actions script resizes three pods");
    for (name, patch) in all {
        let (before, after) = around_resize(&watch, &name);
        let route = Route {
            def,
            ns: Some("fidelity".into()),
            name: Some(name.clone()),
            sub: Some("resize".into()),
        };
        let got = patched_object_as(&Emulation::default(), &route, &before, SMP, &patch)
            .unwrap_or_else(|e| panic!("{name}: {}", e.message));
        let diff = golden::diff(&strip(&after), &strip(&got));
        assert!(diff.is_empty(), "{name}:\n{}", diff.join("\n"));
    }
}
