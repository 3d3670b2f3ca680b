//! Two-way strategic merge patches (upstream
//! `apimachinery/pkg/util/strategicpatch.CreateTwoWayMergePatch`), for the
//! status PATCHes the kubelet sends: the smallest patch that turns `old`
//! into `new` when the API server applies it with strategic-merge rules.
//!
//! Maps are diffed key by key (a removed key becomes `null`). Lists whose
//! elements have a patch merge key are diffed element by element (a removed
//! element becomes `{"$patch": "delete", key: value}`, and
//! `$setElementOrder/<field>` keeps the new order); other lists are
//! replaced whole.

use serde_json::{Map, Value};

/// The merge key of a list field, given its path from the patched object's
/// root (e.g. `status.conditions` -> `type`).
pub type MergeKeys = fn(&str) -> Option<&'static str>;

/// Merge keys of the Pod and Node status fields the kubelet writes, as
/// upstream's struct tags declare them (`patchStrategy:"merge"`). Lists
/// without one — containerStatuses, images, ... — are atomic: the server
/// replaces them whole, so the patch must carry them whole.
pub fn kubelet_merge_keys(path: &str) -> Option<&'static str> {
    match path {
        "status.conditions" => Some("type"),
        "status.resourceClaimStatuses" => Some("name"),
        "status.podIPs" | "status.hostIPs" => Some("ip"),
        "status.addresses" => Some("type"),
        "metadata.ownerReferences" => Some("uid"),
        _ => None,
    }
}

/// The patch from `old` to `new`; an empty object when they are equal.
pub fn two_way(old: &Value, new: &Value, keys: MergeKeys) -> Value {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => Value::Object(diff_maps(o, n, "", keys)),
        _ => new.clone(),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn diff_maps(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    path: &str,
    keys: MergeKeys,
) -> Map<String, Value> {
    let mut patch = Map::new();
    for (k, nv) in new {
        let here = join(path, k);
        match old.get(k) {
            Some(ov) if ov == nv => {}
            Some(Value::Object(o)) if nv.is_object() => {
                if let Value::Object(n) = nv {
                    let sub = diff_maps(o, n, &here, keys);
                    if !sub.is_empty() {
                        patch.insert(k.clone(), Value::Object(sub));
                    }
                }
            }
            Some(Value::Array(o)) if nv.is_array() => {
                if let (Value::Array(n), Some(key)) = (nv, keys(&here)) {
                    diff_keyed_list(&mut patch, k, o, n, key, &here, keys);
                } else {
                    patch.insert(k.clone(), nv.clone());
                }
            }
            _ => {
                patch.insert(k.clone(), nv.clone());
            }
        }
    }
    for k in old.keys() {
        if !new.contains_key(k) {
            patch.insert(k.clone(), Value::Null);
        }
    }
    patch
}

fn diff_keyed_list(
    patch: &mut Map<String, Value>,
    field: &str,
    old: &[Value],
    new: &[Value],
    key: &str,
    path: &str,
    keys: MergeKeys,
) {
    let key_of = |v: &Value| v.get(key).cloned();
    let mut items = Vec::new();
    for n in new {
        let Some(id) = key_of(n) else {
            // An element without its merge key cannot be addressed: replace.
            patch.insert(field.to_string(), Value::Array(new.to_vec()));
            return;
        };
        match old.iter().find(|o| key_of(o).as_ref() == Some(&id)) {
            Some(o) if o == n => {}
            Some(Value::Object(o)) => {
                if let Value::Object(nm) = n {
                    let mut sub = diff_maps(o, nm, path, keys);
                    sub.insert(key.to_string(), id);
                    items.push(Value::Object(sub));
                }
            }
            _ => items.push(n.clone()),
        }
    }
    for o in old {
        if let Some(id) = key_of(o) {
            if !new.iter().any(|n| key_of(n).as_ref() == Some(&id)) {
                let mut del = Map::new();
                del.insert("$patch".into(), Value::String("delete".into()));
                del.insert(key.to_string(), id);
                items.push(Value::Object(del));
            }
        }
    }
    // Even with no element changed, the order did: say the new one.
    if !items.is_empty() {
        patch.insert(field.to_string(), Value::Array(items));
    }
    let order: Vec<Value> = new
        .iter()
        .filter_map(|n| key_of(n).map(|id| Value::Object(Map::from_iter([(key.to_string(), id)]))))
        .collect();
    patch.insert(format!("$setElementOrder/{field}"), Value::Array(order));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn diff(old: Value, new: Value) -> Value {
        two_way(&old, &new, kubelet_merge_keys)
    }

    #[test]
    fn equal_objects_give_empty_patch() {
        let v = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(diff(v.clone(), v), json!({}));
    }

    #[test]
    fn removed_keys_become_null() {
        let old = json!({"status": {"phase": "Pending", "reason": "x", "qosClass": "BestEffort"}});
        let new = json!({"status": {"phase": "Running", "qosClass": "BestEffort"}});
        assert_eq!(
            diff(old, new),
            json!({"status": {"phase": "Running", "reason": null}})
        );
    }

    #[test]
    fn atomic_lists_are_sent_whole() {
        // containerStatuses has no patch strategy upstream: a changed list
        // replaces the server's copy, so it must be complete.
        let old = json!({"status": {"containerStatuses": [
            {"name": "a", "state": {"waiting": {"reason": "ContainerCreating"}}},
            {"name": "b", "ready": true}]}});
        let new = json!({"status": {"containerStatuses": [
            {"name": "a", "state": {"running": {"startedAt": "t"}}},
            {"name": "b", "ready": true}]}});
        assert_eq!(
            diff(old, new.clone()),
            json!({"status": {"containerStatuses": new["status"]["containerStatuses"]}})
        );
    }

    #[test]
    fn keyed_lists_patch_only_changed_elements() {
        let old = json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False"}]}});
        let new = json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True"}]}});
        assert_eq!(
            diff(old, new),
            json!({"status": {"conditions": [{"type": "Ready", "status": "True"}],
                              "$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}]}})
        );
    }

    #[test]
    fn reordering_alone_sends_the_order() {
        let old = json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}]}});
        let new = json!({"status": {"conditions": [{"type": "B"}, {"type": "A"}]}});
        assert_eq!(
            diff(old, new),
            json!({"status": {"$setElementOrder/conditions": [{"type": "B"}, {"type": "A"}]}})
        );
    }

    #[test]
    fn removed_elements_are_deleted_and_unkeyed_lists_replaced() {
        let old = json!({"status": {"podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}], "images": [{"names": ["a"]}]}});
        let new = json!({"status": {"podIPs": [{"ip": "10.0.0.1"}], "images": [{"names": ["b"]}]}});
        assert_eq!(
            diff(old, new),
            json!({"status": {"podIPs": [{"$patch": "delete", "ip": "fd00::1"}],
                              "$setElementOrder/podIPs": [{"ip": "10.0.0.1"}],
                              "images": [{"names": ["b"]}]}})
        );
    }
}
