//! A stand-in for kube-controller-manager's attach/detach controller
//! (pkg/controller/volume/attachdetach) together with a CSI driver's
//! external-attacher, for CSI persistent volumes; off unless
//! `--attach-controller` or `POST /__double/attach {"enabled": true}`.
//!
//! Every 0.5 s (the PV binder's loop):
//!
//! * **attach**: for every pod bound to a node whose Node carries
//!   `volumes.kubernetes.io/controller-managed-attach-detach` (the ADC
//!   manages only such nodes), not terminated (phase Succeeded/Failed, or
//!   deleted with no container running), each volume whose claim
//!   (`persistentVolumeClaim`, or the `<pod>-<volume>` claim of an
//!   ephemeral volume) is Bound to a PV whose claimRef has the claim's uid
//!   and which has `spec.csi`, unless the driver's CSIDriver says
//!   `attachRequired: false` (no CSIDriver: attach is required, as
//!   upstream's csi plugin decides): the VolumeAttachment
//!   `csi-<sha256(volumeHandle + driver + nodeName)>` (csi_attacher.go
//!   getAttachmentName) with `{attacher: driver, nodeName, source:
//!   {persistentVolumeName}}` is created; then, as the external-attacher
//!   would, its status becomes `attached: true`; then the node's
//!   `status.volumesAttached` lists `{name: "kubernetes.io/csi/<driver>^
//!   <volumeHandle>", devicePath: ""}` (the csi plugin's GetVolumeName
//!   under GetUniqueVolumeName). Three writes, so watchers see each step.
//!   A PV annotated [`NEVER_ATTACH`]`: "true"` gets its attachment, which
//!   stays `attached: false`; one annotated [`ATTACH_ERROR`]`: <message>`
//!   gets `status.attachError {time, message}` instead.
//! * **detach**: an attachment this stand-in made (or found and took
//!   over) that no pod on its node needs any more, once the volume is not
//!   in the node's `status.volumesInUse` (the kubelet's report that it is
//!   unmounted) or the Node is gone: its entry leaves
//!   `status.volumesAttached`, then the VolumeAttachment is deleted.
//!
//! Not modelled: the ADC's 6-minute maxWaitForUnmountDuration (a volume
//! the kubelet never reports unmounted stays attached), the
//! external-attacher's finalizers, inline volume specs (CSI migration),
//! attach retries and timeouts, `attachmentMetadata` (a test patches
//! `volumeattachments/NAME/status` as admin for that). Entries of
//! `volumesAttached` this stand-in did not add are kept.

use crate::handlers::Api;
use crate::store::Inner;
use crate::util::{get, get_str, name_of, namespace_of, now_rfc3339, obj_field_mut, uid_of};
use rkubelet_util::lock;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A PV annotation (test-only): its attachments are created but never
/// attached.
pub const NEVER_ATTACH: &str = "test.rkubelet.io/never-attach";
/// A PV annotation (test-only): its attachments fail with this message
/// (`status.attachError`).
pub const ATTACH_ERROR: &str = "test.rkubelet.io/attach-error";
/// volumeutil.ControllerManagedAttachAnnotation (the kubelet sets it with
/// enableControllerAttachDetach).
pub const MANAGED_ANNOTATION: &str = "volumes.kubernetes.io/controller-managed-attach-detach";
const VA_KEY: &str = "volumeattachments.storage.k8s.io";
const DRIVER_KEY: &str = "csidrivers.storage.k8s.io";

/// An attachment the stand-in looks after.
#[derive(Debug, Clone, PartialEq)]
struct Managed {
    node: String,
    /// kubernetes.io/csi/<driver>^<handle>
    unique: String,
}

#[derive(Default)]
pub struct Settings {
    pub enabled: AtomicBool,
    /// VolumeAttachment name → what it attaches.
    managed: Mutex<BTreeMap<String, Managed>>,
}

impl Settings {
    pub fn set_enabled(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    pub fn to_json(&self) -> Value {
        let managed: BTreeMap<String, Value> = lock(&self.managed)
            .iter()
            .map(|(k, m)| {
                (
                    k.clone(),
                    json!({"nodeName": m.node, "volumeName": m.unique}),
                )
            })
            .collect();
        json!({
            "enabled": self.enabled.load(Ordering::Relaxed),
            "neverAttachAnnotation": NEVER_ATTACH,
            "attachErrorAnnotation": ATTACH_ERROR,
            "attachments": managed,
        })
    }
}

/// csi_attacher.go getAttachmentName: `csi-` and the hex SHA-256 of the
/// volume handle, the driver name and the node name, concatenated.
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{}{}{}", handle, driver, node).as_bytes(),
    );
    let hex: String = d.as_ref().iter().map(|b| format!("{:02x}", b)).collect();
    format!("csi-{}", hex)
}

/// The unique volume name the attach/detach controller and the kubelet
/// use for a CSI volume (GetUniqueVolumeName of the csi plugin's
/// GetVolumeName).
pub fn unique_volume_name(driver: &str, handle: &str) -> String {
    format!("kubernetes.io/csi/{}^{}", driver, handle)
}

/// A VolumeAttachment some pod needs.
struct Want {
    node: String,
    pv: String,
    driver: String,
    unique: String,
}

/// util.IsPodTerminated: a terminal phase, or deleted with no container
/// running (every status terminated or waiting).
fn pod_terminated(pod: &Value) -> bool {
    if matches!(
        get_str(pod, &["status", "phase"]),
        Some("Succeeded" | "Failed")
    ) {
        return true;
    }
    if get(pod, &["metadata", "deletionTimestamp"]).is_none() {
        return false;
    }
    [
        "initContainerStatuses",
        "containerStatuses",
        "ephemeralContainerStatuses",
    ]
    .iter()
    .flat_map(|l| {
        get(pod, &["status", l])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    })
    .all(|s| get(s, &["state", "terminated"]).is_some() || get(s, &["state", "waiting"]).is_some())
}

fn managed_node(g: &Inner, node: &str) -> bool {
    g.get("nodes", "", node)
        .is_some_and(|n| get(&n, &["metadata", "annotations", MANAGED_ANNOTATION]).is_some())
}

/// The attachments the pods need, by VolumeAttachment name.
fn desired(g: &Inner) -> BTreeMap<String, Want> {
    let mut out = BTreeMap::new();
    for pod in g.list("pods", None) {
        let node = get_str(&pod, &["spec", "nodeName"]).unwrap_or("");
        if node.is_empty() || pod_terminated(&pod) || !managed_node(g, node) {
            continue;
        }
        let ns = namespace_of(&pod);
        for v in get(&pod, &["spec", "volumes"])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let claim = match get_str(v, &["persistentVolumeClaim", "claimName"]) {
                Some(c) => c.to_string(),
                None if v.get("ephemeral").is_some() => {
                    format!("{}-{}", name_of(&pod), get_str(v, &["name"]).unwrap_or(""))
                }
                None => continue,
            };
            let Some(pvc) = g.get("persistentvolumeclaims", ns, &claim) else {
                continue;
            };
            let pv_name = get_str(&pvc, &["spec", "volumeName"]).unwrap_or("");
            if get_str(&pvc, &["status", "phase"]) != Some("Bound") || pv_name.is_empty() {
                continue;
            }
            let Some(pv) = g.get("persistentvolumes", "", pv_name) else {
                continue;
            };
            if get_str(&pv, &["spec", "claimRef", "uid"]) != Some(uid_of(&pvc)) {
                continue;
            }
            let (Some(driver), Some(handle)) = (
                get_str(&pv, &["spec", "csi", "driver"]),
                get_str(&pv, &["spec", "csi", "volumeHandle"]),
            ) else {
                continue;
            };
            let attach_required = g
                .get(DRIVER_KEY, "", driver)
                .and_then(|d| get(&d, &["spec", "attachRequired"]).and_then(Value::as_bool))
                .unwrap_or(true);
            if !attach_required {
                continue;
            }
            out.insert(
                attachment_name(handle, driver, node),
                Want {
                    node: node.to_string(),
                    pv: pv_name.to_string(),
                    driver: driver.to_string(),
                    unique: unique_volume_name(driver, handle),
                },
            );
        }
    }
    out
}

fn pv_annotation(g: &Inner, pv: &str, key: &str) -> Option<String> {
    g.get("persistentvolumes", "", pv)
        .and_then(|p| get_str(&p, &["metadata", "annotations", key]).map(String::from))
}

/// Creates (or takes over) the attachment and attaches it, as the ADC and
/// the external-attacher would.
fn attach(g: &mut Inner, name: &str, w: &Want) {
    let va = match g.get(VA_KEY, "", name) {
        Some(va) => va,
        None => g.put(
            VA_KEY,
            json!({"kind": "VolumeAttachment", "apiVersion": "storage.k8s.io/v1",
                "metadata": {"name": name, "uid": crate::util::uuid4(), "creationTimestamp": now_rfc3339()},
                "spec": {"attacher": w.driver, "source": {"persistentVolumeName": w.pv}, "nodeName": w.node},
                "status": {"attached": false}}),
        ),
    };
    if get(&va, &["metadata", "deletionTimestamp"]).is_some()
        || get(&va, &["status", "attached"]).and_then(Value::as_bool) == Some(true)
        || pv_annotation(g, &w.pv, NEVER_ATTACH).as_deref() == Some("true")
    {
        return;
    }
    let mut n = (*va).clone();
    let status = obj_field_mut(&mut n, "status");
    match pv_annotation(g, &w.pv, ATTACH_ERROR) {
        Some(msg) => {
            if get_str(&va, &["status", "attachError", "message"]) == Some(msg.as_str()) {
                return;
            }
            status.insert(
                "attachError".into(),
                json!({"time": now_rfc3339(), "message": msg}),
            );
        }
        None => {
            status.insert("attached".into(), json!(true));
            status.remove("attachError");
        }
    }
    g.put(VA_KEY, n);
}

fn is_attached(g: &Inner, va: &str) -> bool {
    g.get(VA_KEY, "", va)
        .and_then(|v| get(&v, &["status", "attached"]).and_then(Value::as_bool))
        == Some(true)
}

/// Sets the node's status.volumesAttached: its entries for `ours` (the
/// unique names this stand-in looks after on it) become `attached`, in
/// name order; other entries stay.
fn report_attached(
    g: &mut Inner,
    node: &str,
    ours: &BTreeSet<String>,
    attached: &BTreeSet<String>,
) {
    let Some(n) = g.get("nodes", "", node) else {
        return;
    };
    let current: Vec<Value> = get(&n, &["status", "volumesAttached"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut list: Vec<Value> = current
        .iter()
        .filter(|e| !get_str(e, &["name"]).is_some_and(|u| ours.contains(u)))
        .cloned()
        .collect();
    list.extend(
        attached
            .iter()
            .map(|u| json!({"name": u, "devicePath": ""})),
    );
    if list == current {
        return;
    }
    let mut n = (*n).clone();
    let status = obj_field_mut(&mut n, "status");
    if list.is_empty() {
        status.remove("volumesAttached");
    } else {
        status.insert("volumesAttached".into(), json!(list));
    }
    g.put("nodes", n);
}

fn in_use(g: &Inner, node: &str, unique: &str) -> bool {
    g.get("nodes", "", node).is_some_and(|n| {
        get(&n, &["status", "volumesInUse"])
            .and_then(Value::as_array)
            .is_some_and(|l| l.iter().any(|u| u.as_str() == Some(unique)))
    })
}

/// One pass (when enabled).
pub fn tick(api: &Api) {
    if !api.attach.enabled.load(Ordering::Relaxed) {
        return;
    }
    let mut g = api.store.lock();
    let mut managed = lock(&api.attach.managed);
    let want = desired(&g);
    for (name, w) in &want {
        attach(&mut g, name, w);
        managed.insert(
            name.clone(),
            Managed {
                node: w.node.clone(),
                unique: w.unique.clone(),
            },
        );
    }
    // Gone from the store behind the stand-in's back (an admin delete).
    managed.retain(|name, _| g.get(VA_KEY, "", name).is_some());
    let detach: Vec<String> = managed
        .iter()
        .filter(|(name, m)| !want.contains_key(*name) && !in_use(&g, &m.node, &m.unique))
        .map(|(name, _)| name.clone())
        .collect();
    let nodes: BTreeSet<String> = managed.values().map(|m| m.node.clone()).collect();
    for node in nodes {
        let on_node = || managed.iter().filter(|(_, m)| m.node == node);
        let ours: BTreeSet<String> = on_node().map(|(_, m)| m.unique.clone()).collect();
        let attached: BTreeSet<String> = on_node()
            .filter(|(name, _)| !detach.contains(name) && is_attached(&g, name))
            .map(|(_, m)| m.unique.clone())
            .collect();
        report_attached(&mut g, &node, &ours, &attached);
    }
    for name in detach {
        g.remove(VA_KEY, "", &name);
        managed.remove(&name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_as_upstream_computes_them() {
        // sha256("vol-1" + "hostpath.csi.k8s.io" + "node-a"), by Python's hashlib.
        let got = attachment_name("vol-1", "hostpath.csi.k8s.io", "node-a");
        assert_eq!(
            got,
            "csi-5a70c5de395ccad5e79daeb27c7c4f2634b675e6e1bb2a397999a016143bc9fb"
        );
        assert_eq!(got.len(), 68);
        assert!(crate::kinds::is_dns_subdomain(&got));
        assert_eq!(
            unique_volume_name("hostpath.csi.k8s.io", "vol-1"),
            "kubernetes.io/csi/hostpath.csi.k8s.io^vol-1"
        );
    }

    #[test]
    fn terminated_pods() {
        assert!(pod_terminated(&json!({"status": {"phase": "Failed"}})));
        assert!(!pod_terminated(&json!({"status": {"phase": "Running"}})));
        let deleting = json!({"metadata": {"deletionTimestamp": "x"},
            "status": {"containerStatuses": [{"state": {"running": {}}}]}});
        assert!(!pod_terminated(&deleting));
        let done = json!({"metadata": {"deletionTimestamp": "x"},
            "status": {"containerStatuses": [{"state": {"terminated": {}}}]}});
        assert!(pod_terminated(&done));
    }
}
