//! persistentVolumeClaim volumes: the claim is resolved to its bound
//! PersistentVolume through the API, and hostPath or local PVs are used in
//! place. A generic ephemeral volume is the claim `<pod>-<volume>` that the
//! ephemeral volume controller creates for the pod, used once it is bound
//! and only when the pod owns it (upstream `ephemeral.VolumeIsForPod`). A
//! CSI PV goes to the CSI plugin. Any other PV source (NFS, iSCSI, ...) is
//! refused with a clear error: those are in-tree plugins this kubelet lacks.
//!
//! Claims and volumes are read through the small views below rather than
//! as k8s-openapi's PersistentVolumeClaim and PersistentVolume: the kubelet
//! needs four of their fields, and the full types' decoders (some 30 PV
//! source kinds) cost the static binary over 100 KB.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{HostPathVolumeSource, LocalVolumeSource, Pod, Volume};
use serde_json::Value;

use super::csi::setup::CsiVolume;
use super::{hostpath, SetUpContext, VolumeError};
use crate::podutil::PodExt;

/// What the kubelet reads of a PersistentVolumeClaim: whether it is bound,
/// and to which volume, read from the object as the API sends it (no
/// derived decoders: four of them cost the static binary 7 KB).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimBinding {
    pub deleting: bool,
    /// The UIDs of its owners that are its controller.
    pub controllers: Vec<String>,
    pub volume_name: String,
    pub phase: Option<String>,
    /// `status.capacity.storage`: what the claim's volume holds now; below
    /// the PV's capacity, the volume awaits expansion on the node.
    pub capacity: Option<String>,
}

impl ClaimBinding {
    pub fn from_object(pvc: &Value) -> ClaimBinding {
        let text = |v: &Value| v.as_str().map(str::to_string);
        let meta = &pvc["metadata"];
        ClaimBinding {
            deleting: !meta["deletionTimestamp"].is_null(),
            controllers: meta["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|o| o["controller"] == true)
                .filter_map(|o| text(&o["uid"]))
                .collect(),
            volume_name: text(&pvc["spec"]["volumeName"]).unwrap_or_default(),
            phase: text(&pvc["status"]["phase"]),
            capacity: text(&pvc["status"]["capacity"]["storage"]),
        }
    }

    /// The pod `uid` is the claim's controlling owner.
    fn controlled_by(&self, uid: &str) -> bool {
        self.controllers.iter().any(|c| c == uid)
    }
}

/// The source of a PersistentVolume, as far as this kubelet can use it.
#[derive(Debug, Clone, PartialEq)]
pub enum PersistentVolumeSource {
    HostPath(HostPathVolumeSource),
    Local(LocalVolumeSource),
    Csi(Box<CsiVolume>),
    /// Any other source, by its field name in the spec (`csi`, `nfs`, ...),
    /// or "(none)".
    Unsupported(String),
}

impl PersistentVolumeSource {
    /// Reads the source of a PersistentVolume object as the API sends it.
    pub fn from_object(pv: &Value) -> Result<Self, String> {
        let spec = pv.get("spec").and_then(Value::as_object);
        let field = |name: &str| spec.and_then(|s| s.get(name)).filter(|v| !v.is_null());
        // A raw block device is mapped into containers (volumeDevices),
        // which this kubelet does for CSI volumes only.
        let block = field("volumeMode").and_then(Value::as_str) == Some("Block");
        if block && field("csi").is_none() {
            return Ok(Self::Unsupported(
                "volumeMode Block (other than csi)".into(),
            ));
        }
        if let Some(v) = field("hostPath") {
            return serde_json::from_value(v.clone())
                .map(Self::HostPath)
                .map_err(|e| format!("spec.hostPath: {e}"));
        }
        if let Some(v) = field("local") {
            return serde_json::from_value(v.clone())
                .map(Self::Local)
                .map_err(|e| format!("spec.local: {e}"));
        }
        if field("csi").is_some() {
            return CsiVolume::persistent(pv, false).map(|v| Self::Csi(Box::new(v)));
        }
        let other = spec.and_then(|s| {
            s.iter()
                .find(|(k, v)| !v.is_null() && !NON_SOURCE_FIELDS.contains(&k.as_str()))
                .map(|(k, _)| k.clone())
        });
        Ok(Self::Unsupported(other.unwrap_or_else(|| "(none)".into())))
    }
}

/// Returns the path and whether it is mounted read-only.
/// The claim a volume names, whether it is mounted read-only, and whether
/// the pod must own it (a generic ephemeral volume).
fn claim_of(ctx: &SetUpContext<'_>, vol: &Volume) -> Result<(String, bool, bool), VolumeError> {
    if let Some(src) = vol.persistent_volume_claim.as_ref() {
        return Ok((
            src.claim_name.clone(),
            src.read_only.unwrap_or(false),
            false,
        ));
    }
    if vol.ephemeral.is_some() {
        // upstream ephemeral.VolumeClaimName
        return Ok((format!("{}-{}", ctx.pod.name(), vol.name), false, true));
    }
    Err(VolumeError::Invalid(format!(
        "volume {:?}: no persistentVolumeClaim",
        vol.name
    )))
}

/// What a bound claim's volume is: a path on the node, or a CSI volume
/// for the CSI plugin.
pub enum ClaimVolume {
    /// The path and whether it is read-only.
    Path(PathBuf, bool),
    Csi(Box<CsiVolume>),
}

pub fn set_up(ctx: &SetUpContext<'_>, vol: &Volume) -> Result<ClaimVolume, VolumeError> {
    let (claim, read_only, ephemeral) = claim_of(ctx, vol)?;
    let ns = ctx.pod.namespace();
    let pvc = ctx
        .host
        .persistent_volume_claim(ns, &claim)
        .map_err(|e| VolumeError::Failed(format!("get persistentvolumeclaim {ns}/{claim}: {e}")))?
        .ok_or_else(|| {
            VolumeError::NotFound(format!("persistentvolumeclaim {claim:?} not found"))
        })?;
    if pvc.deleting {
        return Err(VolumeError::Failed(format!(
            "can't start pod because PVC {ns}/{claim} is being deleted"
        )));
    }
    if ephemeral && !pvc.controlled_by(ctx.pod.uid()) {
        return Err(VolumeError::Failed(format!(
            "PVC {ns}/{claim} was not created for pod {ns}/{} (pod is not owner)",
            ctx.pod.name()
        )));
    }
    let phase = pvc.phase.as_deref();
    let pv_name = pvc.volume_name.clone();
    if phase != Some("Bound") || pv_name.is_empty() {
        return Err(VolumeError::NotFound(format!(
            "persistentvolumeclaim {claim:?} is not bound (phase {})",
            phase.unwrap_or("Pending")
        )));
    }
    let source = ctx
        .host
        .persistent_volume(&pv_name)
        .map_err(|e| VolumeError::Failed(format!("get persistentvolume {pv_name}: {e}")))?
        .ok_or_else(|| VolumeError::NotFound(format!("persistentvolume {pv_name:?} not found")))?;
    if matches!(
        source,
        PersistentVolumeSource::HostPath(_) | PersistentVolumeSource::Local(_)
    ) {
        check_volume_mode(ctx.pod, &vol.name, false)?;
    }
    let path = match source {
        PersistentVolumeSource::HostPath(hp) => {
            let path = PathBuf::from(&hp.path);
            hostpath::check_type(&path, hp.type_.as_deref().unwrap_or(""))?;
            path
        }
        PersistentVolumeSource::Local(local) => {
            let path = PathBuf::from(&local.path);
            if !path.exists() {
                return Err(VolumeError::NotFound(format!(
                    "local volume {pv_name}: path {} does not exist",
                    path.display()
                )));
            }
            path
        }
        PersistentVolumeSource::Csi(mut v) => {
            check_volume_mode(ctx.pod, &vol.name, v.block)?;
            v.read_only |= read_only;
            v.claim = Some((ns.to_string(), claim.clone()));
            let claimed = pvc
                .capacity
                .as_deref()
                .and_then(|q| crate::util::quantity::parse_quantity_value(q).ok());
            // upstream: expand when the PV grew past the claim's status
            if let (Some((bytes, _)), Some(claimed)) = (&v.capacity, claimed) {
                if i128::from(*bytes) > claimed {
                    v.expand = true;
                }
            }
            return Ok(ClaimVolume::Csi(v));
        }
        PersistentVolumeSource::Unsupported(source) => {
            return Err(VolumeError::Invalid(format!(
                "persistentvolume {pv_name}: unsupported volume source {source} \
                 (this kubelet supports hostPath, local and CSI PersistentVolumes, \
                 and volumeMode Block for CSI only)"
            )));
        }
    };
    Ok(ClaimVolume::Path(path, read_only))
}

/// A Block volume must be named by the containers' `volumeDevices`, any
/// other by their `volumeMounts` (upstream's desired state populator,
/// with its messages).
fn check_volume_mode(pod: &Pod, name: &str, block: bool) -> Result<(), VolumeError> {
    let spec = pod.spec.as_ref();
    let containers = spec
        .into_iter()
        .flat_map(|s| s.init_containers.iter().flatten().chain(&s.containers));
    let (mut mounts, mut devices) = (false, false);
    for c in containers {
        mounts |= c.volume_mounts.iter().flatten().any(|m| m.name == name);
        devices |= c.volume_devices.iter().flatten().any(|d| d.name == name);
    }
    let mode = if block { "Block" } else { "Filesystem" };
    let wrong = match (block, mounts, devices) {
        (true, true, _) => "volumeMounts",
        (false, _, true) => "volumeDevices",
        _ => return Ok(()),
    };
    Err(VolumeError::Invalid(format!(
        "volume {name} has volumeMode {mode}, but is specified in {wrong}"
    )))
}

/// PersistentVolumeSpec fields that are not a volume source.
const NON_SOURCE_FIELDS: &[&str] = &[
    "accessModes",
    "capacity",
    "claimRef",
    "mountOptions",
    "nodeAffinity",
    "persistentVolumeReclaimPolicy",
    "storageClassName",
    "volumeAttributesClassName",
    "volumeMode",
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fieldpath::NodeAllocatable;
    use crate::volume::{HostError, VolumeHost};
    use k8s_openapi::api::core::v1::{ConfigMap, EphemeralVolumeSource, Pod, Secret};
    use serde_json::json;
    use std::sync::Arc;

    /// One claim `eph-scratch`, bound to a hostPath volume at `dir`.
    struct OneClaim {
        claim: Value,
        dir: String,
    }

    impl VolumeHost for OneClaim {
        fn config_map(&self, _: &str, _: &str) -> Result<Option<Arc<ConfigMap>>, HostError> {
            Ok(None)
        }
        fn secret(&self, _: &str, _: &str) -> Result<Option<Arc<Secret>>, HostError> {
            Ok(None)
        }
        fn service_account_token(&self, _: &Pod, _: &str, _: i64) -> Result<String, HostError> {
            Err(HostError::NeedsApiServer(
                "a serviceAccountToken projection",
            ))
        }
        fn persistent_volume_claim(
            &self,
            _: &str,
            name: &str,
        ) -> Result<Option<ClaimBinding>, HostError> {
            if name != "eph-scratch" {
                return Ok(None);
            }
            Ok(Some(ClaimBinding::from_object(&self.claim)))
        }
        fn persistent_volume(&self, _: &str) -> Result<Option<PersistentVolumeSource>, HostError> {
            Ok(Some(PersistentVolumeSource::HostPath(
                HostPathVolumeSource {
                    path: self.dir.clone(),
                    type_: None,
                },
            )))
        }
        fn node_allocatable(&self) -> NodeAllocatable {
            NodeAllocatable::default()
        }
        fn host_ips(&self) -> Vec<String> {
            Vec::new()
        }
    }

    fn claim(owner_uid: &str, deleting: bool) -> Value {
        let mut c = json!({
            "metadata": {"name": "eph-scratch", "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "eph", "uid": owner_uid, "controller": true}]},
            "spec": {"volumeName": "pv"},
            "status": {"phase": "Bound"}
        });
        if deleting {
            c["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        c
    }

    fn set_up_ephemeral(host: &OneClaim, pod_name: &str) -> Result<(PathBuf, bool), VolumeError> {
        let mut pod = Pod::default();
        pod.metadata.name = Some(pod_name.into());
        pod.metadata.namespace = Some("ns".into());
        pod.metadata.uid = Some("pod-uid".into());
        let vol = Volume {
            name: "scratch".into(),
            ephemeral: Some(EphemeralVolumeSource::default()),
            ..Default::default()
        };
        let ctx = SetUpContext {
            pod: &pod,
            pod_dir: std::path::Path::new("/nonexistent"),
            host,
        };
        set_up(&ctx, &vol).and_then(|v| match v {
            ClaimVolume::Path(p, ro) => Ok((p, ro)),
            ClaimVolume::Csi(_) => Err(VolumeError::Invalid("unexpected CSI volume".into())),
        })
    }

    /// upstream's desired state populator: the claim is `<pod>-<volume>`,
    /// must be controlled by the pod, and must not be going away.
    #[test]
    fn an_ephemeral_volume_is_its_pods_own_bound_claim() {
        let dir = std::env::temp_dir().display().to_string();
        let mine = OneClaim {
            claim: claim("pod-uid", false),
            dir: dir.clone(),
        };
        assert_eq!(
            set_up_ephemeral(&mine, "eph").map_err(|e| e.to_string()),
            Ok((PathBuf::from(&dir), false))
        );
        let e = set_up_ephemeral(&mine, "other").unwrap_err().to_string();
        assert!(e.contains("\"other-scratch\" not found"), "{e}");
        let foreign = OneClaim {
            claim: claim("someone-else", false),
            dir: dir.clone(),
        };
        let e = set_up_ephemeral(&foreign, "eph").unwrap_err().to_string();
        assert!(
            e.contains("PVC ns/eph-scratch was not created for pod ns/eph (pod is not owner)"),
            "{e}"
        );
        let going = OneClaim {
            claim: claim("pod-uid", true),
            dir,
        };
        let e = set_up_ephemeral(&going, "eph").unwrap_err().to_string();
        assert!(e.contains("PVC ns/eph-scratch is being deleted"), "{e}");
    }

    #[test]
    fn a_persistent_volume_source_is_read_from_the_object() {
        let hp = json!({"spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                 "hostPath": {"path": "/srv/data", "type": "Directory"}}});
        assert_eq!(
            PersistentVolumeSource::from_object(&hp),
            Ok(PersistentVolumeSource::HostPath(HostPathVolumeSource {
                path: "/srv/data".into(),
                type_: Some("Directory".into()),
            }))
        );
        let local = json!({"spec": {"local": {"path": "/mnt/disk"}, "nodeAffinity": {}}});
        assert!(matches!(
            PersistentVolumeSource::from_object(&local),
            Ok(PersistentVolumeSource::Local(l)) if l.path == "/mnt/disk"
        ));
        let csi = json!({"spec": {"claimRef": {"name": "c"}, "storageClassName": "fast",
                                  "csi": {"driver": "x", "volumeHandle": "h"}}});
        assert_eq!(
            PersistentVolumeSource::from_object(&csi)
                .map(|s| matches!(s, PersistentVolumeSource::Csi(_))),
            Ok(true)
        );
        let none = json!({"spec": {"capacity": {"storage": "1Gi"}}});
        assert_eq!(
            PersistentVolumeSource::from_object(&none),
            Ok(PersistentVolumeSource::Unsupported("(none)".into()))
        );
        let block = json!({"spec": {"volumeMode": "Block", "local": {"path": "/dev/sdb"}}});
        assert_eq!(
            PersistentVolumeSource::from_object(&block),
            Ok(PersistentVolumeSource::Unsupported(
                "volumeMode Block (other than csi)".into()
            ))
        );
        let csi_block = json!({"spec": {"volumeMode": "Block",
                                        "csi": {"driver": "x", "volumeHandle": "h"}}});
        assert!(matches!(
            PersistentVolumeSource::from_object(&csi_block),
            Ok(PersistentVolumeSource::Csi(v)) if v.block
        ));
        let bad = json!({"spec": {"hostPath": {"path": 7}}});
        assert!(PersistentVolumeSource::from_object(&bad)
            .is_err_and(|e| e.starts_with("spec.hostPath: ")));
    }

    #[test]
    fn a_claim_is_read_through_its_binding() {
        let pvc = ClaimBinding::from_object(&json!({
            "metadata": {"name": "c", "deletionTimestamp": "2024-01-01T00:00:00Z",
                         "ownerReferences": [{"uid": "u1", "controller": true}, {"uid": "u2"}]},
            "spec": {"volumeName": "pv-1", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}
        }));
        assert_eq!(
            pvc,
            ClaimBinding {
                deleting: true,
                controllers: vec!["u1".into()],
                volume_name: "pv-1".into(),
                phase: Some("Bound".into()),
                capacity: Some("1Gi".into()),
            }
        );
        assert_eq!(
            ClaimBinding::from_object(&json!({})),
            ClaimBinding::default()
        );
    }
}
