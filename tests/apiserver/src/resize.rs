//! In-place pod resize (InPlacePodVerticalScaling, KEP-1287) as each
//! emulated kube-apiserver release serves it.
//!
//! * 1.27–1.31, gate on (alpha, `--feature-gates
//!   InPlacePodVerticalScaling=true`): a plain pod update may change the
//!   cpu and memory of `spec.containers[*].resources`
//!   (`ValidatePodUpdate` munges them away before comparing the specs), and
//!   `podStrategy.PrepareForUpdate` marks `status.resize: Proposed`
//!   (`MarkPodProposedForResize`, pkg/api/pod/util.go). Gate off, or from
//!   1.32, resources are immutable on a plain update. Either way 1.27–1.31
//!   refuse a plain update that would change the QoS class (`metadata:
//!   Invalid value: "…": Pod QoS is immutable`).
//! * 1.32, gate on (alpha): `pods/resize` (kubernetes#128266), whose
//!   `podResizeStrategy` copies containers' (and sidecars') `resources` and
//!   `resizePolicy` by container name onto the stored pod, marks
//!   `Proposed`, and validates with `ValidatePodResize`.
//! * 1.33 (beta, on): the strategy copies by position and bumps
//!   `metadata.generation`; no more `Proposed`; `ValidatePodResize` also
//!   refuses a memory limit decrease (or a new memory limit) unless the
//!   memory `resizePolicy` is `RestartContainer`, and renamed, reordered,
//!   added or removed containers.
//! * 1.34: as 1.33 without the memory limit rule (KEP-1287 history,
//!   2025-06-03 "v1.34 post-beta updates: Allow no-restart memory limit
//!   decreases").
//!
//! pkg/registry/core/pod/strategy.go (`podResizeStrategy`,
//! `dropNonResizeUpdates`) and pkg/apis/core/validation/validation.go
//! (`ValidatePodResize`, `validateContainerResize`,
//! `dropCPUMemoryResourcesFromContainer`, `isPodResizeRequestSupported`).

use serde_json::{json, Map, Value};

use crate::admission::is_mirror_pod;
use crate::features::Emulation;
use crate::kinds::{self, FieldErrs};
use crate::resources::ResourceDef;
use crate::util::{get, get_str, meta_mut, obj_field_mut};

const CPU_MEMORY: [&str; 2] = ["cpu", "memory"];
const NOT_SUPPORTED: &str = "Pod running on node without support for resize";

// ---------------------------------------------------------------- strategy

/// The object to store for a write through `pods/resize`: the stored pod
/// with the client's containers' resources and resize policies
/// (`podResizeStrategy.PrepareForUpdate`). `status.resize: Proposed` is
/// marked later, by [`mark_proposed`], once the quantities are defaulted.
pub fn prepare(emu: &Emulation, old: &Value, new: &Value) -> Value {
    if emu.version.at_least(33) {
        prepare_by_position(old, new)
    } else {
        prepare_by_name(old, new)
    }
}

/// The stored pod with the request's resourceVersion (the precondition)
/// and uid (checked as immutable later): metav1.ResetObjectMetaForStatus,
/// or 1.32's dropPodUpdates, keep the rest of the stored metadata, and the
/// stored status.
fn stored_with_request_meta(old: &Value, new: &Value) -> Value {
    let mut out = old.clone();
    for key in ["resourceVersion", "uid"] {
        match get(new, &["metadata", key]) {
            Some(v) => {
                meta_mut(&mut out).insert(key.into(), v.clone());
            }
            None if key == "resourceVersion" => {
                meta_mut(&mut out).remove(key);
            }
            None => {}
        }
    }
    out
}

fn containers<'a>(pod: &'a Value, list: &str) -> &'a [Value] {
    get(pod, &["spec", list])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn name(c: &Value) -> &str {
    get_str(c, &["name"]).unwrap_or("")
}

/// A sidecar: an init container with `restartPolicy: Always`.
fn restartable(c: &Value) -> bool {
    get_str(c, &["restartPolicy"]) == Some("Always")
}

/// `to.resources = from.resources; to.resizePolicy = from.resizePolicy`
/// (a Go struct copy: what `from` lacks, `to` loses).
fn copy_resize_fields(to: &mut Value, from: &Value) {
    let Some(to) = to.as_object_mut() else { return };
    for key in ["resources", "resizePolicy"] {
        match from.get(key) {
            Some(v) => {
                to.insert(key.into(), v.clone());
            }
            None => {
                to.remove(key);
            }
        }
    }
}

/// 1.32: the containers are matched by name, so a reordered list changes
/// nothing and unknown names are ignored; init containers only when the
/// request's container is a sidecar.
fn prepare_by_name(old: &Value, new: &Value) -> Value {
    let mut out = stored_with_request_meta(old, new);
    for list in ["containers", "initContainers"] {
        let incoming: Vec<Value> = containers(new, list).to_vec();
        let Some(Value::Array(stored)) = out.get_mut("spec").and_then(|s| s.get_mut(list)) else {
            continue;
        };
        for c in incoming {
            if list == "initContainers" && !restartable(&c) {
                continue;
            }
            if let Some(slot) = stored.iter_mut().find(|s| name(s) == name(&c)) {
                copy_resize_fields(slot, &c);
            }
        }
    }
    out
}

/// 1.33+: by position. A request that adds, removes, renames or reorders
/// containers is kept as sent, for validation to refuse.
fn prepare_by_position(old: &Value, new: &Value) -> Value {
    let lists = ["containers", "initContainers"];
    let same_len = |l: &str| containers(new, l).len() == containers(old, l).len();
    if !lists.iter().all(|l| same_len(l)) {
        return new.clone();
    }
    let mut out = stored_with_request_meta(old, new);
    for list in lists {
        let (olds, news) = (containers(old, list), containers(new, list));
        if news.is_empty() {
            continue;
        }
        let merged = merge_by_position(olds, news);
        obj_field_mut(&mut out, "spec").insert(list.into(), Value::Array(merged));
    }
    out
}

/// dropNonResizeUpdatesForContainers.
fn merge_by_position(olds: &[Value], news: &[Value]) -> Vec<Value> {
    if olds.iter().zip(news).any(|(o, n)| name(o) != name(n)) {
        return news.to_vec();
    }
    let mut merged = olds.to_vec();
    for (slot, c) in merged.iter_mut().zip(news) {
        copy_resize_fields(slot, c);
    }
    merged
}

/// `status.resize: Proposed`, set by the server itself before 1.33 when a
/// write changes a container's requests away from what its status says
/// was allocated (MarkPodProposedForResize): on a plain update with the
/// gate on (1.27–1.31), and on `pods/resize` (1.32).
pub fn mark_proposed(emu: &Emulation, sub: Option<&str>, old: &Value, new: &mut Value) {
    let minor = emu.version.minor;
    let applies = match sub {
        None => (27..=31).contains(&minor) && emu.in_place_resize(),
        Some("resize") => minor == 32,
        Some(_) => false,
    };
    if applies && proposes_resize(old, new) {
        obj_field_mut(new, "status").insert("resize".into(), json!("Proposed"));
    }
}

fn proposes_resize(old: &Value, new: &Value) -> bool {
    let statuses = get(new, &["status", "containerStatuses"])
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let olds = containers(old, "containers");
    for (i, c) in containers(new, "containers").iter().enumerate() {
        let Some(requests) = get(c, &["resources", "requests"]) else {
            continue;
        };
        let unchanged = olds
            .get(i)
            .is_some_and(|o| normalized_resources(o) == normalized_resources(c));
        if unchanged {
            continue;
        }
        if let Some(cs) = statuses.iter().find(|s| name(s) == name(c)) {
            let allocated = cs.get("allocatedResources").unwrap_or(&Value::Null);
            return !same_list(requests, allocated);
        }
    }
    false
}

// ---------------------------------------------------------------- validation

fn forbidden(field: impl Into<String>, detail: &str) -> (String, &'static str, String) {
    (
        field.into(),
        "FieldValueForbidden",
        format!("Forbidden: {detail}"),
    )
}

/// ValidatePodResize: `new` is what [`prepare`] made, defaulted.
pub fn validate(emu: &Emulation, def: &ResourceDef, old: &Value, new: &Value) -> FieldErrs {
    let mut errs = metadata_errs(def, old, new);
    if let Some(refused) = refusal(old, new) {
        // These return alone, dropping what was found so far.
        return vec![refused];
    }
    errs.extend(qos_change(old, new));
    if !node_supports_resize(old) {
        errs.push(forbidden("spec", NOT_SUPPORTED));
    }
    if emu.version.at_least(33) {
        let order = ordering_errs(old, new);
        if !order.is_empty() {
            errs.extend(order);
            return errs;
        }
    }
    // 1.33 only: 1.34 lets a no-restart memory limit decrease through.
    let memory_rule = emu.version.minor == 33;
    errs.extend(container_resize_errs(old, new, memory_rule));
    errs.extend(mutability_errs(old, new));
    if errs.is_empty() && !unchanged_but_cpu_memory(old, new) {
        errs.push(forbidden(
            "spec",
            "only cpu and memory resources are mutable",
        ));
    }
    errs
}

/// ValidateObjectMetaUpdate and the pod's own rules, on the request with
/// the stored spec (the containers are judged by the resize rules).
fn metadata_errs(def: &ResourceDef, old: &Value, new: &Value) -> FieldErrs {
    let mut view = new.clone();
    if let Some(spec) = old.get("spec") {
        view["spec"] = spec.clone();
    }
    kinds::validate(def, &view, Some(old))
}

/// What refuses a resize outright: pod-level resources, static pods,
/// Windows pods.
fn refusal(old: &Value, new: &Value) -> Option<(String, &'static str, String)> {
    let pod_level = |p: &Value| {
        ["requests", "limits"].iter().any(|k| {
            get(p, &["spec", "resources", k])
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
        })
    };
    let why = if pod_level(old) || pod_level(new) {
        "pods with pod-level resources cannot be resized"
    } else if is_mirror_pod(old) {
        "static pods cannot be resized"
    } else if get_str(old, &["spec", "os", "name"]) == Some("windows") {
        "windows pods cannot be resized"
    } else {
        return None;
    };
    Some(forbidden("", why))
}

/// qos.GetPodQOS(old) (the stored class) against qos.ComputePodQOS(new).
/// The value shown is the status's class, which is the stored one.
fn qos_change(old: &Value, new: &Value) -> Option<(String, &'static str, String)> {
    let stored = get_str(old, &["status", "qosClass"])
        .filter(|q| !q.is_empty())
        .unwrap_or_else(|| kinds::qos_class(old));
    if stored == kinds::qos_class(new) {
        return None;
    }
    let shown = get_str(new, &["status", "qosClass"]).unwrap_or("");
    Some((
        "spec".into(),
        "FieldValueInvalid",
        format!("Invalid value: {shown:?}: Pod QOS Class may not change as a result of resizing"),
    ))
}

/// isPodResizeRequestSupported: the first running container's status
/// tells whether the node's kubelet reports `resources` (a kubelet
/// without the feature does not); with none running, assume it does.
pub fn node_supports_resize(pod: &Value) -> bool {
    let statuses = get(pod, &["status", "containerStatuses"]).and_then(Value::as_array);
    let running = statuses
        .into_iter()
        .flatten()
        .find(|cs| get(cs, &["state", "running"]).is_some_and(|r| !r.is_null()));
    match running {
        Some(cs) => cs.get("resources").is_some_and(|r| !r.is_null()),
        None => true,
    }
}

/// 1.33+: containers may not be added, removed, renamed or reordered (the
/// positional checks below need the lists aligned).
fn ordering_errs(old: &Value, new: &Value) -> FieldErrs {
    let mut errs = FieldErrs::new();
    for list in ["containers", "initContainers"] {
        let (olds, news) = (containers(old, list), containers(new, list));
        if olds.len() != news.len() {
            errs.push(forbidden(
                format!("spec.{list}"),
                &format!("{list} may not be added or removed on resize"),
            ));
            continue;
        }
        for (i, (o, n)) in olds.iter().zip(news).enumerate() {
            if name(o) != name(n) {
                errs.push(forbidden(
                    format!("spec.{list}[{i}].name"),
                    &format!("{list} may not be renamed or reordered on resize"),
                ));
            }
        }
    }
    errs
}

/// validateContainerResize for every sidecar, then every container.
fn container_resize_errs(old: &Value, new: &Value, memory_rule: bool) -> FieldErrs {
    let mut errs = FieldErrs::new();
    for list in ["initContainers", "containers"] {
        let news = containers(new, list);
        for (i, o) in containers(old, list).iter().enumerate() {
            if list == "initContainers" && !restartable(o) {
                continue;
            }
            let Some(n) = news.get(i) else { continue };
            let path = format!("spec.{list}[{i}].resources");
            errs.extend(resource_errs(n, o, &path, memory_rule));
        }
    }
    errs
}

fn list_of<'a>(c: &'a Value, kind: &str) -> Option<&'a Map<String, Value>> {
    get(c, &["resources", kind]).and_then(Value::as_object)
}

/// resourcesRemoved: an old entry is missing from the new list.
fn removed(new: Option<&Map<String, Value>>, old: Option<&Map<String, Value>>) -> bool {
    old.into_iter()
        .flatten()
        .any(|(k, _)| new.is_none_or(|n| !n.contains_key(k)))
}

fn resource_errs(n: &Value, o: &Value, path: &str, memory_rule: bool) -> FieldErrs {
    let mut errs = FieldErrs::new();
    for (kind, what) in [
        ("requests", "resource requests"),
        ("limits", "resource limits"),
    ] {
        if removed(list_of(n, kind), list_of(o, kind)) {
            errs.push(forbidden(
                format!("{path}.{kind}"),
                &format!("{what} cannot be removed"),
            ));
        }
    }
    if memory_rule && !restarts_for_memory(n) {
        errs.extend(memory_limit_errs(n, o, path));
    }
    errs
}

/// The container's memory resizePolicy is RestartContainer (unset means
/// NotRequired).
fn restarts_for_memory(c: &Value) -> bool {
    c.get("resizePolicy")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| get_str(p, &["resourceName"]) == Some("memory"))
        .and_then(|p| get_str(p, &["restartPolicy"]))
        == Some("RestartContainer")
}

/// 1.33: without a restart, a memory limit may not go down, nor appear
/// (from "max").
fn memory_limit_errs(n: &Value, o: &Value, path: &str) -> FieldErrs {
    let limit = |c: &Value| list_of(c, "limits").and_then(|l| l.get("memory")).cloned();
    let field = format!("{path}.limits[memory]");
    let verb = match (limit(n), limit(o)) {
        (Some(new), Some(old))
            if crate::quantity::compare(&new, &old).is_some_and(|c| c.is_lt()) =>
        {
            "decreased"
        }
        (Some(_), None) => "added",
        _ => return vec![],
    };
    vec![forbidden(
        field,
        &format!("memory limits cannot be {verb} unless resizePolicy is RestartContainer"),
    )]
}

/// The container with its cpu and memory taken from `old`
/// (dropCPUMemoryResourcesFromContainer): a list the old container lacked
/// is dropped whole, and `resources` keeps only limits and requests.
pub fn with_old_cpu_memory(new: &Value, old: &Value) -> Value {
    let mut c = new.clone();
    let mut resources = Map::new();
    for kind in ["limits", "requests"] {
        let Some(old_list) = list_of(old, kind) else {
            continue;
        };
        let mut list = list_of(new, kind).cloned().unwrap_or_default();
        for r in CPU_MEMORY {
            list.remove(r);
            if let Some(q) = old_list.get(r) {
                list.insert(r.into(), q.clone());
            }
        }
        resources.insert(kind.into(), Value::Object(list));
    }
    if let Some(m) = c.as_object_mut() {
        m.insert("resources".into(), Value::Object(resources));
    }
    c
}

/// Go's semantic equality of two containers: absent, null and empty
/// lists/maps are alike.
fn normalized(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn normalized_resources(c: &Value) -> Value {
    normalized(c.get("resources").unwrap_or(&Value::Null))
}

/// Two resource lists with the same names and equal quantities.
fn same_list(a: &Value, b: &Value) -> bool {
    let (a, b) = (normalized(a), normalized(b));
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, v)| b.get(k).is_some_and(|w| crate::quantity::same(v, w)))
        }
        _ => is_empty(&a) && is_empty(&b),
    }
}

/// Only cpu and memory may change: per container, per sidecar, and a
/// non-sidecar init container not at all.
fn mutability_errs(old: &Value, new: &Value) -> FieldErrs {
    let mut errs = FieldErrs::new();
    let olds = containers(old, "containers");
    for (i, n) in containers(new, "containers").iter().enumerate() {
        let Some(o) = olds.get(i) else { continue };
        if normalized(&with_old_cpu_memory(n, o)) != normalized(o) {
            errs.push(forbidden(
                "spec",
                "only cpu and memory resources are mutable",
            ));
        }
    }
    let olds = containers(old, "initContainers");
    for (i, n) in containers(new, "initContainers").iter().enumerate() {
        let Some(o) = olds.get(i) else { continue };
        if restartable(n) {
            if normalized(&with_old_cpu_memory(n, o)) != normalized(o) {
                errs.push(forbidden(
                    "spec",
                    "only cpu and memory resources for sidecar containers are mutable",
                ));
            }
        } else if normalized(n) != normalized(o) {
            errs.push(forbidden(
                "spec",
                "resources for non-sidecar init containers are immutable",
            ));
        }
    }
    errs
}

/// The last check: the whole spec, cpu and memory put back, is the stored
/// one.
fn unchanged_but_cpu_memory(old: &Value, new: &Value) -> bool {
    let mut munged = new.get("spec").cloned().unwrap_or(Value::Null);
    for list in ["containers", "initContainers"] {
        let olds = containers(old, list);
        let Some(Value::Array(cs)) = munged.get_mut(list) else {
            continue;
        };
        for (i, c) in cs.iter_mut().enumerate() {
            let sidecar_or_container = list == "containers" || restartable(c);
            if let (true, Some(o)) = (sidecar_or_container, olds.get(i)) {
                *c = with_old_cpu_memory(c, o);
            }
        }
    }
    normalized(&munged) == normalized(old.get("spec").unwrap_or(&Value::Null))
}

// ---------------------------------------------------------------- plain update

/// ValidatePodUpdate for a plain pod write. 1.27–1.31 compare the specs
/// with the containers' cpu and memory put back when the gate is on, and
/// refuse a QoS class change whatever the gate; other releases are the
/// double's one model (resources immutable).
pub fn validate_pod_update(
    emu: &Emulation,
    def: &ResourceDef,
    old: &Value,
    new: &Value,
) -> FieldErrs {
    if !(27..=31).contains(&emu.version.minor) {
        return kinds::validate(def, new, Some(old));
    }
    let view = match emu.in_place_resize() {
        true => with_old_container_cpu_memory(old, new),
        false => new.clone(),
    };
    let mut errs = kinds::validate(def, &view, Some(old));
    if let Some(e) = qos_immutable(old, new) {
        // Checked before the final spec comparison upstream.
        let at = errs
            .iter()
            .position(|e| e.0 == "spec" && e.1 == "FieldValueForbidden")
            .unwrap_or(errs.len());
        errs.insert(at, e);
    }
    errs
}

/// The pod with each container's cpu and memory taken from the stored one
/// (init containers are not munged before 1.32).
fn with_old_container_cpu_memory(old: &Value, new: &Value) -> Value {
    let mut view = new.clone();
    let olds = containers(old, "containers");
    if let Some(Value::Array(cs)) = view.get_mut("spec").and_then(|s| s.get_mut("containers")) {
        for (c, o) in cs.iter_mut().zip(olds) {
            *c = with_old_cpu_memory(c, o);
        }
    }
    view
}

/// 1.27–1.31 ValidatePodUpdate: `metadata: Invalid value: "<status
/// class>": Pod QoS is immutable`.
fn qos_immutable(old: &Value, new: &Value) -> Option<(String, &'static str, String)> {
    let stored = get_str(old, &["status", "qosClass"])
        .filter(|q| !q.is_empty())
        .unwrap_or_else(|| kinds::qos_class(old));
    if stored == kinds::qos_class(new) {
        return None;
    }
    let shown = get_str(new, &["status", "qosClass"]).unwrap_or("");
    Some((
        "metadata".into(),
        "FieldValueInvalid",
        format!("Invalid value: {shown:?}: Pod QoS is immutable"),
    ))
}

#[cfg(test)]
mod tests;
