//! Change detection and the status PATCH (upstream nodeStatusHasChanged in
//! kubelet_node_status.go and PatchNodeStatus in
//! component-helpers/node/util/status.go).

use k8s_openapi::api::core::v1::{Node, NodeStatus};
use serde_json::{json, Map, Value};

use crate::util::quantity::parse_quantity;
use crate::util::strategicpatch::{kubelet_merge_keys, two_way};

/// A JSON form of `status` for semantic comparison (apimachinery's
/// `equality.Semantic`): empty and absent values are equal, quantities
/// compare by value, and optionally heartbeats are dropped.
fn semantic(status: &NodeStatus, drop_conditions: bool) -> Value {
    let mut v = serde_json::to_value(status).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        if drop_conditions {
            m.remove("conditions");
        }
        for field in ["capacity", "allocatable"] {
            if let Some(Value::Object(list)) = m.get_mut(field) {
                for q in list.values_mut() {
                    if let Some(Ok(milli)) = q.as_str().map(parse_quantity) {
                        *q = Value::String(format!("{milli}m"));
                    }
                }
            }
        }
    }
    prune_empty(v)
}

/// Drops nulls, empty strings, empty lists and empty objects, recursively.
fn prune_empty(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let m: Map<String, Value> = m
                .into_iter()
                .map(|(k, v)| (k, prune_empty(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect();
            Value::Object(m)
        }
        Value::Array(a) => Value::Array(a.into_iter().map(prune_empty).collect()),
        other => other,
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
        _ => false,
    }
}

/// Conditions, sorted by type, without heartbeats.
fn conditions_without_heartbeat(status: &NodeStatus) -> Vec<Value> {
    let mut conds = status.conditions.clone().unwrap_or_default();
    conds.sort_by(|a, b| a.type_.cmp(&b.type_));
    conds
        .into_iter()
        .map(|mut c| {
            c.last_heartbeat_time = None;
            prune_empty(serde_json::to_value(c).unwrap_or(Value::Null))
        })
        .collect()
}

/// nodeStatusHasChanged: whether anything but the conditions' heartbeat
/// times differs.
pub fn node_status_has_changed(original: Option<&NodeStatus>, status: Option<&NodeStatus>) -> bool {
    let (original, status) = match (original, status) {
        (None, None) => return false,
        (Some(o), Some(s)) => (o, s),
        _ => return true,
    };
    if conditions_without_heartbeat(original) != conditions_without_heartbeat(status) {
        return true;
    }
    semantic(original, true) != semantic(status, true)
}

/// The strategic merge patch that turns `original` into `node` through
/// `nodes/<name>/status` (preparePatchBytesforNodeStatus): the spec is left
/// out, and changed addresses are replaced whole (`$patch: replace`), since
/// status.addresses is wrongly declared as merging by type.
pub fn node_status_patch(original: &Node, node: &Node) -> Result<Value, String> {
    let old_addresses = original
        .status
        .as_ref()
        .and_then(|s| s.addresses.clone())
        .unwrap_or_default();
    let new_addresses = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.clone())
        .unwrap_or_default();
    let manually_patch_addresses = !old_addresses.is_empty() && old_addresses != new_addresses;

    let mut diff_node = node.clone();
    diff_node.spec = original.spec.clone();
    if manually_patch_addresses {
        if let Some(s) = diff_node.status.as_mut() {
            s.addresses = original.status.as_ref().and_then(|o| o.addresses.clone());
        }
    }
    let old = serde_json::to_value(original).map_err(|e| format!("encoding node: {e}"))?;
    let new = serde_json::to_value(&diff_node).map_err(|e| format!("encoding node: {e}"))?;
    let mut patch = two_way(&old, &new, kubelet_merge_keys);
    if manually_patch_addresses {
        let mut list: Vec<Value> = new_addresses
            .iter()
            .map(|a| json!({"type": a.type_, "address": a.address}))
            .collect();
        list.push(json!({"$patch": "replace"}));
        let Value::Object(top) = &mut patch else {
            return Err("patch is not an object".into());
        };
        let status = top
            .entry("status")
            .or_insert_with(|| Value::Object(Map::new()));
        match status {
            Value::Object(s) => {
                s.insert("addresses".into(), Value::Array(list));
            }
            _ => return Err("patch status is not an object".into()),
        }
    }
    Ok(patch)
}
