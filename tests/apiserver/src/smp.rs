//! Strategic merge patch (`application/strategic-merge-patch+json`) as the
//! real server applies it: k8s.io/apimachinery/pkg/util/strategicpatch
//! `StrategicMergeMapPatch` with the options of the PATCH handler
//! (MergeParallelList, IgnoreUnmatchedNulls). Per field, the list strategy
//! of `resources::list_strategy` (the `patchStrategy`/`patchMergeKey` tags
//! of k8s.io/api).
//!
//! What a client sees of it:
//! * `null` deletes a field (a `null` for an absent field is ignored);
//! * maps merge; `$patch: replace` replaces one, `$patch: delete` empties it;
//! * `$retainKeys` drops the original's other fields first (and every field
//!   the patch sets must be listed);
//! * merge lists merge by key (or as a set of scalars); an element
//!   `$patch: delete` removes the entries with its key, `$patch: replace`
//!   makes the rest of the patch list the whole list;
//! * the order of a merged list: the patch's elements in the patch's order
//!   (or `$setElementOrder/<field>`'s), the other elements in their original
//!   order, interleaved by their original positions (normalizeElementOrder).
//!   So an element new to the list, without `$setElementOrder`, comes first;
//! * `$deleteFromPrimitiveList/<field>` removes scalars from a merge list;
//! * other lists are replaced.

use crate::resources::{list_strategy, ListStrategy};
use serde_json::{Map, Value};

type Obj = Map<String, Value>;

const SET_ORDER: &str = "$setElementOrder/";
const DELETE_PRIMITIVES: &str = "$deleteFromPrimitiveList/";
const RETAIN_KEYS: &str = "$retainKeys";
const DIRECTIVE: &str = "$patch";

pub fn strategic_merge(kind: &str, original: &Value, patch: &Value) -> Result<Value, String> {
    let p = patch
        .as_object()
        .ok_or("strategic merge patch must be a JSON object")?;
    let o = original.as_object().cloned().unwrap_or_default();
    Ok(Value::Object(merge_map(kind, "", o, p)?))
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{}.{}", path, k)
    }
}

/// mergeMap.
fn merge_map(kind: &str, path: &str, mut original: Obj, patch: &Obj) -> Result<Obj, String> {
    if let Some(d) = patch.get(DIRECTIVE) {
        return map_directive(kind, path, d, patch);
    }
    let mut patch = patch.clone();
    retain_keys(&mut original, &mut patch)?;
    set_element_orders(kind, path, &mut original, &mut patch)?;
    let mut deletions = vec![];
    for (k, pv) in patch {
        if k.starts_with(SET_ORDER) {
            continue;
        }
        if let Some(field) = k.strip_prefix(DELETE_PRIMITIVES) {
            deletions.push((field.to_string(), pv));
            continue;
        }
        merge_field(kind, path, &mut original, k, pv)?;
    }
    for (field, pv) in deletions {
        let gone = pv
            .as_array()
            .ok_or_else(|| format!("invalid {}{} list", DELETE_PRIMITIVES, field))?;
        if let Some(Value::Array(l)) = original.get_mut(&field) {
            l.retain(|x| !gone.contains(x));
        }
    }
    Ok(original)
}

/// One field of mergeMap's loop.
fn merge_field(
    kind: &str,
    path: &str,
    original: &mut Obj,
    k: String,
    pv: Value,
) -> Result<(), String> {
    let sub = join(path, &k);
    if pv.is_null() {
        original.remove(&k);
        return Ok(());
    }
    let merged = match (original.remove(&k), pv) {
        (Some(Value::Object(om)), Value::Object(pm)) => {
            Value::Object(merge_map(kind, &sub, om, &pm)?)
        }
        (Some(Value::Array(ol)), Value::Array(pl)) => {
            Value::Array(merge_list(kind, &sub, ol, &pl)?)
        }
        // Absent, or of another type: the patch's value.
        (_, pv) => fresh(kind, &sub, &pv)?,
    };
    original.insert(k, merged);
    Ok(())
}

/// A patch value taken as is (upstream inserts it raw; its directives are
/// then unknown fields the decoder drops, its nulls nil pointers): merged
/// into nothing, which drops both.
fn fresh(kind: &str, path: &str, v: &Value) -> Result<Value, String> {
    Ok(match v {
        Value::Object(m) => Value::Object(merge_map(kind, path, Obj::new(), m)?),
        Value::Array(l) => Value::Array(merge_list(kind, path, vec![], l)?),
        other => other.clone(),
    })
}

/// handleDirectiveInMergeMap.
fn map_directive(kind: &str, path: &str, d: &Value, patch: &Obj) -> Result<Obj, String> {
    match d.as_str() {
        Some("replace") => {
            let mut p = patch.clone();
            p.remove(DIRECTIVE);
            merge_map(kind, path, Obj::new(), &p)
        }
        Some("delete") => Ok(Obj::new()),
        _ => Err(format!(
            "unknown patch type: {} in map: {}",
            d,
            Value::Object(patch.clone())
        )),
    }
}

/// applyRetainKeysDirective.
fn retain_keys(original: &mut Obj, patch: &mut Obj) -> Result<(), String> {
    let Some(keep) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let bad = || "invalid patch format of retainKeys".to_string();
    let keep = keep.as_array().ok_or_else(bad)?;
    let listed = |k: &str| keep.iter().any(|x| x.as_str() == Some(k));
    let unlisted = patch.iter().any(|(k, v)| {
        !v.is_null() && !k.starts_with(DELETE_PRIMITIVES) && !k.starts_with(SET_ORDER) && !listed(k)
    });
    if unlisted {
        return Err(bad());
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

// ---------------------------------------------------------------- lists

/// What identifies a list element: its merge key's value, or itself.
#[derive(Clone, Copy)]
enum Ident {
    Key(&'static str),
    Scalar,
}

impl Ident {
    fn of(self, v: &Value) -> Option<&Value> {
        match self {
            Ident::Key(k) => v.get(k),
            Ident::Scalar => Some(v),
        }
    }
    fn same(self, a: &Value, b: &Value) -> bool {
        self.of(a) == self.of(b)
    }
    /// `index`: the position of `v` in `list`.
    fn index(self, list: &[Value], v: &Value) -> Option<usize> {
        list.iter().position(|x| self.same(x, v))
    }
}

/// mergeSliceHandler / mergeSlice.
fn merge_list(
    kind: &str,
    path: &str,
    original: Vec<Value>,
    patch: &[Value],
) -> Result<Vec<Value>, String> {
    let elem_path = format!("{}[]", path);
    match list_strategy(kind, path) {
        ListStrategy::Replace => patch
            .iter()
            .filter(|v| !has_directive(v, "replace"))
            .map(|v| fresh(kind, &elem_path, v))
            .collect(),
        _ if original.is_empty() && patch.is_empty() => Ok(original),
        ListStrategy::MergeScalars => merge_scalars(path, original, patch),
        ListStrategy::MergeKey(key) => merge_keyed(kind, path, key, original, patch),
    }
}

fn has_directive(v: &Value, which: &str) -> bool {
    v.get(DIRECTIVE).and_then(Value::as_str) == Some(which)
}

fn merge_scalars(path: &str, original: Vec<Value>, patch: &[Value]) -> Result<Vec<Value>, String> {
    if patch.iter().any(|v| v.is_object() || v.is_array()) {
        return Err(format!("{}: expected a list of primitives", path));
    }
    let mut merged: Vec<Value> = vec![];
    for v in original.iter().chain(patch) {
        if !merged.contains(v) {
            merged.push(v.clone());
        }
    }
    let (in_patch, server_only) = partition(merged, patch, Ident::Scalar);
    Ok(normalize_element_order(
        in_patch,
        server_only,
        patch,
        &original,
        Ident::Scalar,
    ))
}

fn merge_keyed(
    kind: &str,
    path: &str,
    key: &'static str,
    original: Vec<Value>,
    patch: &[Value],
) -> Result<Vec<Value>, String> {
    let elem_path = format!("{}[]", path);
    let (mut original, plain) = special_elements(path, key, original, patch)?;
    let server_order = original.clone();
    for v in &plain {
        let m = v
            .as_object()
            .ok_or_else(|| format!("{}: expected a list of maps with merge key {}", path, key))?;
        let kv = merge_key(v, key)?;
        match original.iter().position(|o| o.get(key) == Some(kv)) {
            Some(i) => {
                let om = original[i].as_object().cloned().unwrap_or_default();
                original[i] = Value::Object(merge_map(kind, &elem_path, om, m)?);
            }
            None => original.push(fresh(kind, &elem_path, v)?),
        }
    }
    let id = Ident::Key(key);
    let (in_patch, server_only) = partition(original, &plain, id);
    Ok(normalize_element_order(
        in_patch,
        server_only,
        &plain,
        &server_order,
        id,
    ))
}

fn merge_key<'a>(v: &'a Value, key: &str) -> Result<&'a Value, String> {
    v.get(key)
        .ok_or_else(|| format!("map: {} does not contain declared merge key: {}", v, key))
}

/// mergeSliceWithSpecialElements: `$patch: delete` elements delete, a
/// `$patch: replace` element makes the other elements the whole list.
/// Returns the original to merge into and the plain patch elements.
fn special_elements(
    path: &str,
    key: &str,
    mut original: Vec<Value>,
    patch: &[Value],
) -> Result<(Vec<Value>, Vec<Value>), String> {
    let mut plain = vec![];
    let mut replace = false;
    for v in patch {
        let m = v
            .as_object()
            .ok_or_else(|| format!("{}: expected a list of maps with merge key {}", path, key))?;
        match m.get(DIRECTIVE).map(|d| (d, d.as_str())) {
            None => plain.push(v.clone()),
            Some((_, Some("delete"))) => {
                let kv = merge_key(v, key)?;
                original.retain(|o| o.get(key) != Some(kv));
            }
            Some((_, Some("replace"))) => replace = true,
            Some((_, Some("merge"))) => {
                return Err("merging lists cannot yet be specified in the patch".into())
            }
            Some((d, _)) => return Err(format!("unknown patch type: {} in map: {}", d, v)),
        }
    }
    if replace {
        return Ok((plain, vec![]));
    }
    Ok((original, plain))
}

/// partitionMapsByPresentInList / partitionPrimitivesByPresentInList.
fn partition(list: Vec<Value>, by: &[Value], id: Ident) -> (Vec<Value>, Vec<Value>) {
    list.into_iter().partition(|v| id.index(by, v).is_some())
}

/// normalizeElementOrder: `in_patch` sorted by `patch_order`, `server_only`
/// by `server_order`, then merged.
fn normalize_element_order(
    mut in_patch: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    id: Ident,
) -> Vec<Value> {
    in_patch.sort_by_key(|v| id.index(patch_order, v).unwrap_or(usize::MAX));
    server_only.sort_by_key(|v| id.index(server_order, v).unwrap_or(usize::MAX));
    merge_sorted(server_only, in_patch, server_order, id)
}

/// mergeSortedSlice: a `left` element goes before the next `right` one
/// only when both are in `server_order` and it came first there.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    id: Ident,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    loop {
        let take_left = match (l.peek(), r.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => matches!(
                (id.index(server_order, a), id.index(server_order, b)),
                (Some(i), Some(j)) if i < j
            ),
        };
        let next = if take_left { l.next() } else { r.next() };
        out.extend(next);
    }
    out
}

// ---------------------------------------------------------------- $setElementOrder

/// mergePatchIntoOriginal: each `$setElementOrder/<field>` with the patch's
/// `<field>` list, merged and put in that order (the field then leaves the
/// patch).
fn set_element_orders(
    kind: &str,
    path: &str,
    original: &mut Obj,
    patch: &mut Obj,
) -> Result<(), String> {
    let directives: Vec<(String, Value)> = patch
        .iter()
        .filter(|(k, _)| k.starts_with(SET_ORDER))
        .map(|(k, v)| (k[SET_ORDER.len()..].to_string(), v.clone()))
        .collect();
    for (field, order) in directives {
        let sub = join(path, &field);
        let id = match list_strategy(kind, &sub) {
            ListStrategy::MergeKey(k) => Ident::Key(k),
            ListStrategy::MergeScalars => Ident::Scalar,
            // Not a merge list: nothing to order (upstream fails on it).
            ListStrategy::Replace => continue,
        };
        let bad = || "invalid patch format of setElementOrder list".to_string();
        let order = order.as_array().ok_or_else(bad)?;
        let list_of = |m: &Obj| -> Result<Option<Vec<Value>>, String> {
            match m.get(&field) {
                None => Ok(None),
                Some(Value::Array(a)) => Ok(Some(a.clone())),
                Some(_) => Err(format!("{}: expected a list", sub)),
            }
        };
        let (orig, in_patch) = (list_of(original)?, list_of(patch)?);
        check_order(in_patch.as_deref().unwrap_or_default(), order, id)?;
        let merged = match (&orig, &in_patch) {
            (None, None) => continue,
            (Some(o), None) => o.clone(),
            (o, Some(p)) => merge_list(kind, &sub, o.clone().unwrap_or_default(), p)?,
        };
        let (listed, server_only) = partition(merged, order, id);
        let server_order = orig.unwrap_or_default();
        let both = normalize_element_order(listed, server_only, order, &server_order, id);
        original.insert(field.clone(), Value::Array(both));
        patch.remove(&field);
    }
    Ok(())
}

/// validatePatchWithSetOrderList: the patch list's elements (but deletions)
/// appear in the order list, in the same relative order.
fn check_order(patch_list: &[Value], order: &[Value], id: Ident) -> Result<(), String> {
    let plain: Vec<&Value> = patch_list
        .iter()
        .filter(|v| v.get(DIRECTIVE).is_none())
        .collect();
    if let Ident::Key(k) = id {
        for v in plain.iter().copied().chain(order) {
            merge_key(v, k)?;
        }
    }
    let mut items = plain.into_iter().peekable();
    for o in order {
        if items.peek().is_some_and(|v| id.same(v, o)) {
            items.next();
        }
    }
    match items.next() {
        None => Ok(()),
        Some(_) => Err(format!(
            "The order in patch list:\n{}\n doesn't match {} list:\n{}",
            Value::Array(patch_list.to_vec()),
            SET_ORDER,
            Value::Array(order.to_vec())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn smp(kind: &str, o: Value, p: Value) -> Value {
        strategic_merge(kind, &o, &p).unwrap()
    }

    fn types(v: &Value) -> Vec<&str> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn pod_status_as_a_kubelet_patches_it() {
        let pod = json!({"metadata": {"finalizers": ["a"], "ownerReferences": [{"uid": "1", "name": "x"}]},
            "status": {"phase": "Pending",
                "conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "a", "ready": false}, {"name": "b", "ready": false}]}});
        let patch = json!({"metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
            "status": {"$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}, {"type": "Initialized"}],
                "conditions": [{"type": "Ready", "status": "True", "reason": null}, {"type": "Initialized", "status": "True"}],
                "containerStatuses": [{"name": "a", "ready": true}],
                "phase": "Running", "message": null}});
        let r = smp("Pod", pod, patch);
        assert_eq!(r["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(r["status"]["phase"], "Running");
        assert_eq!(
            types(&r["status"]["conditions"]),
            ["PodScheduled", "Ready", "Initialized"]
        );
        assert_eq!(
            r["status"]["conditions"][1],
            json!({"type": "Ready", "status": "True"})
        );
        // containerStatuses has no patch strategy upstream: replaced.
        assert_eq!(
            r["status"]["containerStatuses"],
            json!([{"name": "a", "ready": true}])
        );
    }

    #[test]
    fn merged_lists_take_the_patch_order() {
        let o = json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}]}});
        // A new element without $setElementOrder comes first.
        let r = smp(
            "Node",
            o.clone(),
            json!({"status": {"conditions": [{"type": "C"}]}}),
        );
        assert_eq!(types(&r["status"]["conditions"]), ["C", "A", "B"]);
        // Patched elements take the patch's order.
        let r = smp(
            "Node",
            o.clone(),
            json!({"status": {"conditions": [{"type": "B"}, {"type": "A"}]}}),
        );
        assert_eq!(types(&r["status"]["conditions"]), ["B", "A"]);
        // Server-only elements keep their place among the patched ones.
        let o3 = json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}, {"type": "C"}]}});
        let r = smp(
            "Node",
            o3.clone(),
            json!({"status": {"conditions": [{"type": "D"}, {"type": "B", "x": 1}]}}),
        );
        assert_eq!(types(&r["status"]["conditions"]), ["D", "A", "B", "C"]);
        // With $setElementOrder.
        let p = json!({"status": {"$setElementOrder/conditions": [{"type": "B"}, {"type": "A"}, {"type": "X"}],
            "conditions": [{"type": "X"}]}});
        let r = smp("Node", o3, p);
        assert_eq!(types(&r["status"]["conditions"]), ["B", "A", "X", "C"]);
        // Scalars too.
        let r = smp(
            "Pod",
            json!({"metadata": {"finalizers": ["a", "b"]}}),
            json!({"metadata": {"finalizers": ["c"]}}),
        );
        assert_eq!(r["metadata"]["finalizers"], json!(["c", "a", "b"]));
    }

    #[test]
    fn directives() {
        let node = json!({"status": {"addresses": [{"type": "InternalIP", "address": "1"}, {"type": "Hostname", "address": "h"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}],
            "nodeInfo": {"a": 1}}});
        let patch = json!({"status": {"addresses": [{"$patch": "replace"}, {"type": "InternalIP", "address": "2"}],
            "conditions": [{"type": "DiskPressure", "$patch": "delete"}], "nodeInfo": {"$patch": "delete"}}});
        let r = smp("Node", node.clone(), patch);
        assert_eq!(
            r["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "2"}])
        );
        assert_eq!(
            r["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
        assert_eq!(r["status"]["nodeInfo"], json!({}));
        let r2 = smp(
            "Node",
            node.clone(),
            json!({"status": {"$patch": "replace", "phase": "x"}}),
        );
        assert_eq!(r2["status"], json!({"phase": "x"}));
        let bad = |p: Value| strategic_merge("Node", &node, &p).is_err();
        assert!(bad(json!({"status": {"conditions": [{"status": "x"}]}})));
        assert!(bad(json!([1])));
        assert!(bad(json!({"status": {"$patch": "merge"}})));
        assert!(bad(
            json!({"status": {"conditions": [{"$patch": "merge"}]}})
        ));
        // A patch element missing from $setElementOrder.
        assert!(bad(
            json!({"status": {"$setElementOrder/conditions": [{"type": "Ready"}],
            "conditions": [{"type": "X"}]}})
        ));
    }

    #[test]
    fn retain_keys_drops_the_rest_first() {
        let pod = json!({"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}});
        let p = json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "emptyDir"], "emptyDir": {}}]}});
        let r = smp("Pod", pod.clone(), p);
        assert_eq!(r["spec"]["volumes"], json!([{"name": "v", "emptyDir": {}}]));
        let unlisted =
            json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name"], "emptyDir": {}}]}});
        assert!(strategic_merge("Pod", &pod, &unlisted).is_err());
    }
}
