//! The `pods/ephemeralcontainers` subresource (kubectl debug), as
//! kube-apiserver 1.34 serves it: `podEphemeralContainersStrategy` in
//! pkg/registry/core/pod/strategy.go (PrepareForUpdate keeps everything of
//! the stored pod but spec.ephemeralContainers) and
//! `ValidatePodEphemeralContainersUpdate` / `validateEphemeralContainers` in
//! pkg/apis/core/validation/validation.go (entries may be added, never
//! removed or changed; no ports, probes, lifecycle, resources, restart
//! policy or subPath; a unique name; a target among the pod's containers).
//! An emulated 1.22 does not serve the subresource at all (404) and drops
//! `spec.ephemeralContainers` on writes: see `version::Version::
//! serves_ephemeral_containers`.

use serde_json::Value;

use crate::admission::is_mirror_pod;
use crate::kinds::{is_dns_label, FieldErrs};
use crate::util::{get, get_str, meta_mut, obj_field_mut};

/// What an ephemeral container may not set: upstream's allow-list read
/// the other way round (fields of Container absent from it).
const FORBIDDEN_FIELDS: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "restartPolicyRules",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];
const FORBIDDEN: &str = "Forbidden: cannot be set for an Ephemeral Container";

/// The object to store for an update through the subresource: the stored
/// pod with the client's spec.ephemeralContainers; metadata, the rest of
/// the spec and status are the stored ones (upstream
/// dropNonEphemeralContainerUpdates + ResetObjectMetaForStatus), the
/// resourceVersion precondition is the client's.
pub fn prepare(old: &Value, new: &Value) -> Value {
    let mut out = old.clone();
    let ecs = get(new, &["spec", "ephemeralContainers"])
        .filter(|v| !v.is_null())
        .cloned();
    let spec = obj_field_mut(&mut out, "spec");
    match ecs {
        Some(v) => {
            spec.insert("ephemeralContainers".into(), v);
        }
        None => {
            spec.remove("ephemeralContainers");
        }
    }
    match get(new, &["metadata", "resourceVersion"]) {
        Some(rv) => {
            meta_mut(&mut out).insert("resourceVersion".into(), rv.clone());
        }
        None => {
            meta_mut(&mut out).remove("resourceVersion");
        }
    }
    out
}

fn list<'a>(pod: &'a Value, name: &str) -> &'a [Value] {
    get(pod, &["spec", name])
        .and_then(|v| v.as_array())
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn name(c: &Value) -> &str {
    get_str(c, &["name"]).unwrap_or("")
}

fn forbidden(errs: &mut FieldErrs, field: String, detail: &str) {
    errs.push((field, "FieldValueForbidden", detail.to_string()));
}

/// Whether a field holds more than its zero value (upstream
/// validateFieldAllowList compares with reflect's zero value).
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => o.values().any(is_set),
        Value::Number(n) => n.as_f64() != Some(0.0),
    }
}

/// The errors of an update through the subresource; `new` is the object
/// `prepare` made (defaulted), `old` the stored pod.
pub fn validate_update(new: &Value, old: &Value) -> FieldErrs {
    // Static pods don't support ephemeral containers (#113935).
    if is_mirror_pod(old) {
        return vec![(
            String::new(),
            "FieldValueForbidden",
            "Forbidden: static pods do not support ephemeral containers".into(),
        )];
    }
    let mut errs = validate_containers(new);
    let path = "spec.ephemeralContainers";
    let news = list(new, "ephemeralContainers");
    for o in list(old, "ephemeralContainers") {
        let n = name(o);
        match news.iter().find(|c| name(c) == n) {
            None => forbidden(
                &mut errs,
                path.into(),
                &format!("Forbidden: existing ephemeral containers {n:?} may not be removed\n"),
            ),
            Some(c) if c != o => forbidden(
                &mut errs,
                format!("{path}[{n}]"),
                &format!("Forbidden: existing ephemeral containers {n:?} may not be changed\n"),
            ),
            Some(_) => {}
        }
    }
    errs
}

/// Upstream validateEphemeralContainers (the parts a kubelet's tests can
/// reach: name, image, volume mounts, the forbidden fields, the target).
fn validate_containers(pod: &Value) -> FieldErrs {
    let mut errs = FieldErrs::new();
    let others: Vec<&str> = list(pod, "containers")
        .iter()
        .chain(list(pod, "initContainers"))
        .map(name)
        .collect();
    let volumes: Vec<&str> = list(pod, "volumes").iter().map(name).collect();
    let mut all = others.clone();
    for (i, ec) in list(pod, "ephemeralContainers").iter().enumerate() {
        let f = format!("spec.ephemeralContainers[{i}]");
        let n = name(ec);
        if n.is_empty() {
            errs.push((
                format!("{f}.name"),
                "FieldValueRequired",
                "Required value".into(),
            ));
        } else if !is_dns_label(n) {
            errs.push((
                format!("{f}.name"),
                "FieldValueInvalid",
                format!("Invalid value: {n:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
            ));
        } else if all.contains(&n) {
            errs.push((
                format!("{f}.name"),
                "FieldValueDuplicate",
                format!("Duplicate value: {n:?}"),
            ));
        } else {
            all.push(n);
        }
        if get_str(ec, &["image"]).unwrap_or("").is_empty() {
            errs.push((
                format!("{f}.image"),
                "FieldValueRequired",
                "Required value".into(),
            ));
        }
        for (j, vm) in ec
            .get("volumeMounts")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .enumerate()
        {
            let vn = name(vm);
            if !volumes.contains(&vn) {
                errs.push((
                    format!("{f}.volumeMounts[{j}].name"),
                    "FieldValueNotFound",
                    format!("Not found: {vn:?}"),
                ));
            }
            for sub in ["subPath", "subPathExpr"] {
                if vm.get(sub).is_some_and(is_set) {
                    forbidden(&mut errs, format!("{f}.volumeMounts[{j}].{sub}"), FORBIDDEN);
                }
            }
        }
        if let Some(t) = get_str(ec, &["targetContainerName"]).filter(|t| !t.is_empty()) {
            if !others.contains(&t) {
                errs.push((
                    format!("{f}.targetContainerName"),
                    "FieldValueNotFound",
                    format!("Not found: {t:?}"),
                ));
            }
        }
        for field in FORBIDDEN_FIELDS {
            if ec.get(*field).is_some_and(is_set) {
                forbidden(&mut errs, format!("{f}.{field}"), FORBIDDEN);
            }
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(ecs: Value) -> Value {
        json!({"metadata": {"name": "p", "resourceVersion": "5"},
               "spec": {"containers": [{"name": "app", "image": "busybox"}],
                        "volumes": [{"name": "v", "emptyDir": {}}],
                        "ephemeralContainers": ecs},
               "status": {"phase": "Running"}})
    }

    fn fields(errs: &FieldErrs) -> Vec<String> {
        errs.iter().map(|e| e.0.clone()).collect()
    }

    #[test]
    fn only_ephemeral_containers_change() {
        let old = pod(json!([]));
        let mut new = pod(json!([{"name": "dbg", "image": "busybox"}]));
        new["spec"]["containers"][0]["image"] = json!("nginx");
        new["status"]["phase"] = json!("Failed");
        new["metadata"]["labels"] = json!({"x": "y"});
        new["metadata"]["resourceVersion"] = json!("4");
        let out = prepare(&old, &new);
        assert_eq!(out["spec"]["containers"][0]["image"], "busybox");
        assert_eq!(out["status"]["phase"], "Running");
        assert!(out["metadata"].get("labels").is_none());
        assert_eq!(out["metadata"]["resourceVersion"], "4");
        assert_eq!(out["spec"]["ephemeralContainers"][0]["name"], "dbg");
        assert!(validate_update(&out, &old).is_empty());
    }

    #[test]
    fn entries_may_not_be_removed_or_changed() {
        let old = pod(json!([{"name": "dbg", "image": "busybox"}]));
        let errs = validate_update(&pod(json!([])), &old);
        assert_eq!(fields(&errs), ["spec.ephemeralContainers"]);
        assert!(errs[0].2.contains("\"dbg\" may not be removed"));
        let errs = validate_update(&pod(json!([{"name": "dbg", "image": "alpine"}])), &old);
        assert_eq!(fields(&errs), ["spec.ephemeralContainers[dbg]"]);
        assert!(errs[0].2.contains("may not be changed"));
    }

    #[test]
    fn upstream_field_rules() {
        let old = pod(json!([]));
        let new = pod(json!([
            {"name": "app", "image": "busybox"},
            {"name": "d2", "targetContainerName": "nope", "ports": [{"containerPort": 80}],
             "resources": {}, "livenessProbe": {"exec": {"command": ["true"]}},
             "volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "x"},
                              {"name": "w", "mountPath": "/w"}]}
        ]));
        assert_eq!(
            fields(&validate_update(&new, &old)),
            [
                "spec.ephemeralContainers[0].name",
                "spec.ephemeralContainers[1].image",
                "spec.ephemeralContainers[1].volumeMounts[0].subPath",
                "spec.ephemeralContainers[1].volumeMounts[1].name",
                "spec.ephemeralContainers[1].targetContainerName",
                "spec.ephemeralContainers[1].ports",
                "spec.ephemeralContainers[1].livenessProbe",
            ]
        );
    }

    #[test]
    fn static_pods_refuse() {
        let mut old = pod(json!([]));
        old["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        let errs = validate_update(&pod(json!([{"name": "d", "image": "b"}])), &old);
        assert_eq!(errs.len(), 1);
        assert!(errs[0]
            .2
            .contains("static pods do not support ephemeral containers"));
    }
}
