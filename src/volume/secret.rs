//! secret volumes (upstream `pkg/volume/secret`): the Secret's keys as
//! files on a tmpfs, from the secret manager's cache.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{KeyToPath, Secret, Volume};

use super::content::{write_volume, Medium};
use super::util::atomic_writer::Payload;
use super::util::payload::object_payload;
use super::{PluginKind, SetUpContext, VolumeError};
use crate::podutil::PodExt;

pub fn set_up(ctx: &SetUpContext<'_>, vol: &Volume) -> Result<PathBuf, VolumeError> {
    let Some(src) = vol.secret.as_ref() else {
        return Err(VolumeError::Invalid(format!(
            "volume {:?}: no secret",
            vol.name
        )));
    };
    let name = src.secret_name.clone().unwrap_or_default();
    let files = payload(
        ctx,
        &name,
        src.items.as_deref(),
        src.default_mode,
        src.optional.unwrap_or(false),
    )?;
    write_volume(ctx, PluginKind::Secret, &vol.name, Medium::Memory, files)
}

/// The files of one Secret (also a projected source).
pub fn payload(
    ctx: &SetUpContext<'_>,
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
) -> Result<Payload, VolumeError> {
    let found = ctx
        .host
        .secret(ctx.pod.namespace(), name)
        .map(|s| s.map(|s| secret_data(&s)));
    object_payload(found, "secret", name, items, default_mode, optional)
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    // stringData is write-only in the API; honour it if a source kept it.
    for (k, v) in s.string_data.iter().flatten() {
        out.insert(k.clone(), v.as_bytes().to_vec());
    }
    out
}
