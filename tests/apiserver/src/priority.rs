//! The Priority admission plugin (plugin/pkg/admission/priority) on pods.
//! The double serves no PriorityClass objects, so only the two classes every
//! cluster has exist (pkg/apis/scheduling SystemPriorityClasses); there is
//! no global default class.
//!
//! Create: `spec.priority` and `spec.preemptionPolicy` come from the class
//! named by `priorityClassName` (0 and PreemptLowerPriority without one); a
//! class that does not exist, or a priority or preemption policy the pod
//! set itself that differs from the class's, is refused (403).
//! Update: values the update leaves out are kept from the stored pod (the
//! fields are immutable, validation refuses any other change).

use crate::status::ApiError;
use crate::util::{get, get_str, obj_field_mut};
use serde_json::{json, Value};

const PREEMPT_LOWER: &str = "PreemptLowerPriority";

/// scheduling.SystemCriticalPriority + 1000 and SystemCriticalPriority.
fn class_value(name: &str) -> Option<i64> {
    match name {
        "system-node-critical" => Some(2_000_001_000),
        "system-cluster-critical" => Some(2_000_000_000),
        _ => None,
    }
}

pub fn admit_pod_create(display_name: &str, pod: &mut Value) -> Result<(), ApiError> {
    let forbidden = |why: String| ApiError::forbidden("pods", display_name, &why);
    let class = get_str(pod, &["spec", "priorityClassName"]).unwrap_or("");
    let priority = if class.is_empty() {
        0
    } else {
        class_value(class)
            .ok_or_else(|| forbidden(format!("no PriorityClass with name {} was found", class)))?
    };
    let spec = obj_field_mut(pod, "spec");
    if let Some(given) = spec.get("priority").and_then(Value::as_i64) {
        if given != priority {
            return Err(forbidden(format!(
                "the integer value of priority ({}) must not be provided in pod spec; priority \
                 admission controller computed {} from the given PriorityClass name",
                given, priority
            )));
        }
    }
    if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str) {
        if given != PREEMPT_LOWER {
            return Err(forbidden(format!(
                "the string value of PreemptionPolicy ({}) must not be provided in pod spec; \
                 priority admission controller computed {} from the given PriorityClass name",
                given, PREEMPT_LOWER
            )));
        }
    }
    spec.insert("priority".into(), json!(priority));
    spec.insert("preemptionPolicy".into(), json!(PREEMPT_LOWER));
    Ok(())
}

/// admitPod on Update: keep what the plugin set at create.
pub fn keep_on_update(old: &Value, new: &mut Value) {
    for k in ["priority", "preemptionPolicy"] {
        let missing = get(new, &["spec", k]).is_none_or(Value::is_null);
        if let (true, Some(v)) = (missing, get(old, &["spec", k])) {
            obj_field_mut(new, "spec").insert(k.into(), v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_from_the_class() {
        let mut p = json!({"spec": {"priorityClassName": "system-node-critical"}});
        admit_pod_create("p", &mut p).unwrap();
        assert_eq!(p["spec"]["priority"], 2_000_001_000);
        assert_eq!(p["spec"]["preemptionPolicy"], PREEMPT_LOWER);
        let mut p = json!({"spec": {}});
        admit_pod_create("p", &mut p).unwrap();
        assert_eq!(p["spec"]["priority"], 0);
        let mut p = json!({"spec": {"priority": 0}});
        assert!(admit_pod_create("p", &mut p).is_ok());
    }

    #[test]
    fn refusals() {
        let mut p = json!({"spec": {"priorityClassName": "gold"}});
        let e = admit_pod_create("p", &mut p).unwrap_err();
        assert_eq!(e.code, 403);
        assert!(e
            .message
            .ends_with("no PriorityClass with name gold was found"));
        let mut p = json!({"spec": {"priority": 7}});
        assert_eq!(admit_pod_create("p", &mut p).unwrap_err().code, 403);
        let mut p = json!({"spec": {"preemptionPolicy": "Never"}});
        assert_eq!(admit_pod_create("p", &mut p).unwrap_err().code, 403);
    }

    #[test]
    fn update_keeps_what_create_set() {
        let old = json!({"spec": {"priority": 2_000_000_000, "preemptionPolicy": PREEMPT_LOWER}});
        let mut new = json!({"spec": {"containers": []}});
        keep_on_update(&old, &mut new);
        assert_eq!(new["spec"]["priority"], 2_000_000_000);
        let mut changed = json!({"spec": {"priority": 1}});
        keep_on_update(&old, &mut changed);
        assert_eq!(changed["spec"]["priority"], 1);
    }
}
