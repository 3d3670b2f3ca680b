//! The shape of what the real server answers, beyond defaulting. Every
//! object it returns was decoded into its Go type, stored as protobuf and
//! decoded again, which leaves three traces a client sees:
//!
//! * a `null` sent for an optional field is gone (a nil pointer, omitted);
//! * an empty list (`[]`) is gone too: protobuf cannot tell it from nil,
//!   so it is omitted, or `null` where the field has no `omitempty`
//!   (a Node image's `names`, a CSINode's `drivers`); the same holds for
//!   the string maps of metadata and for ResourceLists;
//! * a struct field without a pointer always appears, with its zero value:
//!   `null` for an unset metav1.Time (a condition's `lastProbeTime`, and
//!   `lastTransitionTime` once a patch deleted it), `"0"` for an unset
//!   Quantity (a `resourceFieldRef`'s `divisor`), `{}`, `""`, `0`, `false`.
//!
//! Only the kinds a kubelet reads back are shaped: Pods, Nodes, and the
//! storage.k8s.io kinds of CSI (CSINode, CSIDriver, VolumeAttachment).

use crate::defaults::{child, items, set_default, CONTAINER_LISTS};
use crate::util::obj_field_mut;
use serde_json::{json, Map, Value};

type Obj = Map<String, Value>;

/// What the decoder leaves of a request: no nulls, no empty lists or maps.
pub fn after_decode(kind: &str, obj: &mut Value) {
    if matches!(
        kind,
        "Pod" | "Node" | "CSINode" | "CSIDriver" | "VolumeAttachment"
    ) {
        drop_nulls_and_empty_lists(obj);
        drop_empty_maps(obj);
    }
}

/// The zero values the encoder writes for fields still unset (after
/// defaulting).
pub fn as_encoded(kind: &str, obj: &mut Value) {
    match kind {
        "Pod" => pod(obj),
        "Node" => node(obj),
        "CSINode" => csi_node(obj),
        "CSIDriver" => {
            obj_field_mut(obj, "spec");
        }
        "VolumeAttachment" => volume_attachment(obj),
        _ => {}
    }
}

/// CSINodeSpec.Drivers and CSINodeDriver.TopologyKeys have no omitempty:
/// empty, they come back `null`; name and nodeID are plain strings.
fn csi_node(obj: &mut Value) {
    let spec = obj_field_mut(obj, "spec");
    let empty = spec
        .get("drivers")
        .is_none_or(|d| d.as_array().is_some_and(Vec::is_empty));
    if empty {
        spec.insert("drivers".into(), Value::Null);
    }
    for d in items(spec, "drivers") {
        zero(d, "name", json!(""));
        zero(d, "nodeID", json!(""));
        zero(d, "topologyKeys", Value::Null);
    }
}

/// VolumeAttachmentSpec's attacher, source and nodeName and the status's
/// `attached` have no omitempty; a VolumeError's `time` is a metav1.Time.
fn volume_attachment(obj: &mut Value) {
    let spec = obj_field_mut(obj, "spec");
    zero(spec, "attacher", json!(""));
    zero(spec, "source", json!({}));
    zero(spec, "nodeName", json!(""));
    let status = obj_field_mut(obj, "status");
    zero(status, "attached", json!(false));
    for e in ["attachError", "detachError"] {
        if let Some(e) = child(status, e) {
            zero(e, "time", Value::Null);
        }
    }
}

#[cfg(test)]
fn apply(kind: &str, obj: &mut Value) {
    after_decode(kind, obj);
    as_encoded(kind, obj);
}

/// Removes, at every depth, object members that are `null` or `[]`.
fn drop_nulls_and_empty_lists(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, x| !x.is_null() && x.as_array().is_none_or(|a| !a.is_empty()));
            m.values_mut().for_each(drop_nulls_and_empty_lists);
        }
        Value::Array(a) => a.iter_mut().for_each(drop_nulls_and_empty_lists),
        _ => {}
    }
}

fn drop_if_empty_map(m: &mut Obj, key: &str) {
    if m.get(key)
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty)
    {
        m.remove(key);
    }
}

/// The Go maps among the fields of Pods, Nodes and VolumeAttachments (an
/// empty `{}` elsewhere is a struct, which stays).
fn drop_empty_maps(obj: &mut Value) {
    if let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        drop_if_empty_map(md, "labels");
        drop_if_empty_map(md, "annotations");
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        drop_if_empty_map(spec, "nodeSelector");
        drop_if_empty_map(spec, "overhead");
        for list in CONTAINER_LISTS {
            for c in items(spec, list) {
                if let Some(r) = c.get_mut("resources").and_then(Value::as_object_mut) {
                    drop_if_empty_map(r, "limits");
                    drop_if_empty_map(r, "requests");
                }
            }
        }
    }
    if let Some(st) = obj.get_mut("status").and_then(Value::as_object_mut) {
        drop_if_empty_map(st, "capacity");
        drop_if_empty_map(st, "allocatable");
        drop_if_empty_map(st, "attachmentMetadata");
    }
}

/// Sets `k` to `v` when absent (nulls were dropped before).
fn zero(m: &mut Obj, k: &str, v: Value) {
    m.entry(k.to_string()).or_insert(v);
}

// ---------------------------------------------------------------- pod

fn pod(obj: &mut Value) {
    let spec = obj_field_mut(obj, "spec");
    for list in CONTAINER_LISTS {
        for c in items(spec, list) {
            zero(c, "resources", json!({}));
            for e in items(c, "env") {
                if let Some(from) = child(e, "valueFrom") {
                    divisor(from);
                }
            }
        }
    }
    for v in items(spec, "volumes") {
        volume(v);
    }
    let status = obj_field_mut(obj, "status");
    for c in items(status, "conditions") {
        zero(c, "lastProbeTime", Value::Null);
        zero(c, "lastTransitionTime", Value::Null);
    }
    for list in [
        "initContainerStatuses",
        "containerStatuses",
        "ephemeralContainerStatuses",
    ] {
        items(status, list).for_each(container_status);
    }
}

/// ResourceFieldSelector.Divisor is a Quantity, not a pointer.
fn divisor(holder: &mut Obj) {
    if let Some(r) = child(holder, "resourceFieldRef") {
        zero(r, "divisor", json!("0"));
    }
}

fn downward_api_items(d: &mut Obj) {
    items(d, "items").for_each(divisor);
}

fn volume(v: &mut Obj) {
    if let Some(d) = child(v, "downwardAPI") {
        downward_api_items(d);
    }
    if let Some(p) = child(v, "projected") {
        for s in items(p, "sources") {
            if let Some(d) = child(s, "downwardAPI") {
                downward_api_items(d);
            }
        }
    }
    // An ephemeral volume's claim template has an ObjectMeta, whose
    // creationTimestamp is a metav1.Time.
    if let Some(t) = child(v, "ephemeral").and_then(|e| child(e, "volumeClaimTemplate")) {
        let md = t.entry("metadata").or_insert(json!({}));
        if let Some(md) = md.as_object_mut() {
            zero(md, "creationTimestamp", Value::Null);
        }
    }
}

/// ContainerStatus: name, ready, restartCount, image and imageID have no
/// omitempty; state and lastState are structs; the state's times are
/// metav1.Time and a termination's exitCode an int.
fn container_status(s: &mut Obj) {
    zero(s, "name", json!(""));
    zero(s, "state", json!({}));
    zero(s, "lastState", json!({}));
    zero(s, "ready", json!(false));
    zero(s, "restartCount", json!(0));
    zero(s, "image", json!(""));
    zero(s, "imageID", json!(""));
    for which in ["state", "lastState"] {
        let Some(st) = child(s, which) else { continue };
        if let Some(r) = child(st, "running") {
            zero(r, "startedAt", Value::Null);
        }
        if let Some(t) = child(st, "terminated") {
            zero(t, "exitCode", json!(0));
            zero(t, "startedAt", Value::Null);
            zero(t, "finishedAt", Value::Null);
        }
    }
}

// ---------------------------------------------------------------- node

const NODE_INFO: [&str; 10] = [
    "machineID",
    "systemUUID",
    "bootID",
    "kernelVersion",
    "osImage",
    "containerRuntimeVersion",
    "kubeletVersion",
    "kubeProxyVersion",
    "operatingSystem",
    "architecture",
];

fn node(obj: &mut Value) {
    obj_field_mut(obj, "spec");
    let status = obj_field_mut(obj, "status");
    for c in items(status, "conditions") {
        zero(c, "lastHeartbeatTime", Value::Null);
        zero(c, "lastTransitionTime", Value::Null);
    }
    for i in items(status, "images") {
        zero(i, "names", Value::Null);
    }
    let endpoints = status.entry("daemonEndpoints").or_insert(json!({}));
    if let Some(e) = endpoints.as_object_mut() {
        let kubelet = e.entry("kubeletEndpoint").or_insert(json!({}));
        if let Some(k) = kubelet.as_object_mut() {
            zero(k, "Port", json!(0));
        }
    }
    let info = status.entry("nodeInfo").or_insert(json!({}));
    if let Some(info) = info.as_object_mut() {
        for k in NODE_INFO {
            set_default(info, k, json!(""));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_shape() {
        let mut p = json!({"metadata": {"labels": {}, "finalizers": []},
            "spec": {"nodeSelector": {}, "containers": [{"name": "c", "command": [], "env": [
                {"name": "M", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory"}}}]}],
                "volumes": [{"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                    {"name": "d", "downwardAPI": {"items": [{"path": "p", "resourceFieldRef": {"resource": "limits.cpu"}}]}}]},
            "status": {"qosClass": null, "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": null}],
                "containerStatuses": [{"name": "c", "state": {"terminated": {"reason": "Error"}}}]}});
        apply("Pod", &mut p);
        assert!(p["metadata"].get("labels").is_none() && p["metadata"].get("finalizers").is_none());
        assert!(p["spec"].get("nodeSelector").is_none());
        let c = &p["spec"]["containers"][0];
        assert!(c.get("command").is_none());
        assert_eq!(c["resources"], json!({}));
        assert_eq!(c["env"][0]["valueFrom"]["resourceFieldRef"]["divisor"], "0");
        assert_eq!(
            p["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]["metadata"],
            json!({"creationTimestamp": null})
        );
        assert_eq!(
            p["spec"]["volumes"][1]["downwardAPI"]["items"][0]["resourceFieldRef"]["divisor"],
            "0"
        );
        assert!(p["status"].get("qosClass").is_none());
        assert_eq!(
            p["status"]["conditions"][0],
            json!({"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": null})
        );
        assert_eq!(
            p["status"]["containerStatuses"][0],
            json!({"name": "c", "ready": false, "restartCount": 0, "image": "", "imageID": "", "lastState": {},
                "state": {"terminated": {"reason": "Error", "exitCode": 0, "startedAt": null, "finishedAt": null}}})
        );
    }

    #[test]
    fn node_shape() {
        let mut n = json!({"metadata": {"name": "n"}, "status": {"images": [{"names": [], "sizeBytes": 1}, {"names": ["a"]}],
            "conditions": [{"type": "Ready", "status": "True"}], "volumesInUse": []}});
        apply("Node", &mut n);
        assert_eq!(n["spec"], json!({}));
        assert_eq!(
            n["status"]["images"][0],
            json!({"names": null, "sizeBytes": 1})
        );
        assert_eq!(n["status"]["images"][1]["names"], json!(["a"]));
        assert!(n["status"].get("volumesInUse").is_none());
        assert_eq!(
            n["status"]["conditions"][0]["lastHeartbeatTime"],
            Value::Null
        );
        assert_eq!(
            n["status"]["daemonEndpoints"],
            json!({"kubeletEndpoint": {"Port": 0}})
        );
        assert_eq!(n["status"]["nodeInfo"]["kubeletVersion"], "");
        let mut c = json!({"spec": {"drivers": []}});
        apply("CSINode", &mut c);
        assert_eq!(c["spec"]["drivers"], Value::Null);
    }

    #[test]
    fn csi_shapes() {
        // As the kubelet sends it (the fidelity capture): drivers null stays null.
        let mut c = json!({"metadata": {"name": "n", "creationTimestamp": null, "annotations": {}},
            "spec": {"drivers": null}});
        apply("CSINode", &mut c);
        assert_eq!(
            c,
            json!({"metadata": {"name": "n"}, "spec": {"drivers": null}})
        );
        let mut c = json!({"spec": {"drivers": [{"name": "d", "nodeID": "x", "topologyKeys": [],
            "allocatable": {"count": null}}]}});
        apply("CSINode", &mut c);
        assert_eq!(
            c["spec"]["drivers"][0],
            json!({"name": "d", "nodeID": "x", "topologyKeys": null, "allocatable": {}})
        );
        let mut c = json!({});
        apply("CSINode", &mut c);
        assert_eq!(c["spec"], json!({"drivers": null}));

        let mut va = json!({"spec": {"attacher": "d", "source": {"persistentVolumeName": "pv"}},
            "status": {"attachmentMetadata": {}, "attachError": {"message": "boom"}}});
        apply("VolumeAttachment", &mut va);
        assert_eq!(
            va["spec"],
            json!({"attacher": "d", "source": {"persistentVolumeName": "pv"}, "nodeName": ""})
        );
        assert_eq!(
            va["status"],
            json!({"attached": false, "attachError": {"message": "boom", "time": null}})
        );
    }
}
