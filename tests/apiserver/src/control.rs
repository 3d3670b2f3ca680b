//! Test control: fault injection, request statistics and the audit log.
//! Served under /__double/ to admin identities only.

use crate::util;
use rkubelet_util::lock;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{LineWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug, Clone)]
pub enum FaultKind {
    /// Answer with this status (429 adds Retry-After).
    Status { code: u16, retry_after: Option<u64> },
    /// Close the connection without answering.
    Drop,
    /// Sleep before answering.
    Stall { ms: u64 },
    /// The next watch sends one malformed line, then the connection is cut.
    TruncateWatch,
    /// Answer 200 with a body that is not JSON, then close (a broken
    /// proxy or a corrupted response).
    Garbage,
}

#[derive(Debug, Clone)]
pub struct Fault {
    pub kind: FaultKind,
    pub remaining: u64,
    /// Only requests whose path contains this.
    pub path_contains: Option<String>,
    /// Only requests of this verb (get, list, watch, create, update, patch, delete).
    pub verb: Option<String>,
}

impl Fault {
    fn to_json(&self) -> Value {
        let mut v = match &self.kind {
            FaultKind::Status { code, retry_after } => {
                json!({"status": code, "retryAfterSeconds": retry_after})
            }
            FaultKind::Drop => json!({"dropConnections": true}),
            FaultKind::Stall { ms } => json!({"stallMs": ms}),
            FaultKind::TruncateWatch => json!({"truncateWatch": true}),
            FaultKind::Garbage => json!({"garbageBody": true}),
        };
        v["remaining"] = json!(self.remaining);
        v["pathContains"] = json!(self.path_contains);
        v["verb"] = json!(self.verb);
        v
    }
}

/// What the faults decided for one request.
#[derive(Debug, Default)]
pub struct Decision {
    pub stall_ms: u64,
    pub drop: bool,
    pub status: Option<(u16, Option<u64>)>,
    pub truncate_watch: bool,
    pub garbage: bool,
}

#[derive(Default)]
pub struct Faults {
    rules: Mutex<Vec<Fault>>,
}

impl Faults {
    /// Adds rules from a control request body. Returns the number added.
    pub fn add(&self, v: &Value) -> Result<usize, String> {
        let obj = v.as_object().ok_or("expected a JSON object")?;
        let count = obj.get("count").and_then(|x| x.as_u64()).unwrap_or(1);
        let path_contains = obj
            .get("pathContains")
            .and_then(|x| x.as_str())
            .map(String::from);
        let verb = obj
            .get("verb")
            .and_then(|x| x.as_str())
            .map(|s| s.to_ascii_lowercase());
        let mut new = vec![];
        let mk = |kind: FaultKind, remaining: u64| Fault {
            kind,
            remaining,
            path_contains: path_contains.clone(),
            verb: verb.clone(),
        };
        if let Some(code) = obj.get("status").and_then(|x| x.as_u64()) {
            if !(100..=599).contains(&code) {
                return Err("status must be an HTTP status code".into());
            }
            let retry = obj
                .get("retryAfterSeconds")
                .and_then(|x| x.as_u64())
                .or(if code == 429 { Some(1) } else { None });
            new.push(mk(
                FaultKind::Status {
                    code: code as u16,
                    retry_after: retry,
                },
                count,
            ));
        }
        if let Some(n) = obj.get("dropConnections").and_then(|x| x.as_u64()) {
            new.push(mk(FaultKind::Drop, n));
        }
        if let Some(ms) = obj.get("stallMs").and_then(|x| x.as_u64()) {
            new.push(mk(FaultKind::Stall { ms }, count));
        }
        if obj.get("truncateWatch").and_then(|x| x.as_bool()) == Some(true) {
            new.push(mk(FaultKind::TruncateWatch, count));
        }
        if obj.get("garbageBody").and_then(|x| x.as_bool()) == Some(true) {
            new.push(mk(FaultKind::Garbage, count));
        }
        let n = new.len();
        lock(&self.rules).extend(new);
        Ok(n)
    }

    pub fn clear(&self) {
        lock(&self.rules).clear();
    }

    pub fn to_json(&self) -> Value {
        json!(lock(&self.rules)
            .iter()
            .map(|f| f.to_json())
            .collect::<Vec<_>>())
    }

    /// Consumes at most one rule of each kind that matches the request.
    pub fn decide(&self, path: &str, verb: &str) -> Decision {
        let mut d = Decision::default();
        let mut rules = lock(&self.rules);
        let (mut stall, mut drop, mut status, mut trunc) = (false, false, false, false);
        let mut garbage = false;
        for r in rules.iter_mut() {
            if r.remaining == 0
                || r.path_contains
                    .as_deref()
                    .map(|p| !path.contains(p))
                    .unwrap_or(false)
                || r.verb.as_deref().map(|v| v != verb).unwrap_or(false)
            {
                continue;
            }
            match &r.kind {
                FaultKind::Stall { ms } if !stall => {
                    stall = true;
                    d.stall_ms = *ms;
                }
                FaultKind::Drop if !drop => {
                    drop = true;
                    d.drop = true;
                }
                FaultKind::Status { code, retry_after } if !status => {
                    status = true;
                    d.status = Some((*code, *retry_after));
                }
                FaultKind::TruncateWatch if !trunc && verb == "watch" => {
                    trunc = true;
                    d.truncate_watch = true;
                }
                FaultKind::Garbage if !garbage => {
                    garbage = true;
                    d.garbage = true;
                }
                _ => continue,
            }
            r.remaining -= 1;
        }
        rules.retain(|r| r.remaining > 0);
        d
    }
}

struct StatsInner {
    since: Instant,
    since_wall: String,
    total: u64,
    by_verb_resource: BTreeMap<String, u64>,
    by_user_agent: BTreeMap<String, u64>,
    by_user: BTreeMap<String, u64>,
    by_code: BTreeMap<String, u64>,
}

pub struct Stats {
    inner: Mutex<StatsInner>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            inner: Mutex::new(StatsInner {
                since: Instant::now(),
                since_wall: util::now_rfc3339(),
                total: 0,
                by_verb_resource: BTreeMap::new(),
                by_user_agent: BTreeMap::new(),
                by_user: BTreeMap::new(),
                by_code: BTreeMap::new(),
            }),
        }
    }
}

impl Stats {
    pub fn record(&self, key: &str, user_agent: &str, user: &str, code: u16) {
        let mut s = lock(&self.inner);
        s.total += 1;
        *s.by_verb_resource.entry(key.to_string()).or_default() += 1;
        *s.by_user_agent.entry(user_agent.to_string()).or_default() += 1;
        *s.by_user.entry(user.to_string()).or_default() += 1;
        *s.by_code.entry(code.to_string()).or_default() += 1;
    }

    pub fn reset(&self) {
        *lock(&self.inner) = Stats::default()
            .inner
            .into_inner()
            .unwrap_or_else(|p| p.into_inner());
    }

    pub fn to_json(&self) -> Value {
        let s = lock(&self.inner);
        let secs = s.since.elapsed().as_secs_f64();
        json!({
            "since": s.since_wall,
            "elapsedSeconds": secs,
            "total": s.total,
            "perMinute": if secs > 0.0 { s.total as f64 * 60.0 / secs } else { 0.0 },
            "byVerbResource": s.by_verb_resource,
            "byUserAgent": s.by_user_agent,
            "byUser": s.by_user,
            "byCode": s.by_code,
        })
    }
}

/// One JSON line per request: time, user, verb, path, status.
pub struct Audit {
    out: Mutex<Option<LineWriter<File>>>,
}

impl Audit {
    pub fn open(path: &Path) -> Audit {
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
            .map(LineWriter::new);
        Audit { out: Mutex::new(f) }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn log(
        &self,
        user: &str,
        groups: &[String],
        verb: &str,
        method: &str,
        uri: &str,
        info: &crate::handlers::Info,
        code: u16,
        ua: &str,
        ms: u128,
    ) {
        self.log_with(user, groups, verb, method, uri, info, code, ua, ms, None)
    }

    /// `log` with extra fields merged into the line (the kubelet proxy's
    /// upgrade protocols).
    #[allow(clippy::too_many_arguments)]
    pub fn log_with(
        &self,
        user: &str,
        groups: &[String],
        verb: &str,
        method: &str,
        uri: &str,
        info: &crate::handlers::Info,
        code: u16,
        ua: &str,
        ms: u128,
        extra: Option<Value>,
    ) {
        let mut line = json!({
            "ts": util::now_micro_time(), "user": user, "groups": groups, "verb": verb, "method": method,
            "path": uri, "resource": info.resource, "subresource": info.sub, "namespace": info.ns,
            "name": info.name, "code": code, "userAgent": ua, "latencyMs": ms as u64,
        });
        if let (Some(Value::Object(m)), Some(l)) = (extra, line.as_object_mut()) {
            l.extend(m);
        }
        if let Some(w) = lock(&self.out).as_mut() {
            let _ = writeln!(w, "{}", line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_count_down_and_filter() {
        let f = Faults::default();
        f.add(&json!({"status": 429, "count": 2, "pathContains": "/pods"}))
            .unwrap();
        f.add(&json!({"dropConnections": 1, "verb": "watch"}))
            .unwrap();
        assert!(f.decide("/api/v1/nodes", "get").status.is_none());
        assert_eq!(
            f.decide("/api/v1/pods", "list").status,
            Some((429, Some(1)))
        );
        let d = f.decide("/api/v1/pods", "watch");
        assert!(d.drop && d.status.is_some());
        assert!(f.decide("/api/v1/pods", "watch").status.is_none());
        f.add(&json!({"garbageBody": true, "pathContains": "/nodes"}))
            .unwrap();
        assert!(!f.decide("/api/v1/pods", "get").garbage);
        assert!(f.decide("/api/v1/nodes/n", "get").garbage);
        assert!(!f.decide("/api/v1/nodes/n", "get").garbage);
        assert!(f.add(&json!({"status": 9999})).is_err());
        assert!(f.add(&json!([1])).is_err());
    }
}
