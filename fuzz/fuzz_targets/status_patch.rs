#![no_main]
//! rkubelet's pods/status PATCH, applied by the API server double's
//! strategic merge as the kube-apiserver would, must give the new status
//! back. Input: the API's pod and the new status as two JSON documents
//! separated by a NUL byte.

use k8s_openapi::api::core::v1::{Pod, PodStatus};
use serde_json::{json, Value};

/// The lists a status patch merges by key (status.conditions by type, ...):
/// with a key missing or repeated, a strategic merge cannot be exact, on
/// the real API server either; such inputs are skipped. Sorted by key for
/// the comparison, since a merge keeps the old elements' order.
const KEYED: [(&str, &str); 4] = [
    ("conditions", "type"),
    ("podIPs", "ip"),
    ("hostIPs", "ip"),
    ("resourceClaimStatuses", "name"),
];

fn normalize(status: &mut Value) -> Option<()> {
    for (list, key) in KEYED {
        let Some(Value::Array(items)) = status.get_mut(list) else {
            continue;
        };
        let mut keys: Vec<String> = Vec::new();
        for i in items.iter() {
            keys.push(i.get(key)?.as_str()?.to_string());
        }
        let n = keys.len();
        keys.sort();
        keys.dedup();
        if keys.len() != n {
            return None;
        }
        items.sort_by(|a, b| a[key].as_str().cmp(&b[key].as_str()));
    }
    Some(())
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Some(at) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let (Ok(old), Ok(new)) = (
        serde_json::from_slice::<Pod>(&data[..at]),
        serde_json::from_slice::<PodStatus>(&data[at + 1..]),
    ) else {
        return;
    };
    let mut old_json = serde_json::to_value(&old).unwrap_or(Value::Null);
    let mut want = serde_json::to_value(&new).unwrap_or(Value::Null);
    if normalize(&mut want).is_none() || normalize(&mut old_json["status"]).is_none() {
        return;
    }
    let patch = rkubelet::fuzzing::status_patch(&old, &new);
    let applied = apiserver_double::patch::strategic_merge("Pod", &old_json, &patch)
        .unwrap_or_else(|e| panic!("the double refused rkubelet's patch {patch}: {e}"));
    // Through the typed status again, as a client reading the pod would.
    let mut got = serde_json::from_value::<PodStatus>(applied["status"].clone())
        .map(|s| serde_json::to_value(s).unwrap_or(Value::Null))
        .unwrap_or_else(|e| panic!("patched status does not decode: {e}"));
    normalize(&mut got).expect("the patched status has repeated keys");
    assert_eq!(
        got,
        want,
        "patch {patch} applied to {} gives another status",
        json!(old.status)
    );
});
