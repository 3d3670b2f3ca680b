//! The seccomp version skew of pod creation (pkg/registry/core/pod
//! strategy.go applySeccompVersionSkew, KEP-135): from 1.19 the server
//! kept the deprecated annotations and the `seccompProfile` fields in step.
//! A field without its annotation got the annotation until 1.25 removed
//! that direction (kubernetes#109819); an annotation without its field got
//! the field until 1.27 removed the rest (kubernetes#114947). Kubelets
//! before 1.25 read the annotations, later ones the fields.

use crate::defaults::CONTAINER_LISTS;
use crate::util::obj_field_mut;
use crate::version::Version;
use serde_json::{json, Map, Value};

const POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const CONTAINER_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";

/// Fields to annotations through 1.24.
fn fields_to_annotations(v: Version) -> bool {
    !v.at_least(25)
}

/// Annotations to fields through 1.26.
fn annotations_to_fields(v: Version) -> bool {
    !v.at_least(27)
}

/// podutil.SeccompAnnotationForField.
fn annotation_for(profile: &Value) -> Option<String> {
    match profile.get("type")?.as_str()? {
        "Unconfined" => Some("unconfined".into()),
        "RuntimeDefault" => Some("runtime/default".into()),
        "Localhost" => Some(format!(
            "localhost/{}",
            profile.get("localhostProfile")?.as_str()?
        )),
        _ => None,
    }
}

/// podutil.SeccompFieldForAnnotation.
fn field_for(annotation: &str) -> Option<Value> {
    match annotation {
        "unconfined" => Some(json!({"type": "Unconfined"})),
        "runtime/default" | "docker/default" => Some(json!({"type": "RuntimeDefault"})),
        a => a
            .strip_prefix("localhost/")
            .map(|p| json!({"type": "Localhost", "localhostProfile": p})),
    }
}

/// Runs at pod creation, after admission (PrepareForCreate).
pub fn version_skew(v: Version, pod: &mut Value) {
    if !fields_to_annotations(v) && !annotations_to_fields(v) {
        return;
    }
    let annotations = pod["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut added = Map::new();
    let spec = obj_field_mut(pod, "spec");
    let mut spec_value = Value::Object(std::mem::take(spec));
    let pod_ctx = obj_field_mut(&mut spec_value, "securityContext");
    sync(
        v,
        pod_ctx,
        annotations.get(POD_ANNOTATION),
        POD_ANNOTATION,
        &mut added,
    );
    for list in CONTAINER_LISTS {
        let Some(cs) = spec_value.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in cs.iter_mut().filter(|c| c.is_object()) {
            let name = c["name"].as_str().unwrap_or("").to_string();
            let key = format!("{}{}", CONTAINER_PREFIX, name);
            // A container's securityContext is a pointer: made only for a
            // profile to put in it.
            if c.get("securityContext").is_none() && !annotations.contains_key(&key) {
                continue;
            }
            let ctx = obj_field_mut(c, "securityContext");
            sync(v, ctx, annotations.get(&key), &key, &mut added);
        }
    }
    if let Value::Object(m) = spec_value {
        *obj_field_mut(pod, "spec") = m;
    }
    if !added.is_empty() {
        let md = obj_field_mut(pod, "metadata");
        let a = md.entry("annotations").or_insert(json!({}));
        if let Some(a) = a.as_object_mut() {
            a.extend(added);
        }
    }
}

/// One field/annotation pair: whichever is missing follows the other.
fn sync(
    v: Version,
    ctx: &mut Map<String, Value>,
    annotation: Option<&Value>,
    key: &str,
    added: &mut Map<String, Value>,
) {
    match (ctx.get("seccompProfile"), annotation) {
        (Some(field), None) if fields_to_annotations(v) => {
            if let Some(a) = annotation_for(field) {
                added.insert(key.to_string(), json!(a));
            }
        }
        (None, Some(a)) if annotations_to_fields(v) => {
            if let Some(f) = a.as_str().and_then(field_for) {
                ctx.insert("seccompProfile".into(), f);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"annotations": {"container.seccomp.security.alpha.kubernetes.io/b": "unconfined"}},
            "spec": {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "a", "securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}}},
                    {"name": "b"}, {"name": "c"}]}})
    }

    #[test]
    fn fields_and_annotations_follow_each_other_in_old_releases() {
        let mut p = pod();
        version_skew(Version::new(22), &mut p);
        let a = &p["metadata"]["annotations"];
        assert_eq!(a[POD_ANNOTATION], "runtime/default");
        assert_eq!(
            a["container.seccomp.security.alpha.kubernetes.io/a"],
            "localhost/p.json"
        );
        assert_eq!(
            p["spec"]["containers"][1]["securityContext"]["seccompProfile"]["type"],
            "Unconfined"
        );
        assert!(p["spec"]["containers"][2].get("securityContext").is_none());
    }

    #[test]
    fn later_releases_sync_less_then_nothing() {
        let mut p = pod();
        version_skew(Version::new(25), &mut p);
        assert!(p["metadata"]["annotations"].get(POD_ANNOTATION).is_none());
        assert_eq!(
            p["spec"]["containers"][1]["securityContext"]["seccompProfile"]["type"],
            "Unconfined"
        );
        let mut p = pod();
        version_skew(Version::new(27), &mut p);
        assert_eq!(p, pod());
    }
}
