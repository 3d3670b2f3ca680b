//! Field selectors (`a=b,c!=d`) and label selectors (equality and set-based).

use crate::resources::{field_labels, ResourceDef};
use crate::status::ApiError;
use crate::util::get;
use serde_json::Value;

#[derive(Debug, Clone, Default)]
pub struct FieldSelector {
    pub terms: Vec<(String, bool /*equal*/, String)>,
}

impl FieldSelector {
    pub fn parse(s: &str, def: &ResourceDef) -> Result<Self, ApiError> {
        let mut terms = vec![];
        for part in split_top(s) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{}'; can't understand '{}'",
                    s, part
                )));
            };
            let k = k.trim();
            if k != "metadata.name" && k != "metadata.namespace" && !field_labels(def).contains(&k)
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {}",
                    k
                )));
            }
            terms.push((k.to_string(), eq, unescape(v.trim())));
        }
        Ok(FieldSelector { terms })
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The single `metadata.name=X` value, if the selector pins one.
    pub fn exact_name(&self) -> Option<&str> {
        self.terms
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.terms
            .iter()
            .all(|(k, eq, v)| (field_value(obj, k) == *v) == *eq)
    }
}

fn unescape(v: &str) -> String {
    // Field selector values escape `\,` `\=` `\\`.
    let mut out = String::new();
    let mut esc = false;
    for c in v.chars() {
        if esc {
            out.push(c);
            esc = false;
        } else if c == '\\' {
            esc = true;
        } else {
            out.push(c);
        }
    }
    out
}

fn field_value(obj: &Value, label: &str) -> String {
    let path: Vec<&str> = match label {
        "source" => vec!["source", "component"],
        other => other.split('.').collect(),
    };
    match get(obj, &path) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        _ => match label {
            "spec.hostNetwork" | "spec.unschedulable" => "false".into(),
            _ => String::new(),
        },
    }
}

/// Splits on commas outside parentheses (for `k in (a,b),x=y`).
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (vec![], String::new(), 0i32);
    let mut esc = false;
    for c in s.chars() {
        if esc {
            cur.push(c);
            esc = false;
            continue;
        }
        match c {
            '\\' => {
                esc = true;
                cur.push(c);
            }
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

#[derive(Debug, Clone)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
    Gt(String, i64),
    Lt(String, i64),
}

#[derive(Debug, Clone, Default)]
pub struct LabelSelector {
    reqs: Vec<Req>,
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let bad =
            |why: &str| ApiError::bad_request(format!("unable to parse requirement: {}", why));
        let mut reqs = vec![];
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                continue;
            }
            let set = |rest: &str| -> Result<Vec<String>, ApiError> {
                let rest = rest.trim();
                let inner = rest
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| bad(p))?;
                Ok(inner
                    .split(',')
                    .map(|x| x.trim().to_string())
                    .filter(|x| !x.is_empty())
                    .collect())
            };
            let r = if let Some(k) = p.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = p.split_once("!=") {
                Req::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = p.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some(i) = p.find(" notin ") {
                Req::NotIn(p[..i].trim().into(), set(&p[i + 7..])?)
            } else if let Some(i) = p.find(" in ") {
                Req::In(p[..i].trim().into(), set(&p[i + 4..])?)
            } else if let Some((k, v)) = p.split_once('>') {
                Req::Gt(k.trim().into(), v.trim().parse().map_err(|_| bad(p))?)
            } else if let Some((k, v)) = p.split_once('<') {
                Req::Lt(k.trim().into(), v.trim().parse().map_err(|_| bad(p))?)
            } else if p
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Req::Exists(p.to_string())
            } else {
                return Err(bad(p));
            };
            reqs.push(r);
        }
        Ok(LabelSelector { reqs })
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = get(obj, &["metadata", "labels"]).and_then(|l| l.as_object());
        let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(|v| v.as_str());
        self.reqs.iter().all(|r| match r {
            Req::Eq(k, v) => label(k) == Some(v.as_str()),
            Req::NotEq(k, v) => label(k) != Some(v.as_str()),
            Req::In(k, vs) => label(k).map(|x| vs.iter().any(|v| v == x)).unwrap_or(false),
            Req::NotIn(k, vs) => label(k).map(|x| !vs.iter().any(|v| v == x)).unwrap_or(true),
            Req::Exists(k) => label(k).is_some(),
            Req::NotExists(k) => label(k).is_none(),
            Req::Gt(k, n) => label(k)
                .and_then(|x| x.parse::<i64>().ok())
                .map(|x| x > *n)
                .unwrap_or(false),
            Req::Lt(k, n) => label(k)
                .and_then(|x| x.parse::<i64>().ok())
                .map(|x| x < *n)
                .unwrap_or(false),
        })
    }
}

/// A resource's selection: namespace + field + label selectors.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub namespace: Option<String>,
    pub fields: FieldSelector,
    pub labels: LabelSelector,
}

impl Selection {
    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace {
            if crate::util::namespace_of(obj) != ns {
                return false;
            }
        }
        self.fields.matches(obj) && self.labels.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors() {
        let def = crate::resources::find("", "v1", "pods").unwrap();
        let pod = json!({"metadata": {"name": "a", "namespace": "d", "labels": {"app": "x", "tier": "1"}}, "spec": {"nodeName": "n1"}});
        assert!(
            FieldSelector::parse("spec.nodeName=n1,metadata.namespace=d", def)
                .unwrap()
                .matches(&pod)
        );
        assert!(!FieldSelector::parse("spec.nodeName!=n1", def)
            .unwrap()
            .matches(&pod));
        assert!(FieldSelector::parse("spec.nodeName=", def)
            .unwrap()
            .matches(&json!({})));
        assert!(FieldSelector::parse("spec.bogus=1", def).is_err());
        assert!(LabelSelector::parse("app=x,tier in (1,2),!gone,app")
            .unwrap()
            .matches(&pod));
        assert!(!LabelSelector::parse("app notin (x)").unwrap().matches(&pod));
        assert!(LabelSelector::parse("tier>0").unwrap().matches(&pod));
        assert!(LabelSelector::parse("a b c").is_err());
    }
}
