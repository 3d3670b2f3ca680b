//! emptyDir (upstream `pkg/volume/emptydir`): a directory on the node's
//! disk, or a tmpfs for `medium: Memory`. Mode 0777 on both, so non-root
//! containers can write to it, as upstream.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Volume;

use super::util::mount;
use super::{io_failed, PluginKind, SetUpContext, VolumeError};
use crate::util::quantity;

pub fn set_up(ctx: &SetUpContext<'_>, vol: &Volume) -> Result<PathBuf, VolumeError> {
    let spec = vol.empty_dir.as_ref();
    let dir = ctx.volume_dir(PluginKind::EmptyDir, &vol.name);
    match spec.and_then(|s| s.medium.as_deref()).unwrap_or("") {
        "" => {
            std::fs::create_dir_all(&dir).map_err(|e| io_failed(dir.display(), e))?;
        }
        "Memory" => {
            let size = memory_size(ctx, vol)?;
            mount::ensure_tmpfs(&dir, Some(size))
                .map_err(|e| io_failed(format!("mount tmpfs on {}", dir.display()), e))?;
        }
        m if m.starts_with("HugePages") => {
            return Err(VolumeError::Invalid(format!(
                "volume {:?}: emptyDir medium {m} is not supported by this kubelet \
                 (no hugepages support)",
                vol.name
            )))
        }
        other => {
            return Err(VolumeError::Invalid(format!(
                "volume {:?}: unknown emptyDir medium {other:?}",
                vol.name
            )))
        }
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
        .map_err(|e| io_failed(format!("chmod {}", dir.display()), e))?;
    super::util::ownership::set_volume_ownership(&dir, ctx.fs_group(), false)
        .map_err(|e| io_failed(format!("fsGroup on {}", dir.display()), e))?;
    Ok(dir)
}

/// tmpfs size: `sizeLimit`, else node allocatable memory (upstream
/// calculateEmptyDirMemorySize without the pod-limit refinement).
fn memory_size(ctx: &SetUpContext<'_>, vol: &Volume) -> Result<u64, VolumeError> {
    let allocatable = u64::try_from(ctx.host.node_allocatable().memory).unwrap_or(0);
    let limit = vol
        .empty_dir
        .as_ref()
        .and_then(|s| s.size_limit.as_ref())
        .map(|q| quantity::parse_quantity_value(&q.0))
        .transpose()
        .map_err(|e| VolumeError::Invalid(format!("volume {:?}: sizeLimit: {e}", vol.name)))?
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| *v > 0);
    Ok(match limit {
        Some(l) if allocatable > 0 => l.min(allocatable),
        Some(l) => l,
        None => allocatable,
    })
}
