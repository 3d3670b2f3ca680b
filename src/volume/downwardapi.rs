//! downwardAPI volumes (upstream `pkg/volume/downwardapi`): pod metadata
//! and container resources as files, rewritten when the pod changes.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, Volume};

use super::content::{write_volume, Medium};
use super::util::atomic_writer::{validate_path, FileProjection, Payload};
use super::{file_mode, PluginKind, SetUpContext, VolumeError};
use crate::fieldpath::{self, PodFacts};

pub fn set_up(ctx: &SetUpContext<'_>, vol: &Volume) -> Result<PathBuf, VolumeError> {
    let Some(src) = vol.downward_api.as_ref() else {
        return Err(VolumeError::Invalid(format!(
            "volume {:?}: no downwardAPI",
            vol.name
        )));
    };
    let files = payload(
        ctx,
        src.items.as_deref().unwrap_or_default(),
        src.default_mode,
    )?;
    write_volume(ctx, PluginKind::DownwardApi, &vol.name, Medium::Disk, files)
}

/// The files of a downwardAPI source (also a projected source).
pub fn payload(
    ctx: &SetUpContext<'_>,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
) -> Result<Payload, VolumeError> {
    let mut out = Payload::new();
    let host_ips = ctx.host.host_ips();
    let facts = PodFacts {
        pod_ips: &[],
        host_ips: &host_ips,
    };
    for item in items {
        validate_path(&item.path).map_err(|e| VolumeError::Invalid(e.to_string()))?;
        let value = if let Some(f) = &item.field_ref {
            fieldpath::field_value(ctx.pod, &f.field_path, &facts)
                .map_err(|e| VolumeError::Invalid(format!("{}: {e}", item.path)))?
        } else if let Some(r) = &item.resource_field_ref {
            let name = r.container_name.as_deref().unwrap_or_default();
            let container = crate::podutil::find_container(ctx.pod, name).ok_or_else(|| {
                VolumeError::Invalid(format!("{}: no container named {name:?}", item.path))
            })?;
            fieldpath::resource_value(r, container, &ctx.host.node_allocatable())
                .map_err(|e| VolumeError::Invalid(format!("{}: {e}", item.path)))?
        } else {
            return Err(VolumeError::Invalid(format!(
                "{}: one of fieldRef and resourceFieldRef is required",
                item.path
            )));
        };
        out.insert(
            item.path.clone(),
            FileProjection {
                data: value.into_bytes(),
                mode: file_mode(item.mode, default_mode)?,
                fs_user: None,
            },
        );
    }
    Ok(out)
}
