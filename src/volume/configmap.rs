//! configMap volumes (upstream `pkg/volume/configmap`): the ConfigMap's
//! keys as files, from the configMap manager's cache.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ConfigMap, KeyToPath, Volume};

use super::content::{write_volume, Medium};
use super::util::atomic_writer::Payload;
use super::util::payload::object_payload;
use super::{PluginKind, SetUpContext, VolumeError};
use crate::podutil::PodExt;

pub fn set_up(ctx: &SetUpContext<'_>, vol: &Volume) -> Result<PathBuf, VolumeError> {
    let Some(src) = vol.config_map.as_ref() else {
        return Err(VolumeError::Invalid(format!(
            "volume {:?}: no configMap",
            vol.name
        )));
    };
    let files = payload(
        ctx,
        &src.name,
        src.items.as_deref(),
        src.default_mode,
        src.optional.unwrap_or(false),
    )?;
    write_volume(ctx, PluginKind::ConfigMap, &vol.name, Medium::Disk, files)
}

/// The files of one ConfigMap (also a projected source). A missing,
/// optional ConfigMap gives no files.
pub fn payload(
    ctx: &SetUpContext<'_>,
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Payload, VolumeError> {
    let found = ctx
        .host
        .config_map(ctx.pod.namespace(), name)
        .map(|cm| cm.map(|cm| config_map_data(&cm)));
    object_payload(found, "configmap", name, items, default_mode, optional)
}

/// `data` and `binaryData` together, as upstream's payload does.
fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.as_bytes().to_vec()))
        .collect();
    for (k, v) in cm.binary_data.iter().flatten() {
        out.insert(k.clone(), v.0.clone());
    }
    out
}
