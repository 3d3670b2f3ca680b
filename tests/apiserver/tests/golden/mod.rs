//! The fidelity fixtures: what real kube-apiservers (v1.22.3, v1.32.13)
//! stored and answered (see `shared/fidelity/README.md` beside the
//! repository). Shared by the golden tests, which compare the double
//! against them.
#![allow(dead_code)] // each test binary compiles this shared module and uses only part of it

use apiserver_double::version::Version;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// `RKUBELET_FIDELITY_DIR`, else `shared/fidelity` beside the repository
/// (this crate is `<repo>/tests/apiserver`). A missing directory fails the
/// test: a golden test that silently passes without its fixtures proves
/// nothing.
pub fn dir() -> PathBuf {
    let d = match std::env::var_os("RKUBELET_FIDELITY_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fidelity"),
    };
    assert!(
        d.join("README.md").is_file(),
        "fidelity fixtures not found at {} (set RKUBELET_FIDELITY_DIR, or put shared/fidelity \
         beside the repository)",
        d.display()
    );
    d
}

/// One capture: a directory of the fixtures and the control-plane release
/// that answered in it, which the double emulates to replay it.
#[derive(Debug, Clone, Copy)]
pub struct Capture {
    pub dir: &'static str,
    pub release: Version,
}

/// The upstream v1.22.3 kubelet on a v1.22.3 control plane.
pub const UPSTREAM_V1_22: Capture = Capture {
    dir: "upstream-v1.22",
    release: Version::new(22),
};

/// rkubelet on the same v1.22.3 control plane.
pub const RKUBELET_V1_22: Capture = Capture {
    dir: "rkubelet",
    release: Version::new(22),
};

/// The upstream v1.32.13 kubelet on a v1.32.13 control plane built from
/// OpenShift's fork (see [`without_openshift_service_ca`]).
pub const UPSTREAM_V1_32: Capture = Capture {
    dir: "upstream-v1.32",
    release: Version::new(32),
};

impl Capture {
    /// A file of the capture, relative to the fixtures' directory.
    pub fn file(&self, name: &str) -> String {
        format!("{}/{}", self.dir, name)
    }

    /// Its audit log, one event per line.
    pub fn audit(&self) -> Vec<Value> {
        audit(&self.file("audit-node.jsonl"))
    }
}

/// The projected source OpenShift's fork of kube-apiserver appends to every
/// `kube-api-access-*` volume, after upstream's three (token, kube-root-ca.crt,
/// namespace): the configMap `openshift-service-ca.crt`. Upstream's server,
/// which the double follows, has no such source. This removes it, exactly
/// that value and only as the last source of such a volume, from a pod a
/// server of the fork stored, and returns how many it removed.
pub fn without_openshift_service_ca(pod: &mut Value) -> usize {
    let openshift = serde_json::json!({"configMap": {
        "name": "openshift-service-ca.crt",
        "items": [{"key": "service-ca.crt", "path": "service-ca.crt"}]}});
    let mut removed = 0;
    let volumes = pod
        .get_mut("spec")
        .and_then(|s| s.get_mut("volumes"))
        .and_then(Value::as_array_mut);
    for vol in volumes.into_iter().flatten() {
        let generated = vol["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("kube-api-access-"));
        let sources = vol
            .get_mut("projected")
            .and_then(|p| p.get_mut("sources"))
            .and_then(Value::as_array_mut);
        if let (true, Some(sources)) = (generated, sources) {
            if sources.len() == 4 && sources[3] == openshift {
                sources.pop();
                removed += 1;
            }
        }
    }
    removed
}

pub fn read(rel: &str) -> String {
    let p = dir().join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {}", p.display(), e))
}

pub fn json(rel: &str) -> Value {
    serde_json::from_str(&read(rel)).unwrap_or_else(|e| panic!("{}: {}", rel, e))
}

/// One audit event per line.
pub fn audit(rel: &str) -> Vec<Value> {
    read(rel)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {}", rel, e)))
        .collect()
}

/// The documents of a multi-document YAML file, as kubectl would send them.
pub fn yaml_docs(rel: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(&read(rel))
        .map(|doc| {
            let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {}", rel, e));
            as_kubectl_sends(v)
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// kubectl reads YAML 1.1 and sends JSON from Go values; serde_norway reads
/// YAML 1.2. Two differences matter for the fixtures: `0644` is an octal int
/// in YAML 1.1 but a string in 1.2, and `1e3` is a float here but reaches
/// the server as the JSON number `1000` (Go prints an integral float64 so).
fn as_kubectl_sends(v: Value) -> Value {
    match v {
        Value::String(s) if is_yaml11_octal(&s) => {
            Value::from(i64::from_str_radix(&s[1..], 8).unwrap_or_default())
        }
        Value::Number(n) => match n.as_f64() {
            Some(f) if !n.is_i64() && !n.is_u64() && f.fract() == 0.0 && f.abs() < 1e15 => {
                Value::from(f as i64)
            }
            _ => Value::Number(n),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(as_kubectl_sends).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, as_kubectl_sends(v)))
                .collect::<Map<String, Value>>(),
        ),
        other => other,
    }
}

fn is_yaml11_octal(s: &str) -> bool {
    s.len() > 1 && s.starts_with('0') && s[1..].bytes().all(|b| (b'0'..=b'7').contains(&b))
}

/// The names generated per object (`kube-api-access-` + 5 random
/// characters) differ between runs: both sides get `kube-api-access-*`.
pub fn normalise_generated_names(v: &mut Value) {
    match v {
        Value::String(s) => {
            if let Some(rest) = s.strip_prefix("kube-api-access-") {
                if rest.len() == 5 {
                    *s = "kube-api-access-*".into();
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(normalise_generated_names),
        Value::Object(m) => m.values_mut().for_each(normalise_generated_names),
        _ => {}
    }
}

/// Removes the value at `path` (object keys). Returns whether something
/// was removed.
pub fn remove_path(v: &mut Value, path: &[&str]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    parents
        .iter()
        .try_fold(v, |cur, k| cur.get_mut(*k))
        .and_then(Value::as_object_mut)
        .is_some_and(|m| m.remove(*last).is_some())
}

/// Every differing leaf between `want` and `got`, as `path: want != got`
/// lines, so a failure names each field instead of dumping two objects.
pub fn diff(want: &Value, got: &Value) -> Vec<String> {
    let mut out = vec![];
    diff_at("", want, got, &mut out);
    out
}

fn diff_at(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            let mut keys: Vec<&String> = w.keys().chain(g.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let (wv, gv) = (w.get(k), g.get(k));
                let p = format!("{}.{}", path, k);
                match (wv, gv) {
                    (Some(wv), Some(gv)) => diff_at(&p, wv, gv, out),
                    (Some(wv), None) => out.push(format!("{}: want {} but absent", p, wv)),
                    (None, Some(gv)) => out.push(format!("{}: unexpected {}", p, gv)),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(w), Value::Array(g)) if w.len() == g.len() => {
            for (i, (wv, gv)) in w.iter().zip(g).enumerate() {
                diff_at(&format!("{}[{}]", path, i), wv, gv, out);
            }
        }
        _ if want != got => out.push(format!("{}: want {} got {}", path, want, got)),
        _ => {}
    }
}
