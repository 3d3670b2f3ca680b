//! The three PATCH flavours of the real API server:
//! - JSON merge patch (RFC 7386), `application/merge-patch+json`
//! - strategic merge patch, `application/strategic-merge-patch+json`
//!   (smp.rs)
//! - JSON patch (RFC 6902), `application/json-patch+json`

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

/// Strategic merge patch lives in smp.rs.
pub use crate::smp::strategic_merge;

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
