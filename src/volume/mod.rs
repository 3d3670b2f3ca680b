//! Volume plugins (upstream `pkg/volume`): each turns one of a pod's
//! volumes into a directory on the node that containers bind-mount.
//!
//! | volume | directory | medium |
//! | --- | --- | --- |
//! | emptyDir | `pods/<uid>/volumes/kubernetes.io~empty-dir/<name>` | disk, or tmpfs for `medium: Memory` |
//! | configMap | `.../kubernetes.io~configmap/<name>` | disk |
//! | secret | `.../kubernetes.io~secret/<name>` | tmpfs |
//! | downwardAPI | `.../kubernetes.io~downward-api/<name>` | disk |
//! | projected | `.../kubernetes.io~projected/<name>` | tmpfs |
//! | hostPath, PVC of a hostPath/local PV | the host path itself | - |
//! | csi (inline), PVC of a CSI PV | `.../kubernetes.io~csi/<name>/mount` | the driver's ([`csi`]) |
//!
//! Content volumes (configMap, secret, downwardAPI, projected) are written
//! with the [`util::atomic_writer`] and rewritten when their source changes.

pub mod configmap;
mod content;
pub mod csi;
pub mod downwardapi;
pub mod emptydir;
pub mod hostpath;
pub mod projected;
pub mod pvc;
pub mod secret;
pub mod util;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Volume};

use crate::fieldpath::NodeAllocatable;
use crate::podutil::PodExt;

/// Why a volume could not be set up; the message is what the FailedMount
/// event and the pod's status carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeError {
    /// The spec asks for something invalid or unsupported (no retry helps
    /// until the spec changes).
    Invalid(String),
    /// A referenced object or key is missing; retried until it appears.
    NotFound(String),
    /// The API server, the token service or the filesystem failed.
    Failed(String),
    /// A driver is at it (a CSI operation runs); the volume manager is
    /// woken when it ends. Neither an error to report nor a back-off.
    Pending,
}

impl VolumeError {
    pub fn message(&self) -> &str {
        match self {
            VolumeError::Invalid(m) | VolumeError::NotFound(m) | VolumeError::Failed(m) => m,
            VolumeError::Pending => "waiting for the CSI driver",
        }
    }
}

impl std::fmt::Display for VolumeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for VolumeError {}

fn io_failed(what: impl std::fmt::Display, e: impl std::fmt::Display) -> VolumeError {
    VolumeError::Failed(format!("{what}: {e}"))
}

/// Why the kubelet could not give a plugin (or a container environment)
/// what it asked for: the [`VolumeHost`]'s errors.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HostError {
    /// Standalone mode: `.0` needs an API server.
    #[error("{0} needs an API server (--kubeconfig); static pods cannot use it")]
    NeedsApiServer(&'static str),
    /// The secret or configMap manager failed.
    #[error(transparent)]
    Object(#[from] crate::util::manager::ManagerError),
    #[error(transparent)]
    Token(#[from] crate::token::TokenError),
    #[error(transparent)]
    Api(#[from] crate::client::ApiError),
    /// An object the API server sent that the kubelet cannot read.
    #[error("{0}")]
    Invalid(String),
}

/// What the plugins need from the rest of the kubelet (upstream
/// VolumeHost): API objects through the secret/configMap managers, tokens
/// through the token manager, and node facts.
pub trait VolumeHost: Send + Sync {
    /// `Ok(None)`: the object does not exist.
    fn config_map(&self, ns: &str, name: &str) -> Result<Option<Arc<ConfigMap>>, HostError>;
    fn secret(&self, ns: &str, name: &str) -> Result<Option<Arc<Secret>>, HostError>;
    /// A token for the pod's service account, bound to the pod.
    fn service_account_token(
        &self,
        pod: &Pod,
        audience: &str,
        expiration_seconds: i64,
    ) -> Result<String, HostError>;
    fn persistent_volume_claim(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<pvc::ClaimBinding>, HostError>;
    fn persistent_volume(
        &self,
        name: &str,
    ) -> Result<Option<pvc::PersistentVolumeSource>, HostError>;
    fn node_allocatable(&self) -> NodeAllocatable;
    fn host_ips(&self) -> Vec<String>;
    /// The CSI plugin; none without an API server.
    fn csi(&self) -> Option<&Arc<csi::CsiPlugin>> {
        None
    }
}

/// The plugin a volume spec selects, with the directory it lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginKind {
    EmptyDir,
    HostPath,
    ConfigMap,
    Secret,
    DownwardApi,
    Projected,
    PersistentVolumeClaim,
    /// An inline `csi` volume, or the PV of a claim whose source is CSI.
    Csi,
    /// An `image` volume: nothing on the node; the runtime mounts the
    /// image the kubelet pulled (upstream's stub `kubernetes.io/image`
    /// plugin, with the work in kuberuntime).
    Image,
}

impl PluginKind {
    pub fn of(vol: &Volume) -> Result<PluginKind, VolumeError> {
        Ok(if vol.empty_dir.is_some() {
            PluginKind::EmptyDir
        } else if vol.host_path.is_some() {
            PluginKind::HostPath
        } else if vol.config_map.is_some() {
            PluginKind::ConfigMap
        } else if vol.secret.is_some() {
            PluginKind::Secret
        } else if vol.downward_api.is_some() {
            PluginKind::DownwardApi
        } else if vol.projected.is_some() {
            PluginKind::Projected
        } else if vol.csi.is_some() {
            PluginKind::Csi
        } else if vol.image.is_some() {
            PluginKind::Image
        } else if vol.persistent_volume_claim.is_some() || vol.ephemeral.is_some() {
            // A generic ephemeral volume is the claim its controller made.
            PluginKind::PersistentVolumeClaim
        } else {
            return Err(VolumeError::Invalid(format!(
                "volume {:?}: unsupported volume type {} (supported: emptyDir, hostPath, \
                 configMap, secret, downwardAPI, projected, persistentVolumeClaim, ephemeral, csi, \
                 image)",
                vol.name,
                unsupported_type(vol)
            )));
        })
    }

    /// Upstream's plugin name, escaped as in the pod's volume directory.
    pub fn dir_name(self) -> &'static str {
        match self {
            PluginKind::EmptyDir => "kubernetes.io~empty-dir",
            PluginKind::HostPath => "kubernetes.io~host-path",
            PluginKind::ConfigMap => "kubernetes.io~configmap",
            PluginKind::Secret => "kubernetes.io~secret",
            PluginKind::DownwardApi => "kubernetes.io~downward-api",
            PluginKind::Projected => "kubernetes.io~projected",
            PluginKind::PersistentVolumeClaim => "kubernetes.io~pvc",
            PluginKind::Csi => csi::CSI_DIR,
            PluginKind::Image => "kubernetes.io~image",
        }
    }

    /// Content that follows an API object or the pod, so it is rewritten on
    /// resync (upstream RequiresRemount).
    pub fn requires_remount(self) -> bool {
        matches!(
            self,
            PluginKind::ConfigMap
                | PluginKind::Secret
                | PluginKind::DownwardApi
                | PluginKind::Projected
                // for drivers with requiresRepublish; cheap for the others
                | PluginKind::Csi
        )
    }
}

fn unsupported_type(vol: &Volume) -> String {
    // Name the source the user wrote, from the volume's own JSON.
    crate::podutil::volume_source_fields(vol)
        .into_iter()
        .next()
        .unwrap_or_else(|| "(none)".into())
}

/// A volume that is set up: where containers mount it from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedVolume {
    pub kind: PluginKind,
    pub host_path: PathBuf,
    /// The volume itself is read-only (PVC `readOnly`, content volumes are
    /// always mounted read-only by containers, as upstream).
    pub read_only: bool,
    /// A raw block device (a CSI PV of `volumeMode: Block`): `host_path`
    /// is the pod's link to it, for the containers' `volumeDevices`.
    pub block: bool,
}

/// Everything a plugin needs to set up one volume of one pod.
pub struct SetUpContext<'a> {
    pub pod: &'a Pod,
    pub pod_dir: &'a Path,
    pub host: &'a dyn VolumeHost,
}

impl SetUpContext<'_> {
    /// `pods/<uid>/volumes/<plugin>/<name>`
    pub fn volume_dir(&self, kind: PluginKind, name: &str) -> PathBuf {
        volume_dir(self.pod_dir, kind, name)
    }

    /// The pod's fsGroup, applied to the volume's files.
    pub fn fs_group(&self) -> Option<i64> {
        self.pod
            .spec_or_default()
            .security_context
            .as_ref()
            .and_then(|s| s.fs_group)
    }
}

pub fn volume_dir(pod_dir: &Path, kind: PluginKind, name: &str) -> PathBuf {
    pod_dir.join("volumes").join(kind.dir_name()).join(name)
}

/// Sets up (or refreshes) one volume (upstream Mounter.SetUp).
pub fn set_up(ctx: &SetUpContext<'_>, vol: &Volume) -> Result<MountedVolume, VolumeError> {
    let kind = PluginKind::of(vol)?;
    let csi = ctx.host.csi();
    // A published CSI volume needs no claim lookups to stay so.
    if matches!(kind, PluginKind::Csi | PluginKind::PersistentVolumeClaim) {
        if let Some(mv) = csi.and_then(|c| c.still_published(ctx.pod_dir, &vol.name)) {
            return Ok(mv);
        }
    }
    let (host_path, read_only) = match kind {
        PluginKind::EmptyDir => (emptydir::set_up(ctx, vol)?, false),
        PluginKind::HostPath => (hostpath::set_up(vol)?, false),
        PluginKind::ConfigMap => (configmap::set_up(ctx, vol)?, true),
        PluginKind::Secret => (secret::set_up(ctx, vol)?, true),
        PluginKind::DownwardApi => (downwardapi::set_up(ctx, vol)?, true),
        PluginKind::Projected => (projected::set_up(ctx, vol)?, true),
        PluginKind::PersistentVolumeClaim => match pvc::set_up(ctx, vol) {
            Ok(pvc::ClaimVolume::Path(path, read_only)) => (path, read_only),
            Ok(pvc::ClaimVolume::Csi(v)) => return csi_plugin(csi)?.set_up(ctx, &vol.name, &v),
            Err(e) => {
                // A published volume whose claim is read again (for an
                // expansion) stays in use when that read fails: logged,
                // not a FailedMount on a running pod (upstream only logs).
                return match csi.and_then(|c| c.published(ctx.pod_dir, &vol.name)) {
                    Some(mv) => {
                        log::warn!("volume {:?}: reading its claim again: {e}", vol.name);
                        Ok(mv)
                    }
                    None => Err(e),
                };
            }
        },
        PluginKind::Csi => {
            let src = vol
                .csi
                .as_ref()
                .ok_or_else(|| VolumeError::Invalid("no csi source".into()))?;
            let v = csi::setup::CsiVolume::inline(ctx.pod, &vol.name, src);
            return csi_plugin(csi)?.set_up(ctx, &vol.name, &v);
        }
        // No path: the container's mount names the image instead.
        PluginKind::Image => (PathBuf::new(), true),
    };
    Ok(MountedVolume {
        kind,
        host_path,
        read_only,
        block: false,
    })
}

fn csi_plugin(csi: Option<&Arc<csi::CsiPlugin>>) -> Result<&Arc<csi::CsiPlugin>, VolumeError> {
    csi.ok_or_else(|| {
        VolumeError::Invalid(
            "a CSI volume needs an API server (--kubeconfig); static pods cannot use it".into(),
        )
    })
}

/// Tears down one volume directory under the pod's `volumes/`: unmounts it
/// when it is a mount point, then removes it without crossing into another
/// filesystem (upstream TearDown + cleanupOrphanedPodDirs' care).
pub fn tear_down(dir: &Path) -> Result<(), VolumeError> {
    util::mount::unmount_if_mounted(dir).map_err(|e| io_failed(dir.display(), e))?;
    util::fs::remove_all_one_filesystem(dir).map_err(|e| io_failed(dir.display(), e))
}

/// The default file mode of content volumes (upstream 0644).
pub const DEFAULT_MODE: i32 = 0o644;

/// A `mode`/`defaultMode` as file permission bits; the API allows 0..=0777.
pub fn file_mode(mode: Option<i32>, default_mode: Option<i32>) -> Result<u32, VolumeError> {
    let m = mode.or(default_mode).unwrap_or(DEFAULT_MODE);
    if !(0..=0o777).contains(&m) {
        return Err(VolumeError::Invalid(format!(
            "mode {m:#o} must be between 0 and 0777"
        )));
    }
    Ok(m as u32)
}
