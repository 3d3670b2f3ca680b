//! persistentVolumeClaim volumes: the claim is resolved to its bound
//! PersistentVolume through the API, and hostPath or local PVs are used in
//! place. Any other PV source (CSI, NFS, ...) is refused with a clear
//! error: this kubelet has no attach/detach or CSI support yet.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Volume;

use super::{hostpath, SetUpContext, VolumeError};
use crate::podutil::PodExt;

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
    let pv = ctx
        .host
        .persistent_volume(&pv_name)
        .map_err(|e| VolumeError::Failed(format!("get persistentvolume {pv_name}: {e}")))?
        .ok_or_else(|| VolumeError::NotFound(format!("persistentvolume {pv_name:?} not found")))?;
    let spec = pv.spec.unwrap_or_default();
    let path = if let Some(hp) = &spec.host_path {
        let path = PathBuf::from(&hp.path);
        hostpath::check_type(&path, hp.type_.as_deref().unwrap_or(""))?;
        path
    } else if let Some(local) = &spec.local {
        let path = PathBuf::from(&local.path);
        if !path.exists() {
            return Err(VolumeError::NotFound(format!(
                "local volume {pv_name}: path {} does not exist",
                path.display()
            )));
        }
        path
    } else {
        let source = serde_json::to_value(&spec)
            .ok()
            .and_then(|v| {
                v.as_object().and_then(|o| {
                    o.keys()
                        .find(|k| !NON_SOURCE_FIELDS.contains(&k.as_str()))
                        .cloned()
                })
            })
            .unwrap_or_else(|| "(none)".into());
        return Err(VolumeError::Invalid(format!(
            "persistentvolume {pv_name}: unsupported volume source {source} \
             (this kubelet supports hostPath and local PersistentVolumes; CSI is not supported yet)"
        )));
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
