//! The kinds behind pod volumes: ConfigMaps, Secrets, PersistentVolumes and
//! PersistentVolumeClaims. Decoding checks (base64 `[]byte` fields), the v1
//! defaulters and conversions (Secret stringData → data), the strategies'
//! status handling and the validation rules of pkg/apis/core/validation
//! (keys, size, Secret types, `immutable`).

use crate::kinds::FieldErrs;
use crate::resources::ResourceDef;
use crate::util::{get, get_str, obj_field_mut};
use base64::Engine;
use serde_json::{json, Map, Value};

/// corevalidation.MaxSecretSize, also the ConfigMap limit.
const MAX_SIZE: usize = 1024 * 1024;
const SA_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
const IMMUTABLE_MSG: &str = "Forbidden: field is immutable when `immutable` is set";

/// Go's base64.StdEncoding as encoding/json decodes `[]byte`: \r and \n are
/// skipped; the error names the offending input byte.
fn go_b64_decode(s: &str) -> Result<Vec<u8>, usize> {
    let clean: String = s.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    base64::engine::general_purpose::STANDARD
        .decode(clean.as_bytes())
        .map_err(|e| match e {
            base64::DecodeError::InvalidByte(o, _) => o,
            base64::DecodeError::InvalidLastSymbol(o, _) => o,
            base64::DecodeError::InvalidLength(l) => l,
            base64::DecodeError::InvalidPadding => clean.len(),
        })
}

/// What the typed decoder rejects before anything else (400 BadRequest):
/// base64 `[]byte` maps (Secret data, ConfigMap binaryData) and string maps.
pub fn check_decodable(def: &ResourceDef, obj: &Value) -> Result<(), String> {
    let (bytes_field, string_fields): (&str, &[&str]) = match (def.group, def.plural) {
        ("", "secrets") => ("data", &["stringData"]),
        ("", "configmaps") => ("binaryData", &["data"]),
        _ => return Ok(()),
    };
    let fail = |why: String| {
        format!(
            "{} in version \"v1\" cannot be handled as a {}: {}",
            def.kind, def.kind, why
        )
    };
    if let Some(m) = obj.get(bytes_field).filter(|v| !v.is_null()) {
        let Some(m) = m.as_object() else {
            return Err(fail(format!(
                "json: cannot unmarshal {} into Go struct field {}.{} of type map[string][]uint8",
                kind_of(m),
                def.kind,
                bytes_field
            )));
        };
        for v in m.values() {
            match v {
                Value::Null => {}
                Value::String(s) => {
                    go_b64_decode(s)
                        .map_err(|at| fail(format!("illegal base64 data at input byte {}", at)))?;
                }
                other => {
                    return Err(fail(format!(
                        "json: cannot unmarshal {} into Go struct field {}.{} of type []uint8",
                        kind_of(other),
                        def.kind,
                        bytes_field
                    )))
                }
            }
        }
    }
    for f in string_fields {
        if let Some(m) = obj.get(*f).filter(|v| !v.is_null()) {
            let ok = m
                .as_object()
                .map(|m| m.values().all(|v| v.is_string() || v.is_null()))
                .unwrap_or(false);
            if !ok {
                return Err(fail(format!(
                    "json: cannot unmarshal {} into Go struct field {}.{} of type string",
                    kind_of(m),
                    def.kind,
                    f
                )));
            }
        }
    }
    Ok(())
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn set_default(m: &mut Map<String, Value>, k: &str, v: Value) {
    if m.get(k).map(|x| x.is_null() || x == "").unwrap_or(true) {
        m.insert(k.to_string(), v);
    }
}

/// Defaults and conversions applied to every decoded object.
pub fn apply_defaults(def: &ResourceDef, obj: &mut Value) {
    match (def.group, def.plural) {
        ("", "secrets") => {
            let Some(m) = obj.as_object_mut() else { return };
            set_default(m, "type", json!("Opaque"));
            // Conversion v1 → internal: stringData overwrites data, then is dropped.
            if let Some(Value::Object(sd)) = m.remove("stringData") {
                if !m.get("data").map(|d| d.is_object()).unwrap_or(false) {
                    m.insert("data".into(), json!({}));
                }
                if let Some(d) = m.get_mut("data").and_then(|d| d.as_object_mut()) {
                    for (k, v) in sd {
                        let s = v.as_str().unwrap_or("");
                        d.insert(
                            k,
                            json!(base64::engine::general_purpose::STANDARD.encode(s)),
                        );
                    }
                }
            }
        }
        ("", "persistentvolumes") => {
            let spec = obj_field_mut(obj, "spec");
            set_default(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
            set_default(spec, "volumeMode", json!("Filesystem"));
            if let Some(h) = spec.get_mut("hostPath").and_then(|h| h.as_object_mut()) {
                if h.get("type").map(|t| t.is_null()).unwrap_or(true) {
                    h.insert("type".into(), json!(""));
                }
            }
            set_default(obj_field_mut(obj, "status"), "phase", json!("Pending"));
        }
        ("", "persistentvolumeclaims") => {
            set_default(
                obj_field_mut(obj, "spec"),
                "volumeMode",
                json!("Filesystem"),
            );
            set_default(obj_field_mut(obj, "status"), "phase", json!("Pending"));
        }
        _ => {}
    }
}

/// Status on create (the strategies' PrepareForCreate, then the defaults a
/// read from storage applies).
pub fn status_on_create(def: &ResourceDef, obj: &mut Value) {
    match (def.group, def.plural) {
        ("", "persistentvolumeclaims") => obj["status"] = json!({"phase": "Pending"}),
        ("", "persistentvolumes") => {
            obj["status"] =
                json!({"phase": "Pending", "lastPhaseTransitionTime": crate::util::now_rfc3339()})
        }
        _ => {}
    }
}

/// The PV status strategy: a phase change stamps lastPhaseTransitionTime
/// (unless the client set a new one).
pub fn prepare_status_update(def: &ResourceDef, old: &Value, new: &mut Value) {
    if !def.is("", "persistentvolumes") {
        return;
    }
    let phase = |v: &Value| get_str(v, &["status", "phase"]).unwrap_or("").to_string();
    let ts = |v: &Value| get(v, &["status", "lastPhaseTransitionTime"]).cloned();
    if phase(old) != phase(new) && ts(old) == ts(new) {
        obj_field_mut(new, "status").insert(
            "lastPhaseTransitionTime".into(),
            json!(crate::util::now_rfc3339()),
        );
    }
}

fn invalid(errs: &mut FieldErrs, field: String, val: &str, detail: &str) {
    errs.push((
        field,
        "FieldValueInvalid",
        format!("Invalid value: {:?}: {}", val, detail),
    ));
}

/// IsConfigMapKey.
fn check_key(errs: &mut FieldErrs, path: &str, k: &str) {
    let field = format!("{}[{}]", path, k);
    if k.is_empty()
        || !k
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        invalid(errs, field, k, "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')");
    } else if k.len() > 253 {
        invalid(errs, field, k, "must be no more than 253 characters");
    } else if k == "." {
        invalid(errs, field, k, "must not be '.'");
    } else if k == ".." {
        invalid(errs, field, k, "must not be '..'");
    } else if k.starts_with("..") {
        invalid(errs, field, k, "must not start with '..'");
    }
}

fn map_of<'a>(obj: &'a Value, k: &str) -> Option<&'a Map<String, Value>> {
    obj.get(k).and_then(|m| m.as_object())
}

fn decoded_len(v: &Value) -> usize {
    v.as_str()
        .and_then(|s| go_b64_decode(s).ok())
        .map(|b| b.len())
        .unwrap_or(0)
}

/// Treats a missing, null or empty map alike (what a storage round trip does).
fn same_map(a: Option<&Value>, b: Option<&Value>) -> bool {
    let norm = |v: Option<&Value>| match v {
        Some(Value::Object(m)) if !m.is_empty() => Some(m.clone()),
        _ => None,
    };
    norm(a) == norm(b)
}

/// Validation on create (`old` None) and update.
pub fn validate(def: &ResourceDef, obj: &Value, old: Option<&Value>, errs: &mut FieldErrs) {
    match (def.group, def.plural) {
        ("", "configmaps") => {
            let mut size = 0;
            for (k, v) in map_of(obj, "data").into_iter().flatten() {
                check_key(errs, "data", k);
                size += v.as_str().map(|s| s.len()).unwrap_or(0);
            }
            let data = map_of(obj, "data");
            for (k, v) in map_of(obj, "binaryData").into_iter().flatten() {
                check_key(errs, "binaryData", k);
                size += decoded_len(v);
                if data.map(|d| d.contains_key(k)).unwrap_or(false) {
                    invalid(
                        errs,
                        format!("data[{}]", k),
                        k,
                        "duplicate of key present in binaryData",
                    );
                }
            }
            if size > MAX_SIZE {
                errs.push((
                    "".into(),
                    "FieldValueTooLong",
                    format!("Too long: may not be more than {} bytes", MAX_SIZE),
                ));
            }
            if let Some(old) = old {
                immutable(obj, old, &["data", "binaryData"], errs);
            }
        }
        ("", "secrets") => {
            let mut size = 0;
            let data = map_of(obj, "data");
            for (k, v) in data.into_iter().flatten() {
                check_key(errs, "data", k);
                size += decoded_len(v);
            }
            if size > MAX_SIZE {
                errs.push((
                    "data".into(),
                    "FieldValueTooLong",
                    format!("Too long: may not be more than {} bytes", MAX_SIZE),
                ));
            }
            let has = |k: &str| data.map(|d| d.contains_key(k)).unwrap_or(false);
            let mut required =
                |f: String| errs.push((f, "FieldValueRequired", "Required value".into()));
            let sa_name =
                get_str(obj, &["metadata", "annotations", SA_NAME_ANNOTATION]).unwrap_or("");
            match get_str(obj, &["type"]).unwrap_or("Opaque") {
                "kubernetes.io/service-account-token" if sa_name.is_empty() => {
                    required("metadata.annotations[kubernetes.io/service-account.name]".into())
                }
                "kubernetes.io/dockercfg" if !has(".dockercfg") => {
                    required("data[.dockercfg]".into())
                }
                "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
                    required("data[.dockerconfigjson]".into())
                }
                "kubernetes.io/ssh-auth" if !has("ssh-privatekey") => {
                    required("data[ssh-privatekey]".into())
                }
                "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
                    required("data[username]".into());
                    required("data[password]".into());
                }
                "kubernetes.io/tls" => {
                    for k in ["tls.key", "tls.crt"] {
                        if !has(k) {
                            required(format!("data[{}]", k));
                        }
                    }
                }
                _ => {}
            }
            if let Some(old) = old {
                let (nt, ot) = (
                    get_str(obj, &["type"]).unwrap_or(""),
                    get_str(old, &["type"]).unwrap_or(""),
                );
                if nt != ot {
                    invalid(errs, "type".into(), nt, "field is immutable");
                }
                immutable(obj, old, &["data"], errs);
            }
        }
        _ => {}
    }
}

/// ValidateConfigMapUpdate / ValidateSecretUpdate: once `immutable: true`,
/// the flag and the data stay.
fn immutable(obj: &Value, old: &Value, fields: &[&str], errs: &mut FieldErrs) {
    if old.get("immutable").and_then(|x| x.as_bool()) != Some(true) {
        return;
    }
    if obj.get("immutable").and_then(|x| x.as_bool()) != Some(true) {
        errs.push((
            "immutable".into(),
            "FieldValueForbidden",
            IMMUTABLE_MSG.into(),
        ));
    }
    for f in fields {
        if !same_map(obj.get(*f), old.get(*f)) {
            errs.push((f.to_string(), "FieldValueForbidden", IMMUTABLE_MSG.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_keys() {
        assert_eq!(go_b64_decode("aGk=").unwrap(), b"hi");
        assert_eq!(go_b64_decode("aG!="), Err(2));
        let def = crate::resources::find("", "v1", "secrets").unwrap();
        let s = json!({"data": {"a": "not base64!"}});
        assert!(check_decodable(def, &s)
            .unwrap_err()
            .contains("illegal base64 data at input byte"));
        let mut errs = FieldErrs::new();
        validate(def, &json!({"data": {"a b": "aGk="}}), None, &mut errs);
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].0, "data[a b]");
        let mut errs = FieldErrs::new();
        validate(
            def,
            &json!({"type": "kubernetes.io/tls", "data": {"tls.crt": ""}}),
            None,
            &mut errs,
        );
        assert_eq!(errs[0].0, "data[tls.key]");
    }
}
