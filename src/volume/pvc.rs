//! persistentVolumeClaim volumes: the claim is resolved to its bound
//! PersistentVolume through the API, and hostPath or local PVs are used in
//! place. Any other PV source (CSI, NFS, ...) is refused with a clear
//! error: this kubelet has no attach/detach or CSI support yet.
//!
//! Claims and volumes are read through the small views below rather than
//! as k8s-openapi's PersistentVolumeClaim and PersistentVolume: the kubelet
//! needs four of their fields, and the full types' decoders (some 30 PV
//! source kinds) cost the static binary over 100 KB.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{HostPathVolumeSource, LocalVolumeSource, Volume};
use serde::Deserialize;
use serde_json::Value;

use super::{hostpath, SetUpContext, VolumeError};
use crate::podutil::PodExt;

/// What the kubelet reads of a PersistentVolumeClaim: whether it is bound,
/// and to which volume.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ClaimBinding {
    #[serde(default)]
    pub spec: Option<ClaimSpec>,
    #[serde(default)]
    pub status: Option<ClaimStatus>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ClaimSpec {
    #[serde(default, rename = "volumeName")]
    pub volume_name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct ClaimStatus {
    #[serde(default)]
    pub phase: Option<String>,
}

/// The source of a PersistentVolume, as far as this kubelet can use it.
#[derive(Debug, Clone, PartialEq)]
pub enum PersistentVolumeSource {
    HostPath(HostPathVolumeSource),
    Local(LocalVolumeSource),
    /// Any other source, by its field name in the spec (`csi`, `nfs`, ...),
    /// or "(none)".
    Unsupported(String),
}

impl PersistentVolumeSource {
    /// Reads the source of a PersistentVolume object as the API sends it.
    pub fn from_object(pv: &Value) -> Result<Self, String> {
        let spec = pv.get("spec").and_then(Value::as_object);
        let field = |name: &str| spec.and_then(|s| s.get(name)).filter(|v| !v.is_null());
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
        let other = spec.and_then(|s| {
            s.iter()
                .find(|(k, v)| !v.is_null() && !NON_SOURCE_FIELDS.contains(&k.as_str()))
                .map(|(k, _)| k.clone())
        });
        Ok(Self::Unsupported(other.unwrap_or_else(|| "(none)".into())))
    }
}

/// Returns the path and whether it is mounted read-only.
pub fn set_up(ctx: &SetUpContext<'_>, vol: &Volume) -> Result<(PathBuf, bool), VolumeError> {
    let Some(src) = vol.persistent_volume_claim.as_ref() else {
        return Err(VolumeError::Invalid(format!(
            "volume {:?}: no persistentVolumeClaim",
            vol.name
        )));
    };
    let ns = ctx.pod.namespace();
    let claim = &src.claim_name;
    let pvc = ctx
        .host
        .persistent_volume_claim(ns, claim)
        .map_err(|e| VolumeError::Failed(format!("get persistentvolumeclaim {ns}/{claim}: {e}")))?
        .ok_or_else(|| {
            VolumeError::NotFound(format!("persistentvolumeclaim {claim:?} not found"))
        })?;
    let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref());
    let pv_name = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
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
        PersistentVolumeSource::Unsupported(source) => {
            return Err(VolumeError::Invalid(format!(
                "persistentvolume {pv_name}: unsupported volume source {source} \
                 (this kubelet supports hostPath and local PersistentVolumes; CSI is not supported yet)"
            )));
        }
    };
    Ok((path, src.read_only.unwrap_or(false)))
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
    use serde_json::json;

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
            PersistentVolumeSource::from_object(&csi),
            Ok(PersistentVolumeSource::Unsupported("csi".into()))
        );
        let none = json!({"spec": {"capacity": {"storage": "1Gi"}}});
        assert_eq!(
            PersistentVolumeSource::from_object(&none),
            Ok(PersistentVolumeSource::Unsupported("(none)".into()))
        );
        let bad = json!({"spec": {"hostPath": {"path": 7}}});
        assert!(PersistentVolumeSource::from_object(&bad)
            .is_err_and(|e| e.starts_with("spec.hostPath: ")));
    }

    #[test]
    fn a_claim_is_read_through_its_binding() {
        let pvc: ClaimBinding = serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"volumeName": "pv-1", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}
        }))
        .expect("decode");
        assert_eq!(
            pvc.spec.and_then(|s| s.volume_name).as_deref(),
            Some("pv-1")
        );
        assert_eq!(pvc.status.and_then(|s| s.phase).as_deref(), Some("Bound"));
    }
}
