//! The storage.k8s.io/v1 kinds of CSI a kubelet meets: CSINode (which it
//! writes), CSIDriver (which it lists and watches) and VolumeAttachment
//! (which it reads). The v1 defaulters (pkg/apis/storage/v1/defaults.go),
//! the strategies' status handling (pkg/registry/storage/*/strategy.go)
//! and the rules of pkg/apis/storage/validation, with the messages a
//! v1.22 kube-apiserver answers. The zero values of what comes back are
//! in zerovalues.rs.
//!
//! Release-dependent rules (the CSINode nodeID length) are in
//! [`validate_release`], which the handlers run after [`validate`].

use crate::kinds::{FieldErrs, DNS1123_SUBDOMAIN_MSG};
use crate::resources::ResourceDef;
use crate::util::{get, get_str, obj_field_mut};
use crate::version::Version;
use serde_json::{json, Map, Value};
use std::collections::BTreeSet;

pub const GROUP: &str = "storage.k8s.io";

/// The name part of validation.IsQualifiedName's message (RegexError with
/// its examples, and Go's doubled space before each "or").
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const EXACTLY_ONE_SOURCE: &str =
    "must specify exactly one of inlineVolumeSpec and persistentVolumeName";
const IMMUTABLE: &str = "field is immutable";
/// maxAttachedVolumeMetadataSize (also the limit the attach/detach error
/// message check reports, as upstream passes it there).
const MAX_ATTACHED_VOLUME_METADATA_SIZE: usize = 256 * 1024;
/// maxVolumeErrorMessageSize.
const MAX_VOLUME_ERROR_MESSAGE_SIZE: usize = 1024;
/// csiNodeIDLongerMaxLength: the release-free check; 1.22's 192 is in
/// [`validate_release`].
const CSI_NODE_ID_MAX: usize = 256;
/// What a VolumeAttachment's attacher and a CSINode's driver names may be
/// at most (core validation ValidateCSIDriverName).
const CSI_DRIVER_NAME_MAX: usize = 63;

// ---------------------------------------------------------------- defaults

fn set_default(m: &mut Map<String, Value>, k: &str, v: Value) {
    if m.get(k).is_none_or(Value::is_null) {
        m.insert(k.to_string(), v);
    }
}

/// SetDefaults_CSIDriver (storage/v1): attachRequired true,
/// podInfoOnMount, requiresRepublish and storageCapacity false,
/// fsGroupPolicy ReadWriteOnceWithFSType, volumeLifecycleModes
/// [Persistent]. (seLinuxMount, defaulted to false from 1.28 with its
/// gate, is not.)
pub fn apply_defaults(def: &ResourceDef, obj: &mut Value) {
    if def.plural != "csidrivers" {
        return;
    }
    let spec = obj_field_mut(obj, "spec");
    set_default(spec, "attachRequired", json!(true));
    set_default(spec, "podInfoOnMount", json!(false));
    set_default(spec, "requiresRepublish", json!(false));
    set_default(spec, "storageCapacity", json!(false));
    set_default(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
    let empty = spec
        .get("volumeLifecycleModes")
        .is_none_or(|m| m.as_array().is_none_or(Vec::is_empty));
    if empty {
        spec.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
    }
}

/// PrepareForCreate of the VolumeAttachment strategy: the status is
/// cleared (and comes back as its zero value).
pub fn status_on_create(def: &ResourceDef, obj: &mut Value) {
    if def.plural == "volumeattachments" {
        obj["status"] = json!({"attached": false});
    }
}

// ---------------------------------------------------------------- field errors

fn required(errs: &mut FieldErrs, field: &str, detail: &str) {
    let msg = if detail.is_empty() {
        "Required value".to_string()
    } else {
        format!("Required value: {}", detail)
    };
    errs.push((field.into(), "FieldValueRequired", msg));
}

/// field.Invalid with a value already rendered as Go prints it.
fn invalid(errs: &mut FieldErrs, field: &str, rendered: String, detail: &str) {
    errs.push((
        field.into(),
        "FieldValueInvalid",
        format!("Invalid value: {}: {}", rendered, detail),
    ));
}

fn duplicate(errs: &mut FieldErrs, field: &str, v: &str) {
    errs.push((
        field.into(),
        "FieldValueDuplicate",
        format!("Duplicate value: {}", go_quote(v)),
    ));
}

fn too_long(errs: &mut FieldErrs, field: &str, max: usize) {
    errs.push((
        field.into(),
        "FieldValueTooLong",
        format!("Too long: may not be more than {} bytes", max),
    ));
}

fn not_supported(errs: &mut FieldErrs, field: &str, v: &str, supported: &[&str]) {
    let list: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
    errs.push((
        field.into(),
        "FieldValueNotSupported",
        format!(
            "Unsupported value: {}: supported values: {}",
            go_quote(v),
            list.join(", ")
        ),
    ));
}

// ---------------------------------------------------------------- Go's %q and %#v

/// Go's `%q` of a string (what field errors print for string values).
pub fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `%#v` of a `[]string` (nil when absent or null).
fn go_string_slice(v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        None => "[]string(nil)".into(),
        Some(a) => {
            let items: Vec<String> = a
                .iter()
                .map(|x| go_quote(x.as_str().unwrap_or("")))
                .collect();
            format!("[]string{{{}}}", items.join(", "))
        }
    }
}

/// `%#v` of a pointer: `(*T)(nil)`, or an address. The real server prints
/// the pointer's heap address, which no client can predict; the double
/// prints a fixed one of the same shape.
fn go_pointer(ty: &str, present: bool) -> String {
    if present {
        format!("(*{})(0xc000000000)", ty)
    } else {
        format!("(*{})(nil)", ty)
    }
}

fn present(v: Option<&Value>) -> bool {
    v.is_some_and(|x| !x.is_null())
}

/// `%#v` of an internal storage.CSINodeDriver (what 1.22's
/// ValidateCSINodeUpdate prints for a changed driver).
fn go_csi_node_driver(d: &Value) -> String {
    format!(
        "storage.CSINodeDriver{{Name:{}, NodeID:{}, TopologyKeys:{}, Allocatable:{}}}",
        go_quote(get_str(d, &["name"]).unwrap_or("")),
        go_quote(get_str(d, &["nodeID"]).unwrap_or("")),
        go_string_slice(d.get("topologyKeys")),
        go_pointer("storage.VolumeNodeResources", present(d.get("allocatable"))),
    )
}

/// `%#v` of an internal storage.VolumeAttachmentSpec.
fn go_volume_attachment_spec(spec: Option<&Value>) -> String {
    let s = |k: &[&str]| spec.and_then(|v| get_str(v, k)).unwrap_or("");
    let p = |k: &[&str]| present(spec.and_then(|v| get(v, k)));
    format!(
        "storage.VolumeAttachmentSpec{{Attacher:{}, Source:storage.VolumeAttachmentSource{{PersistentVolumeName:{}, InlineVolumeSpec:{}}}, NodeName:{}}}",
        go_quote(s(&["attacher"])),
        go_pointer("string", p(&["source", "persistentVolumeName"])),
        go_pointer("core.PersistentVolumeSpec", p(&["source", "inlineVolumeSpec"])),
        go_quote(s(&["nodeName"])),
    )
}

// ---------------------------------------------------------------- name rules

fn subdomain_regex_ok(s: &str) -> bool {
    s.split('.').all(|p| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    })
}

/// validation.IsDNS1123Subdomain's messages.
fn subdomain_msgs(s: &str) -> Vec<String> {
    let mut out = vec![];
    if s.len() > 253 {
        out.push("must be no more than 253 characters".to_string());
    }
    if !subdomain_regex_ok(s) {
        out.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    out
}

fn qualified_name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// validation.IsQualifiedName's messages (`[prefix/]name`).
pub fn qualified_name_msgs(v: &str) -> Vec<String> {
    let mut out = vec![];
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                out.push("prefix part must be non-empty".to_string());
            } else {
                out.extend(
                    subdomain_msgs(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {}", m)),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                QUALIFIED_NAME_MSG
            )]
        }
    };
    if name.is_empty() {
        out.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        out.push("name part must be no more than 63 characters".to_string());
    }
    if !qualified_name_part_ok(name) {
        out.push(format!("name part {}", QUALIFIED_NAME_MSG));
    }
    out
}

/// Core validation's ValidateCSIDriverName (a CSINode driver, a
/// VolumeAttachment's attacher, a CSI PV's driver): required, at most 63
/// characters, a DNS subdomain once lowercased.
fn csi_driver_name(errs: &mut FieldErrs, field: &str, name: &str) {
    if name.is_empty() {
        required(errs, field, "");
    }
    if name.len() > CSI_DRIVER_NAME_MAX {
        too_long(errs, field, CSI_DRIVER_NAME_MAX);
    }
    for m in subdomain_msgs(&name.to_ascii_lowercase()) {
        invalid(errs, field, go_quote(name), &m);
    }
}

// ---------------------------------------------------------------- validation

/// Validation on create (`old` None) and update, as the strategies run it.
pub fn validate(def: &ResourceDef, obj: &Value, old: Option<&Value>, errs: &mut FieldErrs) {
    match def.plural {
        "csinodes" => validate_csi_node(obj, old, errs),
        "volumeattachments" => validate_volume_attachment(obj, old, errs),
        "csidrivers" => validate_csi_driver(obj, old, errs),
        _ => {}
    }
}

fn drivers(obj: &Value) -> &[Value] {
    get(obj, &["spec", "drivers"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// ValidateCSINode / ValidateCSINodeUpdate (1.22; the same through 1.32).
fn validate_csi_node(obj: &Value, old: Option<&Value>, errs: &mut FieldErrs) {
    let mut names = BTreeSet::new();
    for (i, d) in drivers(obj).iter().enumerate() {
        let f = format!("spec.drivers[{}]", i);
        let name = get_str(d, &["name"]).unwrap_or("");
        csi_driver_name(errs, &format!("{}.name", f), name);
        let id = get_str(d, &["nodeID"]).unwrap_or("");
        let id_field = format!("{}.nodeID", f);
        if id.is_empty() {
            required(errs, &id_field, "");
        }
        if id.len() > CSI_NODE_ID_MAX {
            invalid(
                errs,
                &id_field,
                go_quote(id),
                &format!("must be {} characters or less", CSI_NODE_ID_MAX),
            );
        }
        if let Some(c) = get(d, &["allocatable", "count"]).and_then(Value::as_i64) {
            if c < 0 {
                invalid(
                    errs,
                    &format!("{}.allocatable.count", f),
                    c.to_string(),
                    "must be greater than or equal to 0",
                );
            }
        }
        if !names.insert(name.to_string()) {
            duplicate(errs, &format!("{}.name", f), name);
        }
        let keys = d.get("topologyKeys");
        let mut seen = BTreeSet::new();
        for k in keys.and_then(Value::as_array).into_iter().flatten() {
            let k = k.as_str().unwrap_or("");
            if k.is_empty() {
                required(errs, &f, "");
            }
            if !seen.insert(k) {
                duplicate(errs, &f, k);
            }
            for m in qualified_name_msgs(k) {
                invalid(errs, &f, go_string_slice(keys), &m);
            }
        }
    }
    let Some(old) = old else { return };
    // An existing driver entry may not change (it may go, or others come).
    for o in drivers(old) {
        for n in drivers(obj) {
            if get_str(o, &["name"]) == get_str(n, &["name"]) && o != n {
                invalid(errs, "CSINodeDriver", go_csi_node_driver(n), IMMUTABLE);
            }
        }
    }
}

/// What a release checks beyond [`validate`]: 1.22's shorter CSINode
/// nodeID limit (see Version::csi_node_id_max_length).
pub fn validate_release(
    v: Version,
    def: &ResourceDef,
    obj: &Value,
    old: Option<&Value>,
) -> FieldErrs {
    let mut errs = FieldErrs::new();
    if !def.is(GROUP, "csinodes") {
        return errs;
    }
    let stored_longer = old.is_some_and(|o| {
        drivers(o)
            .iter()
            .any(|d| get_str(d, &["nodeID"]).unwrap_or("").len() > 192)
    });
    let max = v.csi_node_id_max_length(stored_longer);
    for (i, d) in drivers(obj).iter().enumerate() {
        let id = get_str(d, &["nodeID"]).unwrap_or("");
        // Longer than 256 was already refused by validate.
        if id.len() > max && id.len() <= CSI_NODE_ID_MAX {
            invalid(
                &mut errs,
                &format!("spec.drivers[{}].nodeID", i),
                go_quote(id),
                &format!("must be {} characters or less", max),
            );
        }
    }
    errs
}

/// ValidateVolumeAttachment (with ValidateVolumeAttachmentV1 on create,
/// ValidateVolumeAttachmentUpdate on update, as the v1 strategy runs them:
/// update validates the object twice, so its causes repeat; the message
/// lists each once).
fn validate_volume_attachment(obj: &Value, old: Option<&Value>, errs: &mut FieldErrs) {
    base_volume_attachment(obj, errs);
    let attacher = get_str(obj, &["spec", "attacher"]).unwrap_or("");
    let pv_name = get(obj, &["spec", "source", "persistentVolumeName"])
        .filter(|v| !v.is_null())
        .map(|v| v.as_str().unwrap_or(""));
    match old {
        None => {
            csi_driver_name(errs, "spec.attacher", attacher);
            if let Some(p) = pv_name {
                for m in subdomain_msgs(p) {
                    invalid(errs, "spec.source.persistentVolumeName", go_quote(p), &m);
                }
            }
        }
        Some(old) => {
            base_volume_attachment(obj, errs);
            if obj.get("spec") != old.get("spec") {
                invalid(
                    errs,
                    "spec",
                    go_volume_attachment_spec(obj.get("spec")),
                    IMMUTABLE,
                );
            }
        }
    }
}

fn base_volume_attachment(obj: &Value, errs: &mut FieldErrs) {
    let attacher = get_str(obj, &["spec", "attacher"]).unwrap_or("");
    if attacher.is_empty() {
        required(errs, "spec.attacher", "");
    }
    let src = |k: &str| get(obj, &["spec", "source", k]).filter(|v| !v.is_null());
    match (src("inlineVolumeSpec"), src("persistentVolumeName")) {
        (None, None) => required(errs, "spec.source", EXACTLY_ONE_SOURCE),
        (Some(_), Some(_)) => errs.push((
            "spec.source".into(),
            "FieldValueForbidden",
            format!("Forbidden: {}", EXACTLY_ONE_SOURCE),
        )),
        (None, Some(p)) => {
            if p.as_str().unwrap_or("").is_empty() {
                required(
                    errs,
                    "spec.source.persistentVolumeName",
                    "must specify non empty persistentVolumeName",
                );
            }
        }
        // The inline PV spec's own validation is not modelled.
        (Some(_), None) => {}
    }
    let node = get_str(obj, &["spec", "nodeName"]).unwrap_or("");
    for m in subdomain_msgs(node) {
        invalid(errs, "spec.nodeName", go_quote(node), &m);
    }
    let size: usize = get(obj, &["status", "attachmentMetadata"])
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| k.len() + v.as_str().map(str::len).unwrap_or(0))
        .sum();
    if size > MAX_ATTACHED_VOLUME_METADATA_SIZE {
        too_long(
            errs,
            "status.attachmentMetadata",
            MAX_ATTACHED_VOLUME_METADATA_SIZE,
        );
    }
    for e in ["attachError", "detachError"] {
        let msg = get_str(obj, &["status", e, "message"]).unwrap_or("");
        if msg.len() > MAX_VOLUME_ERROR_MESSAGE_SIZE {
            too_long(
                errs,
                &format!("status.{}.message", e),
                MAX_ATTACHED_VOLUME_METADATA_SIZE,
            );
        }
    }
}

/// ValidateCSIDriver / ValidateCSIDriverUpdate (the rules a write of the
/// defaulted object can still break).
fn validate_csi_driver(obj: &Value, old: Option<&Value>, errs: &mut FieldErrs) {
    let spec = |v: &Value, k: &str| get(v, &["spec", k]).cloned();
    if let Some(p) = get_str(obj, &["spec", "fsGroupPolicy"]) {
        let ok = ["File", "None", "ReadWriteOnceWithFSType"];
        if !ok.contains(&p) {
            not_supported(errs, "spec.fsGroupPolicy", p, &ok);
        }
    }
    for m in get(obj, &["spec", "volumeLifecycleModes"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let m = m.as_str().unwrap_or("");
        if m != "Persistent" && m != "Ephemeral" {
            not_supported(
                errs,
                "spec.volumeLifecycleModes",
                m,
                &["Persistent", "Ephemeral"],
            );
        }
    }
    let mut audiences = BTreeSet::new();
    for (i, t) in get(obj, &["spec", "tokenRequests"])
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let f = format!("spec.tokenRequests[{}]", i);
        let aud = get_str(t, &["audience"]).unwrap_or("");
        if !audiences.insert(aud.to_string()) {
            duplicate(errs, &format!("{}.audience", f), aud);
            continue;
        }
        if let Some(s) = get(t, &["expirationSeconds"]).and_then(Value::as_i64) {
            let ef = format!("{}.expirationSeconds", f);
            if s < 600 {
                invalid(
                    errs,
                    &ef,
                    s.to_string(),
                    "may not specify a duration less than 10 minutes",
                );
            }
            if s > 1 << 32 {
                invalid(
                    errs,
                    &ef,
                    s.to_string(),
                    "may not specify a duration larger than 2^32 seconds",
                );
            }
        }
    }
    let Some(old) = old else { return };
    if spec(obj, "attachRequired") != spec(old, "attachRequired") {
        let v = get(obj, &["spec", "attachRequired"])
            .and_then(Value::as_bool)
            .map(|b| b.to_string())
            .unwrap_or_else(|| "null".into());
        invalid(errs, "spec.attachedRequired", v, IMMUTABLE);
    }
    if spec(obj, "volumeLifecycleModes") != spec(old, "volumeLifecycleModes") {
        let modes: Vec<String> = get(obj, &["spec", "volumeLifecycleModes"])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|m| go_quote(m.as_str().unwrap_or("")))
            .collect();
        invalid(
            errs,
            "spec.volumeLifecycleModes",
            format!("[]storage.VolumeLifecycleMode{{{}}}", modes.join(", ")),
            IMMUTABLE,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    fn def(p: &str) -> &'static ResourceDef {
        find(GROUP, "v1", p).unwrap()
    }

    fn errs_of(p: &str, obj: &Value, old: Option<&Value>) -> Vec<String> {
        let mut e = FieldErrs::new();
        validate(def(p), obj, old, &mut e);
        e.into_iter()
            .map(|(f, _, m)| format!("{}: {}", f, m))
            .collect()
    }

    fn node(drivers: Value) -> Value {
        json!({"metadata": {"name": "n"}, "spec": {"drivers": drivers}})
    }

    #[test]
    fn csi_node_drivers() {
        let ok = node(json!([{"name": "hostpath.csi.k8s.io", "nodeID": "n1",
            "topologyKeys": ["topology.hostpath.csi/node"], "allocatable": {"count": 0}}]));
        assert!(errs_of("csinodes", &ok, None).is_empty());
        assert!(errs_of("csinodes", &node(Value::Null), None).is_empty());
        let bad = node(json!([
            {"name": "", "nodeID": "", "topologyKeys": ["a", "a", "bad key"]},
            {"name": "d.example.com", "nodeID": "x", "allocatable": {"count": -1}},
            {"name": "d.example.com", "nodeID": "y"}
        ]));
        let e = errs_of("csinodes", &bad, None);
        assert_eq!(e[0], "spec.drivers[0].name: Required value");
        assert!(e[1].starts_with(
            "spec.drivers[0].name: Invalid value: \"\": a lowercase RFC 1123 subdomain"
        ));
        assert_eq!(e[2], "spec.drivers[0].nodeID: Required value");
        assert_eq!(e[3], "spec.drivers[0]: Duplicate value: \"a\"");
        assert_eq!(
            e[4],
            format!(
                "spec.drivers[0]: Invalid value: []string{{\"a\", \"a\", \"bad key\"}}: name part {}",
                QUALIFIED_NAME_MSG
            )
        );
        assert_eq!(
            e[5],
            "spec.drivers[1].allocatable.count: Invalid value: -1: must be greater than or equal to 0"
        );
        assert_eq!(
            e[6],
            "spec.drivers[2].name: Duplicate value: \"d.example.com\""
        );
        assert_eq!(e.len(), 7, "{:#?}", e);
        let long = node(json!([{"name": "d", "nodeID": "a".repeat(257)}]));
        assert!(errs_of("csinodes", &long, None)[0].ends_with("must be 256 characters or less"));
        // Upper case is fine in a driver name (lowercased before the check).
        assert!(errs_of(
            "csinodes",
            &node(json!([{"name": "Csi.Example", "nodeID": "x"}])),
            None
        )
        .is_empty());
    }

    #[test]
    fn csi_node_release_limits() {
        let d = def("csinodes");
        let n = |id: usize| node(json!([{"name": "d", "nodeID": "a".repeat(id)}]));
        let v22 = Version::new(22);
        assert!(validate_release(v22, d, &n(192), None).is_empty());
        let e = validate_release(v22, d, &n(193), None);
        assert_eq!(e[0].0, "spec.drivers[0].nodeID");
        assert!(e[0].2.ends_with("must be 192 characters or less"));
        // Kept when the stored object already has a longer one.
        assert!(validate_release(v22, d, &n(200), Some(&n(250))).is_empty());
        assert!(validate_release(Version::new(23), d, &n(256), None).is_empty());
    }

    #[test]
    fn csi_node_entries_are_immutable() {
        let old = node(json!([{"name": "a", "nodeID": "1", "topologyKeys": null}]));
        let added = node(json!([{"name": "a", "nodeID": "1", "topologyKeys": null},
            {"name": "b", "nodeID": "2", "topologyKeys": null}]));
        assert!(errs_of("csinodes", &added, Some(&old)).is_empty());
        assert!(errs_of("csinodes", &node(Value::Null), Some(&old)).is_empty());
        let changed = node(json!([{"name": "a", "nodeID": "2", "topologyKeys": ["k"],
            "allocatable": {"count": 1}}]));
        assert_eq!(
            errs_of("csinodes", &changed, Some(&old)),
            ["CSINodeDriver: Invalid value: storage.CSINodeDriver{Name:\"a\", NodeID:\"2\", TopologyKeys:[]string{\"k\"}, Allocatable:(*storage.VolumeNodeResources)(0xc000000000)}: field is immutable"]
        );
    }

    #[test]
    fn volume_attachment_required_fields() {
        let e = errs_of(
            "volumeattachments",
            &json!({"metadata": {"name": "va"}, "spec": {}}),
            None,
        );
        assert_eq!(e[0], "spec.attacher: Required value");
        assert_eq!(
            e[1],
            "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"
        );
        assert_eq!(
            e[2],
            format!(
                "spec.nodeName: Invalid value: \"\": {}",
                DNS1123_SUBDOMAIN_MSG
            )
        );
        assert_eq!(e[3], "spec.attacher: Required value");
        assert_eq!(
            e[4],
            format!(
                "spec.attacher: Invalid value: \"\": {}",
                DNS1123_SUBDOMAIN_MSG
            )
        );
        assert_eq!(e.len(), 5);
        let both = json!({"spec": {"attacher": "d", "nodeName": "n",
            "source": {"persistentVolumeName": "", "inlineVolumeSpec": {}}}});
        assert_eq!(
            errs_of("volumeattachments", &both, None)[0],
            "spec.source: Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName"
        );
        let empty_pv = json!({"spec": {"attacher": "d", "nodeName": "n",
            "source": {"persistentVolumeName": ""}}});
        let e = errs_of("volumeattachments", &empty_pv, None);
        assert_eq!(
            e[0],
            "spec.source.persistentVolumeName: Required value: must specify non empty persistentVolumeName"
        );
        assert!(e[1].starts_with("spec.source.persistentVolumeName: Invalid value: \"\""));
        let ok = json!({"spec": {"attacher": "hostpath.csi.k8s.io", "nodeName": "n",
            "source": {"persistentVolumeName": "pv1"}}, "status": {"attached": false}});
        assert!(errs_of("volumeattachments", &ok, None).is_empty());
        assert!(errs_of("volumeattachments", &ok, Some(&ok)).is_empty());
        let mut moved = ok.clone();
        moved["spec"]["nodeName"] = json!("m");
        assert_eq!(
            errs_of("volumeattachments", &moved, Some(&ok)),
            ["spec: Invalid value: storage.VolumeAttachmentSpec{Attacher:\"hostpath.csi.k8s.io\", Source:storage.VolumeAttachmentSource{PersistentVolumeName:(*string)(0xc000000000), InlineVolumeSpec:(*core.PersistentVolumeSpec)(nil)}, NodeName:\"m\"}: field is immutable"]
        );
    }

    #[test]
    fn csi_driver_defaults_and_rules() {
        let d = def("csidrivers");
        let mut o = json!({"metadata": {"name": "d"}, "spec": {"volumeLifecycleModes": []}});
        apply_defaults(d, &mut o);
        assert_eq!(
            o["spec"],
            json!({"attachRequired": true, "podInfoOnMount": false, "requiresRepublish": false,
                "storageCapacity": false, "fsGroupPolicy": "ReadWriteOnceWithFSType",
                "volumeLifecycleModes": ["Persistent"]})
        );
        assert!(errs_of("csidrivers", &o, None).is_empty());
        let mut n = o.clone();
        n["spec"]["attachRequired"] = json!(false);
        assert_eq!(
            errs_of("csidrivers", &n, Some(&o)),
            ["spec.attachedRequired: Invalid value: false: field is immutable"]
        );
        n["spec"]["fsGroupPolicy"] = json!("Sometimes");
        assert_eq!(
            errs_of("csidrivers", &n, None),
            ["spec.fsGroupPolicy: Unsupported value: \"Sometimes\": supported values: \"File\", \"None\", \"ReadWriteOnceWithFSType\""]
        );
    }

    #[test]
    fn qualified_names() {
        assert!(qualified_name_msgs("topology.kubernetes.io/zone").is_empty());
        assert!(qualified_name_msgs("zone").is_empty());
        assert_eq!(
            qualified_name_msgs("/zone"),
            ["prefix part must be non-empty"]
        );
        assert_eq!(qualified_name_msgs("a/b/c").len(), 1);
        assert_eq!(qualified_name_msgs("").len(), 2);
    }
}
