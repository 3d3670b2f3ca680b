//! RuntimeClass (node.k8s.io/v1) as kube-apiserver 1.34 treats it: the
//! validation of `handler` (a DNS label, immutable), and the RuntimeClass
//! admission plugin (plugin/pkg/admission/runtimeclass) on pod CREATE: a pod
//! naming a class that does not exist is refused with 403, and the class's
//! `overhead.podFixed` and `scheduling` (nodeSelector, tolerations) are
//! merged into the pod.

use crate::kinds::FieldErrs;
use crate::status::ApiError;
use crate::store::Inner;
use crate::util::{self, get, get_str};
use serde_json::{json, Value};

pub const GROUP: &str = "node.k8s.io";
pub const PLURAL: &str = "runtimeclasses";

/// ValidateRuntimeClass / ValidateRuntimeClassUpdate.
pub fn validate(obj: &Value, old: Option<&Value>, errs: &mut FieldErrs) {
    let handler = get_str(obj, &["handler"]).unwrap_or("");
    if !crate::kinds::is_dns_label(handler) {
        errs.push((
            "handler".into(),
            "FieldValueInvalid",
            format!(
                "Invalid value: {handler:?}: {}",
                crate::kinds::DNS1123_LABEL_MSG
            ),
        ));
    }
    if let Some(old) = old {
        if get(old, &["handler"]) != get(obj, &["handler"]) {
            errs.push((
                "handler".into(),
                "FieldValueInvalid",
                format!("Invalid value: {handler:?}: field is immutable"),
            ));
        }
    }
}

/// The plugin's Admit and Validate on a pod being created.
pub fn admit_pod_create(g: &Inner, display_name: &str, pod: &mut Value) -> Result<(), ApiError> {
    let forbidden = |why: String| ApiError::forbidden("pods", display_name, &why);
    let Some(name) = get_str(pod, &["spec", "runtimeClassName"]).filter(|n| !n.is_empty()) else {
        return Ok(());
    };
    let name = name.to_string();
    let Some(rc) = g.get("runtimeclasses.node.k8s.io", "", &name) else {
        return Err(forbidden(format!(
            "pod rejected: RuntimeClass {name:?} not found"
        )));
    };
    if let Some(fixed) = get(&rc, &["overhead", "podFixed"]) {
        let spec = util::obj_field_mut(pod, "spec");
        match spec.get("overhead") {
            Some(o) if o.as_object().is_some_and(|m| !m.is_empty()) && o != fixed => {
                return Err(forbidden(
                    "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
                        .into(),
                ))
            }
            _ => {
                spec.insert("overhead".into(), fixed.clone());
            }
        }
    }
    let Some(sched) = get(&rc, &["scheduling"]) else {
        return Ok(());
    };
    let spec = util::obj_field_mut(pod, "spec");
    if let Some(want) = sched.get("nodeSelector").and_then(|s| s.as_object()) {
        let selector = spec.entry("nodeSelector").or_insert_with(|| json!({}));
        let Some(selector) = selector.as_object_mut() else {
            return Ok(());
        };
        for (k, v) in want {
            match selector.get(k) {
                Some(have) if have != v => {
                    return Err(forbidden(format!(
                        "conflict: runtimeClass.scheduling.nodeSelector[{k}] = {}; pod.spec.nodeSelector[{k}] = {}",
                        v.as_str().unwrap_or(""),
                        have.as_str().unwrap_or("")
                    )))
                }
                _ => {
                    selector.insert(k.clone(), v.clone());
                }
            }
        }
    }
    if let Some(tols) = sched.get("tolerations").and_then(|t| t.as_array()) {
        let list = spec.entry("tolerations").or_insert_with(|| json!([]));
        if let Some(list) = list.as_array_mut() {
            for t in tols {
                if !list.contains(t) {
                    list.push(t.clone());
                }
            }
        }
    }
    Ok(())
}
