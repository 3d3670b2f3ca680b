//! Per-kind behaviour the generic REST machinery delegates to: defaulting
//! (pods and nodes in defaults.rs, the Go shape of answers in
//! zerovalues.rs), status reset on create, and the validation rules a
//! kubelet can trip over.

use crate::resources::ResourceDef;
use crate::util::{get, get_str, obj_field_mut};
use serde_json::{json, Map, Value};
use std::sync::atomic::{AtomicU32, Ordering};

pub type FieldErrs = Vec<(String, &'static str, String)>;

fn set_default(m: &mut Map<String, Value>, k: &str, v: Value) {
    if m.get(k).map(|x| x.is_null()).unwrap_or(true) {
        m.insert(k.to_string(), v);
    }
}

static SERVICE_IP: AtomicU32 = AtomicU32::new(10);

/// Defaults applied to every decoded object of `def` (create and update).
pub fn apply_defaults(def: &ResourceDef, obj: &mut Value) {
    crate::zerovalues::after_decode(def.kind, obj);
    match (def.group, def.plural) {
        ("", "pods") => crate::defaults::pod(obj),
        ("", "nodes") => crate::defaults::node(obj),
        ("", "namespaces") => {
            let name = crate::util::name_of(obj).to_string();
            let labels = crate::util::meta_mut(obj)
                .entry("labels")
                .or_insert(json!({}));
            if !labels.is_object() {
                *labels = json!({});
            }
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), json!(name));
            }
            set_default(
                obj_field_mut(obj, "spec"),
                "finalizers",
                json!(["kubernetes"]),
            );
            set_default(obj_field_mut(obj, "status"), "phase", json!("Active"));
        }
        ("", "services") => default_service(obj),
        (crate::storagekinds::GROUP, _) => crate::storagekinds::apply_defaults(def, obj),
        _ => crate::volumekinds::apply_defaults(def, obj),
    }
    crate::zerovalues::as_encoded(def.kind, obj);
}

/// Pod QoS class, as qos.GetPodQOS computes it (containers + init containers).
pub fn qos_class(pod: &Value) -> &'static str {
    if let Some(class) = pod_level_qos_class(pod) {
        return class;
    }
    let mut any = false;
    let mut guaranteed = true;
    for list in ["containers", "initContainers"] {
        for c in get(pod, &["spec", list])
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
        {
            let req = get(c, &["resources", "requests"]).and_then(|x| x.as_object());
            let lim = get(c, &["resources", "limits"]).and_then(|x| x.as_object());
            let relevant = |m: Option<&Map<String, Value>>| -> Vec<(String, Value)> {
                m.map(|m| {
                    m.iter()
                        .filter(|(k, _)| *k == "cpu" || *k == "memory")
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default()
            };
            let (r, l) = (relevant(req), relevant(lim));
            if !r.is_empty() || !l.is_empty() {
                any = true;
            }
            let has_both = |v: &Vec<(String, Value)>| {
                v.iter().any(|x| x.0 == "cpu") && v.iter().any(|x| x.0 == "memory")
            };
            if !has_both(&l)
                || r.iter()
                    .any(|(k, v)| l.iter().find(|x| &x.0 == k).map(|x| &x.1) != Some(v))
            {
                guaranteed = false;
            }
        }
    }
    if !any {
        "BestEffort"
    } else if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// Upstream ComputePodQOS with pod-level `spec.resources` (PodLevelResources,
/// v1.32+): the pod's own CPU and memory decide; None when it sets neither.
fn pod_level_qos_class(pod: &Value) -> Option<&'static str> {
    let list = |which: &str| get(pod, &["spec", "resources", which]).and_then(|x| x.as_object());
    let (limits, requests) = (list("limits"), list("requests"));
    let value = |m: Option<&Map<String, Value>>, k: &str| m.and_then(|m| m.get(k)).cloned();
    let names = ["cpu", "memory"];
    if names
        .iter()
        .all(|k| value(limits, k).is_none() && value(requests, k).is_none())
    {
        return None;
    }
    // A limit without a request is also the request (defaulting).
    let guaranteed = names.iter().all(|k| match value(limits, k) {
        Some(l) => value(requests, k).is_none_or(|r| crate::quantity::same(&r, &l)),
        None => false,
    });
    Some(if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    })
}

fn default_service(obj: &mut Value) {
    let spec = obj_field_mut(obj, "spec");
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    set_default(spec, "internalTrafficPolicy", json!("Cluster"));
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(|p| p.as_object_mut()) {
            set_default(p, "protocol", json!("TCP"));
            let port = p.get("port").cloned().unwrap_or(Value::Null);
            set_default(p, "targetPort", port);
        }
    }
    if spec.get("type").and_then(|t| t.as_str()) != Some("ExternalName") {
        if spec
            .get("clusterIP")
            .and_then(|x| x.as_str())
            .unwrap_or("")
            .is_empty()
        {
            let n = SERVICE_IP.fetch_add(1, Ordering::Relaxed);
            spec.insert(
                "clusterIP".into(),
                json!(format!("10.96.{}.{}", (n >> 8) & 0xff, n & 0xff)),
            );
        }
        let ip = spec.get("clusterIP").cloned().unwrap_or(Value::Null);
        set_default(spec, "clusterIPs", json!([ip]));
        set_default(spec, "ipFamilies", json!(["IPv4"]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
    }
}

/// Status on create, as the strategies' PrepareForCreate set it.
pub fn reset_status_on_create(def: &ResourceDef, obj: &mut Value) {
    match (def.group, def.plural) {
        ("", "pods") => {
            let q = qos_class(obj);
            obj["status"] = json!({"phase": "Pending", "qosClass": q});
        }
        ("", "services") => obj["status"] = json!({"loadBalancer": {}}),
        ("", "namespaces") => obj["status"] = json!({"phase": "Active"}),
        // Nodes keep the status the kubelet registers with.
        (crate::storagekinds::GROUP, _) => crate::storagekinds::status_on_create(def, obj),
        _ => crate::volumekinds::status_on_create(def, obj),
    }
}

// ---------------------------------------------------------------- validation

pub const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
pub const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// IsDNS1123Subdomain: at most 253 characters of dot-separated labels;
/// unlike a DNS label, a part has no 63-character limit (a
/// VolumeAttachment's `csi-<sha256 hex>` name is one 68-character part).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !p.starts_with('-')
                && !p.ends_with('-')
        })
}

fn invalid(errs: &mut FieldErrs, field: &str, val: &str, detail: &str) {
    errs.push((
        field.to_string(),
        "FieldValueInvalid",
        format!("Invalid value: {:?}: {}", val, detail),
    ));
}

fn required(errs: &mut FieldErrs, field: &str) {
    errs.push((
        field.to_string(),
        "FieldValueRequired",
        "Required value".to_string(),
    ));
}

fn label_value_ok(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric())
}

/// Validation on create (`old` None) and update.
pub fn validate(def: &ResourceDef, obj: &Value, old: Option<&Value>) -> FieldErrs {
    let mut errs = FieldErrs::new();
    let name = crate::util::name_of(obj);
    let name_ok = match (def.group, def.plural) {
        ("", "namespaces") | ("", "services") => is_dns_label(name),
        // Path-segment names (ValidateCertificateRequestName too: kubelets
        // name CSRs node-csr-<base64url>).
        ("", "events")
        | ("events.k8s.io", "events")
        | ("certificates.k8s.io", "certificatesigningrequests") => {
            !name.is_empty()
                && !name.contains('/')
                && !name.contains('%')
                && name != "."
                && name != ".."
        }
        _ => is_dns_subdomain(name),
    };
    if name.is_empty() {
        errs.push((
            "metadata.name".into(),
            "FieldValueRequired",
            "Required value: name or generateName is required".into(),
        ));
    } else if !name_ok {
        let msg = if def.plural == "namespaces" || def.plural == "services" {
            DNS1123_LABEL_MSG
        } else {
            DNS1123_SUBDOMAIN_MSG
        };
        invalid(&mut errs, "metadata.name", name, msg);
    }
    // Shape checks the typed decoder of the real server would make.
    for (path, want_obj) in [
        ("labels", true),
        ("annotations", true),
        ("finalizers", false),
        ("ownerReferences", false),
    ] {
        if let Some(v) = get(obj, &["metadata", path]) {
            let ok = v.is_null()
                || if want_obj {
                    v.is_object()
                } else {
                    v.is_array()
                };
            if !ok {
                invalid(
                    &mut errs,
                    &format!("metadata.{}", path),
                    &v.to_string(),
                    "wrong type",
                );
            }
        }
    }
    for k in ["spec", "status"] {
        if let Some(v) = obj.get(k) {
            if !v.is_object() && !v.is_null() {
                invalid(&mut errs, k, &v.to_string(), "must be an object");
            }
        }
    }
    if let Some(labels) = get(obj, &["metadata", "labels"]).and_then(|l| l.as_object()) {
        for (k, v) in labels {
            let vs = v.as_str().unwrap_or("");
            if !v.is_string() || !label_value_ok(vs) {
                invalid(&mut errs, "metadata.labels", vs, "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')");
            }
            if k.is_empty() || k.len() > 316 {
                invalid(
                    &mut errs,
                    "metadata.labels",
                    k,
                    "name part must be non-empty",
                );
            }
        }
    }
    if let Some(a) = get(obj, &["metadata", "annotations"]) {
        if !a.is_object()
            || a.as_object()
                .map(|m| m.values().any(|v| !v.is_string()))
                .unwrap_or(false)
        {
            invalid(
                &mut errs,
                "metadata.annotations",
                "",
                "annotation values must be strings",
            );
        }
    }
    match (def.group, def.plural) {
        ("", "pods") => validate_pod(obj, old, &mut errs),
        ("", "configmaps") | ("", "secrets") => {
            crate::volumekinds::validate(def, obj, old, &mut errs)
        }
        (crate::storagekinds::GROUP, _) => crate::storagekinds::validate(def, obj, old, &mut errs),
        (crate::runtimeclass::GROUP, crate::runtimeclass::PLURAL) => {
            crate::runtimeclass::validate(obj, old, &mut errs)
        }
        ("coordination.k8s.io", "leases") => {
            if let Some(d) = get(obj, &["spec", "leaseDurationSeconds"]).and_then(|x| x.as_i64()) {
                if d <= 0 {
                    invalid(
                        &mut errs,
                        "spec.leaseDurationSeconds",
                        &d.to_string(),
                        "must be greater than 0",
                    );
                }
            }
        }
        _ => {}
    }
    errs
}

fn validate_pod(pod: &Value, old: Option<&Value>, errs: &mut FieldErrs) {
    let containers = get(pod, &["spec", "containers"]).and_then(|x| x.as_array());
    match containers {
        None => required(errs, "spec.containers"),
        Some(c) if c.is_empty() => required(errs, "spec.containers"),
        _ => {}
    }
    let mut names: Vec<String> = vec![];
    for list in ["initContainers", "containers"] {
        for (i, c) in get(pod, &["spec", list])
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
            .enumerate()
        {
            let f = format!("spec.{}[{}]", list, i);
            let n = get_str(c, &["name"]).unwrap_or("");
            if n.is_empty() {
                required(errs, &format!("{}.name", f));
            } else if !is_dns_label(n) {
                invalid(errs, &format!("{}.name", f), n, DNS1123_LABEL_MSG);
            } else if names.iter().any(|x| x == n) {
                errs.push((
                    format!("{}.name", f),
                    "FieldValueDuplicate",
                    format!("Duplicate value: {:?}", n),
                ));
            } else {
                names.push(n.to_string());
            }
            if get_str(c, &["image"]).unwrap_or("").is_empty() && old.is_none() {
                required(errs, &format!("{}.image", f));
            }
        }
    }
    if let Some(rp) = get_str(pod, &["spec", "restartPolicy"]) {
        if !["Always", "OnFailure", "Never"].contains(&rp) {
            errs.push((
                "spec.restartPolicy".into(),
                "FieldValueNotSupported",
                format!("Unsupported value: {:?}: supported values: \"Always\", \"OnFailure\", \"Never\"", rp),
            ));
        }
    }
    let Some(old) = old else { return };
    // Pod spec is immutable apart from a few fields.
    let strip = |p: &Value| -> Value {
        let mut s = p.get("spec").cloned().unwrap_or(Value::Null);
        for list in ["containers", "initContainers"] {
            if let Some(Value::Array(cs)) = s.get_mut(list) {
                for c in cs.iter_mut().filter_map(|c| c.as_object_mut()) {
                    c.remove("image");
                }
            }
        }
        if let Some(m) = s.as_object_mut() {
            for k in [
                "activeDeadlineSeconds",
                "tolerations",
                "terminationGracePeriodSeconds",
                "schedulingGates",
            ] {
                m.remove(k);
            }
        }
        s
    };
    if strip(pod) != strip(old) {
        errs.push(("spec".into(), "FieldValueForbidden", "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".into()));
    }
    // Status transitions the real validation forbids.
    let phase = |p: &Value| get_str(p, &["status", "phase"]).unwrap_or("").to_string();
    let (op, np) = (phase(old), phase(pod));
    if (op == "Succeeded" || op == "Failed") && np != op {
        errs.push((
            "status.phase".into(),
            "FieldValueForbidden",
            format!(
                "Forbidden: cannot transition from terminal phase {:?} to {:?}",
                op, np
            ),
        ));
    }
    let restart = get_str(pod, &["spec", "restartPolicy"]).unwrap_or("Always");
    if restart != "Always" {
        for list in ["containerStatuses"] {
            let olds = get(old, &["status", list]).and_then(|x| x.as_array());
            let news = get(pod, &["status", list]).and_then(|x| x.as_array());
            for (i, n) in news.into_iter().flatten().enumerate() {
                let name = get_str(n, &["name"]).unwrap_or("");
                let Some(o) = olds
                    .into_iter()
                    .flatten()
                    .find(|o| get_str(o, &["name"]) == Some(name))
                else {
                    continue;
                };
                let Some(term) = get(o, &["state", "terminated"]) else {
                    continue;
                };
                let ok_to_restart = restart == "OnFailure"
                    && term.get("exitCode").and_then(|x| x.as_i64()).unwrap_or(0) != 0;
                if !ok_to_restart && get(n, &["state", "terminated"]).is_none() {
                    errs.push((
                        format!("status.{}[{}].state", list, i),
                        "FieldValueForbidden",
                        "Forbidden: may not be transitioned to non-terminated state".into(),
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_defaults_and_qos() {
        let def = crate::resources::find("", "v1", "pods").unwrap();
        let mut p = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}], "volumes": [{"name": "v"}]}});
        apply_defaults(def, &mut p);
        reset_status_on_create(def, &mut p);
        assert_eq!(p["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(
            p["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "1"
        );
        assert_eq!(p["status"]["qosClass"], "Guaranteed");
        assert_eq!(p["spec"]["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(p["spec"]["tolerations"].as_array().unwrap().len(), 2);
        assert!(validate(def, &p, None).is_empty());
        let mut q = p.clone();
        q["spec"]["nodeName"] = json!("x");
        assert_eq!(validate(def, &q, Some(&p)).len(), 1);
        let bad = json!({"metadata": {"name": "Bad_Name"}, "spec": {"containers": []}});
        assert_eq!(validate(def, &bad, None).len(), 2);
    }
}
