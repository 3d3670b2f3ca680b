//! The three PATCH flavours of the real API server:
//! - JSON merge patch (RFC 7386), `application/merge-patch+json`
//! - strategic merge patch, `application/strategic-merge-patch+json`, with the
//!   list strategies of `resources::list_strategy` and the directives
//!   `$patch: replace|delete|merge`, `$retainKeys`, `$setElementOrder/<f>`,
//!   `$deleteFromPrimitiveList/<f>`
//! - JSON patch (RFC 6902), `application/json-patch+json`

use crate::resources::{list_strategy, ListStrategy};
use serde_json::{Map, Value};

pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut t = match target {
                Value::Object(m) => m.clone(),
                _ => Map::new(),
            };
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    let cur = t.get(k).cloned().unwrap_or(Value::Null);
                    t.insert(k.clone(), merge_patch(&cur, v));
                }
            }
            Value::Object(t)
        }
        other => other.clone(),
    }
}

// ---------------------------------------------------------------- strategic

pub fn strategic_merge(kind: &str, original: &Value, patch: &Value) -> Result<Value, String> {
    let p = patch
        .as_object()
        .ok_or("strategic merge patch must be a JSON object")?;
    let o = original.as_object();
    Ok(Value::Object(smp_map(kind, "", o, p)?.unwrap_or_default()))
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{}.{}", path, k)
    }
}

/// Merges `patch` into `orig` (None = absent). Ok(None) means "delete this map".
fn smp_map(
    kind: &str,
    path: &str,
    orig: Option<&Map<String, Value>>,
    patch: &Map<String, Value>,
) -> Result<Option<Map<String, Value>>, String> {
    match patch.get("$patch").map(|v| v.as_str()) {
        Some(Some("delete")) => return Ok(None),
        Some(Some("replace")) => {
            let mut clean = patch.clone();
            clean.remove("$patch");
            return smp_map(kind, path, None, &clean);
        }
        Some(Some("merge")) | None => {}
        Some(other) => return Err(format!("Unknown patch type: {:?}", other)),
    }
    let mut out = orig.cloned().unwrap_or_default();
    let mut orders: Vec<(String, Vec<Value>)> = vec![];
    let mut deletes: Vec<(String, Vec<Value>)> = vec![];
    for (k, v) in patch {
        if let Some(f) = k.strip_prefix("$setElementOrder/") {
            orders.push((
                f.to_string(),
                v.as_array()
                    .cloned()
                    .ok_or("invalid $setElementOrder list")?,
            ));
            continue;
        }
        if let Some(f) = k.strip_prefix("$deleteFromPrimitiveList/") {
            deletes.push((
                f.to_string(),
                v.as_array()
                    .cloned()
                    .ok_or("invalid $deleteFromPrimitiveList list")?,
            ));
            continue;
        }
        if k == "$patch" || k == "$retainKeys" {
            continue;
        }
        let sub = join(path, k);
        match v {
            Value::Null => {
                out.remove(k);
            }
            Value::Object(pm) => {
                let om = orig.and_then(|o| o.get(k)).and_then(|x| x.as_object());
                match smp_map(kind, &sub, om, pm)? {
                    Some(m) => {
                        out.insert(k.clone(), Value::Object(m));
                    }
                    None => {
                        out.remove(k);
                    }
                }
            }
            Value::Array(pl) => {
                let ol = orig.and_then(|o| o.get(k)).and_then(|x| x.as_array());
                out.insert(k.clone(), Value::Array(smp_list(kind, &sub, ol, pl)?));
            }
            scalar => {
                out.insert(k.clone(), scalar.clone());
            }
        }
    }
    for (f, vals) in deletes {
        if let Some(Value::Array(l)) = out.get_mut(&f) {
            l.retain(|x| !vals.contains(x));
        }
    }
    for (f, order) in orders {
        let strategy = list_strategy(kind, &join(path, &f));
        if let Some(Value::Array(l)) = out.get_mut(&f) {
            apply_order(l, &order, strategy);
        }
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        let keep: Vec<&str> = keep.iter().filter_map(|x| x.as_str()).collect();
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    Ok(Some(out))
}

fn is_directive(v: &Value, which: &str) -> bool {
    v.as_object()
        .and_then(|m| m.get("$patch"))
        .and_then(|x| x.as_str())
        == Some(which)
}

fn clean(kind: &str, path: &str, v: &Value) -> Result<Value, String> {
    Ok(match v {
        Value::Object(m) => Value::Object(smp_map(kind, path, None, m)?.unwrap_or_default()),
        other => other.clone(),
    })
}

fn smp_list(
    kind: &str,
    path: &str,
    orig: Option<&Vec<Value>>,
    patch: &[Value],
) -> Result<Vec<Value>, String> {
    let elem_path = format!("{}[]", path);
    let strategy = list_strategy(kind, path);
    if strategy == ListStrategy::Replace || patch.iter().any(|v| is_directive(v, "replace")) {
        return patch
            .iter()
            .filter(|v| !is_directive(v, "replace"))
            .map(|v| clean(kind, &elem_path, v))
            .collect();
    }
    let mut out: Vec<Value> = orig.cloned().unwrap_or_default();
    match strategy {
        ListStrategy::MergeScalars => {
            for v in patch {
                if v.is_object() || v.is_array() {
                    return Err(format!("{}: expected a list of primitives", path));
                }
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
        }
        ListStrategy::MergeKey(key) => {
            for v in patch {
                let m = v.as_object().ok_or_else(|| {
                    format!("{}: expected a list of maps with merge key {}", path, key)
                })?;
                let kv = m.get(key).ok_or_else(|| {
                    format!("map: {} does not contain declared merge key: {}", v, key)
                })?;
                let pos = out.iter().position(|o| o.get(key) == Some(kv));
                if is_directive(v, "delete") {
                    out.retain(|o| o.get(key) != Some(kv));
                    continue;
                }
                match pos {
                    Some(i) => {
                        let merged = smp_map(kind, &elem_path, out[i].as_object(), m)?;
                        match merged {
                            Some(mm) => out[i] = Value::Object(mm),
                            None => {
                                out.remove(i);
                            }
                        }
                    }
                    None => out.push(clean(kind, &elem_path, v)?),
                }
            }
        }
        ListStrategy::Replace => unreachable!(),
    }
    Ok(out)
}

/// `$setElementOrder`: the listed elements take the listed order within the
/// slots they occupy; elements the order does not mention keep their place.
fn apply_order(list: &mut [Value], order: &[Value], strategy: ListStrategy) {
    let rank = |v: &Value| -> Option<usize> {
        match strategy {
            ListStrategy::MergeKey(k) => {
                let kv = v.get(k)?;
                order.iter().position(|o| o.get(k) == Some(kv))
            }
            _ => order.iter().position(|o| o == v),
        }
    };
    let slots: Vec<usize> = (0..list.len())
        .filter(|i| rank(&list[*i]).is_some())
        .collect();
    let mut items: Vec<Value> = slots.iter().map(|i| list[*i].clone()).collect();
    items.sort_by_key(|v| rank(v).unwrap_or(usize::MAX));
    for (slot, item) in slots.into_iter().zip(items) {
        list[slot] = item;
    }
}

// ---------------------------------------------------------------- JSON patch

fn parse_pointer(p: &str) -> Result<Vec<String>, String> {
    if p.is_empty() {
        return Ok(vec![]);
    }
    if !p.starts_with('/') {
        return Err(format!(
            "JSON pointer must be empty or start with a \"/\": {:?}",
            p
        ));
    }
    Ok(p[1..]
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn get_ptr<'a>(doc: &'a Value, toks: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for t in toks {
        cur = match cur {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => a.get(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn parent_mut<'a>(doc: &'a mut Value, toks: &[String]) -> Option<&'a mut Value> {
    let mut cur = doc;
    for t in &toks[..toks.len().saturating_sub(1)] {
        cur = match cur {
            Value::Object(m) => m.get_mut(t)?,
            Value::Array(a) => a.get_mut(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn ptr_add(doc: &mut Value, toks: &[String], val: Value, path: &str) -> Result<(), String> {
    if toks.is_empty() {
        *doc = val;
        return Ok(());
    }
    let last = &toks[toks.len() - 1];
    let missing = || {
        format!(
            "add operation does not apply: doc is missing path: {:?}: missing value",
            path
        )
    };
    match parent_mut(doc, toks).ok_or_else(missing)? {
        Value::Object(m) => {
            m.insert(last.clone(), val);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(val);
            } else {
                let i: usize = last.parse().map_err(|_| missing())?;
                if i > a.len() {
                    return Err(format!(
                        "add operation does not apply: index out of bounds: {}",
                        path
                    ));
                }
                a.insert(i, val);
            }
        }
        _ => return Err(missing()),
    }
    Ok(())
}

fn ptr_remove(doc: &mut Value, toks: &[String], path: &str, op: &str) -> Result<Value, String> {
    let missing = || {
        format!(
            "{} operation does not apply: doc is missing path: {:?}: missing value",
            op, path
        )
    };
    if toks.is_empty() {
        return Err(missing());
    }
    let last = &toks[toks.len() - 1];
    match parent_mut(doc, toks).ok_or_else(missing)? {
        Value::Object(m) => m.remove(last).ok_or_else(missing),
        Value::Array(a) => {
            let i: usize = last.parse().map_err(|_| missing())?;
            if i >= a.len() {
                return Err(missing());
            }
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

/// Applies an RFC 6902 patch. Errors carry the upstream-like message (422).
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, JsonPatchError> {
    let ops = patch.as_array().ok_or_else(|| {
        JsonPatchError::Bad(
            "json: cannot unmarshal object into Go value of type jsonpatch.Patch".into(),
        )
    })?;
    if ops.len() > 10_000 {
        return Err(JsonPatchError::Bad(
            "The allowed maximum operations in a JSON patch is 10000".into(),
        ));
    }
    let mut doc = doc.clone();
    for op in ops {
        let kind = op.get("op").and_then(|x| x.as_str()).unwrap_or("");
        let path = op
            .get("path")
            .and_then(|x| x.as_str())
            .ok_or_else(|| JsonPatchError::Apply(format!("{} operation missing path", kind)))?;
        let toks = parse_pointer(path).map_err(JsonPatchError::Apply)?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| JsonPatchError::Apply(format!("{} operation missing value", kind)))
        };
        let from = || -> Result<(String, Vec<String>), JsonPatchError> {
            let f = op
                .get("from")
                .and_then(|x| x.as_str())
                .ok_or_else(|| JsonPatchError::Apply(format!("{} operation missing from", kind)))?;
            Ok((
                f.to_string(),
                parse_pointer(f).map_err(JsonPatchError::Apply)?,
            ))
        };
        match kind {
            "add" => ptr_add(&mut doc, &toks, value()?, path).map_err(JsonPatchError::Apply)?,
            "remove" => {
                ptr_remove(&mut doc, &toks, path, "remove").map_err(JsonPatchError::Apply)?;
            }
            "replace" => {
                if toks.is_empty() {
                    doc = value()?;
                } else {
                    ptr_remove(&mut doc, &toks, path, "replace").map_err(JsonPatchError::Apply)?;
                    ptr_add(&mut doc, &toks, value()?, path).map_err(JsonPatchError::Apply)?;
                }
            }
            "move" => {
                let (f, ft) = from()?;
                let v = ptr_remove(&mut doc, &ft, &f, "move").map_err(JsonPatchError::Apply)?;
                ptr_add(&mut doc, &toks, v, path).map_err(JsonPatchError::Apply)?;
            }
            "copy" => {
                let (f, ft) = from()?;
                let v = get_ptr(&doc, &ft).cloned().ok_or_else(|| {
                    JsonPatchError::Apply(format!(
                        "copy operation does not apply: doc is missing from path: {:?}",
                        f
                    ))
                })?;
                ptr_add(&mut doc, &toks, v, path).map_err(JsonPatchError::Apply)?;
            }
            "test" => {
                let want = value()?;
                if get_ptr(&doc, &toks) != Some(&want)
                    && !(want.is_null() && get_ptr(&doc, &toks).is_none())
                {
                    return Err(JsonPatchError::Apply(format!(
                        "testing value {} failed: test failed",
                        path
                    )));
                }
            }
            other => return Err(JsonPatchError::Apply(format!("Unexpected kind: {}", other))),
        }
    }
    Ok(doc)
}

#[derive(Debug)]
pub enum JsonPatchError {
    /// The patch document itself is malformed: 400.
    Bad(String),
    /// The patch does not apply: 422.
    Apply(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge() {
        let t = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        let r = merge_patch(&t, &json!({"a": null, "b": {"c": 5}, "l": [3]}));
        assert_eq!(r, json!({"b": {"c": 5, "d": 3}, "l": [3]}));
    }

    #[test]
    fn strategic_pod_status() {
        let pod = json!({"metadata": {"finalizers": ["a"], "ownerReferences": [{"uid": "1", "name": "x"}]},
            "status": {"phase": "Pending",
                "conditions": [{"type": "Ready", "status": "False"}, {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "a", "ready": false}, {"name": "b", "ready": false}]}});
        let patch = json!({"metadata": {"finalizers": ["b"], "$deleteFromPrimitiveList/finalizers": ["a"]},
            "status": {"$setElementOrder/conditions": [{"type": "PodScheduled"}, {"type": "Ready"}, {"type": "Initialized"}],
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "Initialized", "status": "True"}],
                "containerStatuses": [{"name": "a", "ready": true}],
                "phase": "Running", "message": null}});
        let r = strategic_merge("Pod", &pod, &patch).unwrap();
        assert_eq!(r["metadata"]["finalizers"], json!(["b"]));
        assert_eq!(r["status"]["phase"], "Running");
        let conds = r["status"]["conditions"].as_array().unwrap();
        let types: Vec<&str> = conds.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(types, vec!["PodScheduled", "Ready", "Initialized"]);
        assert_eq!(conds[1]["status"], "True");
        // containerStatuses has no patch strategy upstream: replaced.
        assert_eq!(
            r["status"]["containerStatuses"],
            json!([{"name": "a", "ready": true}])
        );
    }

    #[test]
    fn strategic_directives() {
        let node = json!({"status": {"addresses": [{"type": "InternalIP", "address": "1"}, {"type": "Hostname", "address": "h"}],
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]}});
        let patch = json!({"status": {"addresses": [{"$patch": "replace"}, {"type": "InternalIP", "address": "2"}],
            "conditions": [{"type": "DiskPressure", "$patch": "delete"}]}});
        let r = strategic_merge("Node", &node, &patch).unwrap();
        assert_eq!(
            r["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "2"}])
        );
        assert_eq!(
            r["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
        let r2 = strategic_merge(
            "Node",
            &node,
            &json!({"status": {"$patch": "replace", "phase": "x"}}),
        )
        .unwrap();
        assert_eq!(r2["status"], json!({"phase": "x"}));
        assert!(strategic_merge(
            "Node",
            &node,
            &json!({"status": {"conditions": [{"status": "x"}]}})
        )
        .is_err());
        assert!(strategic_merge("Node", &node, &json!([1])).is_err());
    }

    #[test]
    fn jsonpatch() {
        let d = json!({"a": {"b": [1, 2]}, "x~y": 1});
        let r = json_patch(
            &d,
            &json!([
                {"op": "test", "path": "/a/b/0", "value": 1},
                {"op": "add", "path": "/a/b/-", "value": 3},
                {"op": "replace", "path": "/x~0y", "value": 2},
                {"op": "move", "from": "/a/b", "path": "/c"},
                {"op": "copy", "from": "/c", "path": "/d"},
                {"op": "remove", "path": "/a"}
            ]),
        )
        .unwrap();
        assert_eq!(r, json!({"c": [1, 2, 3], "d": [1, 2, 3], "x~y": 2}));
        assert!(matches!(
            json_patch(&d, &json!([{"op": "test", "path": "/a/b/0", "value": 9}])),
            Err(JsonPatchError::Apply(_))
        ));
        assert!(matches!(
            json_patch(&d, &json!([{"op": "remove", "path": "/nope"}])),
            Err(JsonPatchError::Apply(_))
        ));
        assert!(matches!(
            json_patch(&d, &json!({})),
            Err(JsonPatchError::Bad(_))
        ));
    }
}
