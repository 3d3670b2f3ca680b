//! Where a CSI volume's paths are (upstream `csi_mounter.go` and
//! `csi_block.go`): a filesystem volume is staged at a global mount and
//! published into the pod's volume directory; a raw block volume
//! (`volumeMode: Block`) is staged and published under the plugin's
//! `volumeDevices` directory, and the pod gets a link to the published
//! device, which its containers receive as `volumeDevices`.
//!
//! | path under the root dir | what |
//! | --- | --- |
//! | `plugins/kubernetes.io/csi/volumeDevices/staging/<pv>` | staging path |
//! | `plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<pod uid>` | target path (the driver makes the device file) |
//! | `plugins/kubernetes.io/csi/volumeDevices/<pv>/data/vol_data.json` | what tear-down needs |
//! | `pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>` | the pod's link to the device |
//!
//! Upstream also bind-mounts the device under the global map path and
//! holds it open through a loop device, so that it cannot be detached
//! while a container uses it; this kubelet does neither (see
//! docs/deviations.md).

use std::path::{Path, PathBuf};

use super::{CsiPlugin, CSI_DIR, PLUGIN_NAME};

/// The pod's directory for devices (upstream `volumeDevices`).
pub const POD_DEVICES_DIR: &str = "volumeDevices";

/// The paths of one CSI volume of one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Layout {
    /// What the volume manager knows the volume by, unique per pod and
    /// volume: the publish target, or the pod's link to a block device.
    pub key: PathBuf,
    /// `target_path` of NodePublishVolume.
    pub publish: PathBuf,
    /// `staging_target_path` of NodeStageVolume.
    pub staging: PathBuf,
    /// Where `vol_data.json` is kept for the pod's volume, and for the
    /// staged volume.
    pub pod_data: PathBuf,
    pub global_data: PathBuf,
    pub block: bool,
}

impl CsiPlugin {
    /// `plugins/kubernetes.io/csi`.
    fn plugin_dir(&self) -> PathBuf {
        self.root_dir.join("plugins").join(PLUGIN_NAME)
    }

    fn devices_dir(&self) -> PathBuf {
        self.plugin_dir().join(POD_DEVICES_DIR)
    }

    /// A filesystem volume: `<pod dir>/volumes/kubernetes.io~csi/<name>/mount`.
    pub(super) fn filesystem_layout(&self, pod_vol_dir: &Path, pv: &str) -> Layout {
        let global = self.global_dir(pv);
        let target = pod_vol_dir.join("mount");
        Layout {
            key: target.clone(),
            publish: target,
            staging: global.join("globalmount"),
            pod_data: pod_vol_dir.to_path_buf(),
            global_data: global,
            block: false,
        }
    }

    /// A raw block volume of the pod in `pod_dir`.
    pub(super) fn block_layout(&self, pod_dir: &Path, pv: &str) -> Layout {
        let uid = pod_dir.file_name().unwrap_or_default();
        let devices = self.devices_dir();
        let data = devices.join(pv).join("data");
        Layout {
            key: pod_dir.join(POD_DEVICES_DIR).join(CSI_DIR).join(pv),
            publish: devices.join("publish").join(pv).join(uid),
            staging: devices.join("staging").join(pv),
            pod_data: data.clone(),
            global_data: data,
            block: true,
        }
    }

    /// The layout a tear-down works from: `key` is a filesystem volume's
    /// target (`.../<name>/mount`) or a pod's link to a block device
    /// (`<pod dir>/volumeDevices/kubernetes.io~csi/<pv>`).
    pub(super) fn layout_of_key(&self, key: &Path) -> Layout {
        let parent = key.parent().unwrap_or(key);
        let is_link = parent.file_name().is_some_and(|n| n == CSI_DIR)
            && parent
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == POD_DEVICES_DIR);
        let name = key.file_name().unwrap_or_default().to_string_lossy();
        match parent.parent().and_then(Path::parent).filter(|_| is_link) {
            Some(pod_dir) => self.block_layout(pod_dir, &name),
            None => {
                // (the PV's name is only known from vol_data.json)
                let mut l = self.filesystem_layout(parent, "");
                l.global_data = PathBuf::new();
                l.staging = PathBuf::new();
                l
            }
        }
    }

    /// Another pod publishes the block volume of `layout`.
    pub(super) fn other_block_users(&self, layout: &Layout) -> bool {
        let Some(dir) = layout.publish.parent() else {
            return false;
        };
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| e.path() != layout.publish)
    }
}

/// Points the pod's link at the published device (upstream MapBlockVolume
/// makes the same link); an old link is replaced.
pub(super) fn link_pod_device(layout: &Layout) -> Result<(), String> {
    let err = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
    if let Some(dir) = layout.key.parent() {
        std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
    }
    match std::fs::remove_file(&layout.key) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(&layout.key, e)),
    }
    std::os::unix::fs::symlink(&layout.publish, &layout.key).map_err(|e| err(&layout.key, e))
}

/// After NodeUnpublishVolume of a block volume: the device file, if the
/// driver left it, and the pod's link.
pub(super) fn unlink_pod_device(layout: &Layout) -> Result<(), String> {
    super::teardown::ensure_unmounted(&layout.publish)?;
    for path in [&layout.publish, &layout.key] {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Ok(())
}

/// After NodeUnstageVolume of a block volume: its directories.
pub(super) fn remove_block_dirs(layout: &Layout) -> Result<(), String> {
    let data_dir = layout.global_data.parent().unwrap_or(&layout.global_data);
    let publish_dir = layout.publish.parent().unwrap_or(&layout.publish);
    for dir in [layout.staging.as_path(), data_dir, publish_dir] {
        super::teardown::remove_unmounted(dir, dir)?;
    }
    Ok(())
}
